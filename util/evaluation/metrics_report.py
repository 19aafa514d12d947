"""Metrics of a test.py run (`metrics.json`) and of image folders (scripts/evaluate.py), through
util.evaluation.metrics.TranslationMetrics: the implementation validation uses.

test.py scores the translated images in memory (the first image of each batch: the one it saves), the
(output, target) visuals the model names (BaseModel.scored_pairs; the first pair are "the outputs"):
  paired data (aligned, colorization)  L1, PSNR, SSIM of the output against its target, and of the
                                       do-nothing baseline (input against target) when they have
                                       the same shape; with --eval_metrics also FID/KID;
  --eval_metrics                       FID/KID of the outputs (fake_B, fake_B_rgb or fake) against
                                       --fid_reference DIR when given, else the test set's real images
                                       of the target domain; CycleGAN also gets FID_A/KID_A
                                       (fake_A against real_A).
metrics.json keeps the keys of earlier versions: output_L1, output_PSNR, output_SSIM, identity_*,
FID, KID_mean, KID_std, FID_A, KID_A_mean, KID_A_std (docs/evaluation.md).
"""
from __future__ import annotations

import os
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np
import torch
from PIL import Image

from util import distributed
from util.errors import UserError
from util.evaluation.inception import inception_weights_available, missing_inception_weights_message
from util.evaluation.metrics import PAIRED_METRICS, TranslationMetrics

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".ppm", ".tif", ".tiff", ".webp")
FEATURES_NAME = "inception-v3 (torch-fidelity, 2048-d pool3)"
# TranslationMetrics key -> metrics.json / evaluation.json key, where earlier versions named it otherwise
LEGACY_KEYS = {"KID": "KID_mean", "KID_A": "KID_A_mean"}


def list_images(folder: str, suffix: str = "") -> list[str]:
    """Image files directly in `folder` whose name (without extension) ends with `suffix`, sorted."""
    if not os.path.isdir(folder):
        raise UserError(f"image folder {folder} does not exist; pass a folder of images.")
    names = sorted(n for n in os.listdir(folder)
                   if n.lower().endswith(IMAGE_EXTENSIONS) and os.path.splitext(n)[0].endswith(suffix))
    return [os.path.join(folder, n) for n in names]


def load_image(path: str) -> torch.Tensor:
    """An image file as a 1x3xHxW tensor in [-1, 1], as the networks' images are."""
    try:
        with Image.open(path) as img:
            array = np.asarray(img.convert("RGB"), dtype=np.float32)
    except (OSError, ValueError) as err:
        raise UserError(f"cannot read image {path} ({err}); remove or replace the file.") from None
    return torch.from_numpy(array).permute(2, 0, 1)[None] / 127.5 - 1.0


def image_batches(paths: Sequence[str], batch_size: int) -> Iterator[torch.Tensor]:
    """The images at `paths` in order, as batches of up to `batch_size` images of one size."""
    batch: list[torch.Tensor] = []
    for path in paths:
        image = load_image(path)
        if batch and (len(batch) == batch_size or batch[0].shape != image.shape):
            yield torch.cat(batch)
            batch = []
        batch.append(image)
    if batch:
        yield torch.cat(batch)


def add_reference_folder(metrics: TranslationMetrics, name: str, paths: Sequence[str], batch_size: int = 1) -> None:
    """Feed the real images at `paths` to FID/KID of pair `name`, each process its share."""
    share = paths[distributed.rank()::distributed.world_size()]
    for batch in image_batches(share, batch_size):
        metrics.add_reference(name, batch)


def legacy_names(scores: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """`scores` under the keys of earlier versions: paired metrics get `prefix`, KID its _mean."""
    named = {}
    for key, value in scores.items():
        if key.split("_", 1)[0] in PAIRED_METRICS:
            named[prefix + key] = value
        else:
            named[LEGACY_KEYS.get(key, key)] = value
    return named


# ---------------------------------------------------------------------------- test.py
def check_distribution_inputs(opt) -> None:
    """Before translating anything: a UserError if --eval_metrics --fid_reference was given but cannot
    be used (no such folder, no images in it, or no Inception weights)."""
    if not (opt.eval_metrics and opt.fid_reference):
        return
    if not list_images(opt.fid_reference):  # raises for a missing folder
        raise UserError(f"--fid_reference {opt.fid_reference} holds no images; point it at a folder of real images.")
    if not inception_weights_available(opt.inception_weights or None):
        raise UserError(f"--fid_reference needs FID. {missing_inception_weights_message()}")


class InferenceMetrics:
    """What test.py measures (the module docstring): the outputs' metrics and the baseline's."""

    def __init__(self, opt, pairs: Mapping[str, tuple[str, str | None]], input_visual: str | None,
                 device: torch.device, paired: bool) -> None:
        """`pairs`: the model's scored (output, target) visuals for this data (`scored_pairs(paired)`);
        the first are "the outputs", keyed plainly (FID, output_L1), the others keep their suffix
        (CycleGAN's B->A: FID_A). `input_visual`: the model's input, for the do-nothing baseline."""
        if pairs:
            first = next(iter(pairs))
            pairs = {"": pairs[first], **{k: v for k, v in pairs.items() if k != first}}
        self.pairs = dict(pairs)
        self.eval_metrics = opt.eval_metrics
        self.reference = opt.fid_reference if opt.eval_metrics else ""
        self.target = pairs.get("", (None, None))[1]
        has_reference = bool(self.reference) or self.target is not None
        self.outputs = TranslationMetrics(pairs, paired=paired, distribution=opt.eval_metrics and has_reference,
                                          device=device, inception_weights=opt.inception_weights or None,
                                          external_reference={""} if self.reference else ())
        # the do-nothing baseline: the input itself, where it can be compared with the target
        self.baseline = None
        if paired and self.target is not None and opt.input_nc == opt.output_nc and input_visual is not None:
            self.baseline = TranslationMetrics({"": (input_visual, self.target)}, paired=True, device=device)

    def update(self, visuals: dict[str, torch.Tensor]) -> None:
        first = {name: image[:1] for name, image in visuals.items()}  # the saved image of the batch
        self.outputs.update(first)
        if self.baseline is not None:
            self.baseline.update(first)

    def compute(self) -> dict[str, Any]:
        """metrics.json's content; reads the --fid_reference images first (collective: every process
        calls it)."""
        if self.reference:
            add_reference_folder(self.outputs, "", list_images(self.reference))
        scores = self.outputs.compute()
        counts = self.outputs.image_counts.get("", {})
        summary: dict[str, Any] = {"images": counts["paired"]} if counts.get("paired") else {}
        summary.update(legacy_names(scores, "output_"))
        if self.baseline is not None:
            summary.update(legacy_names(self.baseline.compute(), "identity_"))
        if not self.eval_metrics:
            return summary
        if "FID" in scores:
            summary.update(fid_generated_images=counts["outputs"], fid_reference_images=counts["reference"],
                           fid_features=FEATURES_NAME,
                           fid_reference=self.reference or f"the test set's {self.target} images")
        elif "" not in self.pairs:
            summary["fid_skipped"] = "the model names no output to score (its scored_pairs)"
        elif self.target is None and not self.reference:
            summary["fid_skipped"] = f"the {self.pairs[''][0]} images have no targets: pass --fid_reference DIR"
        else:
            summary["fid_skipped"] = self.outputs.skipped.get("FID", "no output images to compare")
        return summary


def describe_distribution(metrics: dict[str, Any]) -> str:
    """One line for the console and the results page."""
    if "FID" not in metrics:
        return f"FID/KID skipped: {metrics.get('fid_skipped', 'not computed')}"
    line = (f"FID {metrics['FID']:.4f}, KID {metrics['KID_mean']:.6f} +- {metrics['KID_std']:.6f} "
            f"({metrics['fid_generated_images']} outputs vs {metrics['fid_reference_images']} reference images "
            f"from {metrics['fid_reference']}; FID is biased upwards for small sets: compare runs at equal image "
            f"counts)")
    if "FID_A" in metrics:
        line += f"; B->A: FID {metrics['FID_A']:.4f}, KID {metrics['KID_A_mean']:.6f} +- {metrics['KID_A_std']:.6f}"
    return line


def paired_summary(metrics: dict[str, Any]) -> Iterable[str]:
    """'key value' texts of the paired metrics in `metrics`, for the console and the results page."""
    return (f"{k} {v:.4f}" for k, v in metrics.items() if k.startswith(("output_", "identity_")))
