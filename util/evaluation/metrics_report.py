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
  --n_samples N (models with many      diversity_L1 (and with --eval_metrics diversity_LPIPS) of each
  answers per input)                   input's N samples (util/evaluation/diversity.py); with
                                       --eval_metrics also FID_random/KID_random: the samples against
                                       the same real images as the outputs.
metrics.json keeps the keys of earlier versions: output_L1, output_PSNR, output_SSIM, identity_*,
FID, KID_mean, KID_std, FID_A, KID_A_mean, KID_A_std (docs/evaluation.md).
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import torch

from util.errors import UserError
from util.evaluation.diversity import SampleDiversity
from util.evaluation.inception import inception_weights_available, missing_inception_weights_message
from util.evaluation.metrics import PAIRED_METRICS, TranslationMetrics

FEATURES_NAME = "inception-v3 (torch-fidelity, 2048-d pool3)"
# TranslationMetrics key -> metrics.json / evaluation.json key, where earlier versions named it otherwise
LEGACY_KEYS = {"KID": "KID_mean", "KID_A": "KID_A_mean"}


def legacy_names(scores: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """`scores` under the keys of earlier versions: paired metrics get `prefix`, KID its _mean."""
    named = {}
    for key, value in scores.items():
        if key.split("_", 1)[0] in (*PAIRED_METRICS, "MAE"):  # MAE: volumes, in the data's units
            named[prefix + key] = value
        else:
            named[LEGACY_KEYS.get(key, key)] = value
    return named


# ---------------------------------------------------------------------------- test.py
def check_distribution_inputs(opt, reference_images: Sequence[str]) -> None:
    """Before translating anything: a UserError if --eval_metrics --fid_reference was given but cannot
    be used (`reference_images`, the files in it, are none, or there are no Inception weights)."""
    if not (opt.eval_metrics and opt.fid_reference):
        return
    if not reference_images:
        raise UserError(f"--fid_reference {opt.fid_reference} holds no images; point it at a folder of real images.")
    if not inception_weights_available(opt.inception_weights or None):
        raise UserError(f"--fid_reference needs FID. {missing_inception_weights_message()}")


def volume_units(dataset, pairs: Mapping[str, tuple[str, str | None]],
                 domains: Mapping[str, str] | None) -> dict[str, float] | None:
    """For a dataset of volumes, each pair's MAE unit: half the width of its target domain's window
    (`dataset.window`); None for pictures."""
    if getattr(dataset, "spatial_dims", 2) != 3:
        return None
    units = {}
    for name, (_, target) in pairs.items():
        if target is not None and domains and target in domains:
            low, high = dataset.window(domains[target])
            units[name] = (high - low) / 2.0
    return units


class InferenceMetrics:
    """What test.py measures (the module docstring): the outputs' metrics and the baseline's."""

    def __init__(self, opt, pairs: Mapping[str, tuple[str, str | None]], input_visual: str | None,
                 device: torch.device, paired: bool, sample_visual: str | None = None,
                 volume_units: Mapping[str, float] | None = None) -> None:
        """`pairs`: the model's scored (output, target) visuals for this data (`scored_pairs(paired)`);
        the first are "the outputs", keyed plainly (FID, output_L1), the others keep their suffix
        (CycleGAN's B->A: FID_A). `input_visual`: the model's input, for the do-nothing baseline.
        `sample_visual`: with --n_samples, the visual whose `<name>_random<k>` are the samples."""
        if pairs:
            first = next(iter(pairs))
            pairs = {"": pairs[first], **{k: v for k, v in pairs.items() if k != first}}
        self.pairs = dict(pairs)
        self.eval_metrics = opt.eval_metrics
        self.reference = opt.fid_reference if opt.eval_metrics else ""
        self.target = pairs.get("", (None, None))[1]
        has_reference = bool(self.reference) or self.target is not None
        # volumes: MAE in each target's units, keyed like the pairs (the first pair's plainly)
        first_units = {"" if pairs and k == first else k: v for k, v in (volume_units or {}).items()}
        volumes = {"volume_units": first_units, "mask": opt.eval_mask} if volume_units is not None else {}
        self.outputs = TranslationMetrics(pairs, paired=paired, distribution=opt.eval_metrics and has_reference,
                                          device=device, inception_weights=opt.inception_weights or None,
                                          external_reference={""} if self.reference else (), **volumes)
        # the do-nothing baseline: the input itself, where it can be compared with the target
        self.baseline = None
        if paired and self.target is not None and opt.input_nc == opt.output_nc and input_visual is not None:
            # the input scored against the same target: in the target's units
            baseline_volumes = {**volumes, "volume_units": {k: v for k, v in first_units.items() if k == ""}} \
                if volumes else {}
            self.baseline = TranslationMetrics({"": (input_visual, self.target)}, paired=True, device=device,
                                               **baseline_volumes)
        # --n_samples: how different the samples are, and (--eval_metrics) how real they look
        count = opt.n_samples if sample_visual else 0
        self.samples = [f"{sample_visual}_random{k}" for k in range(count)]
        self.diversity = SampleDiversity(device, lpips=opt.eval_metrics) if self.samples else None
        self.random = None
        if self.samples and opt.eval_metrics and has_reference:
            self.random = TranslationMetrics({"random": ("samples", None)}, paired=False, distribution=True,
                                             device=device, inception_weights=opt.inception_weights or None,
                                             external_reference={"random"})

    def update(self, visuals: dict[str, torch.Tensor]) -> None:
        first = {name: image[:1] for name, image in visuals.items()}  # the saved image of the batch
        self.outputs.update(first)
        if self.baseline is not None:
            self.baseline.update(first)
        if self.diversity is not None:
            self.diversity.update([first[name] for name in self.samples])
        if self.random is not None:
            self.random.update({"samples": torch.cat([first[name] for name in self.samples])})
            if not self.reference:  # the test set's real images, as the outputs are compared with
                self.random.add_reference("random", first[self.target])

    def compute(self, reference_batches: Iterable[torch.Tensor] = ()) -> dict[str, Any]:
        """metrics.json's content, after feeding `reference_batches` (this process's share of the
        --fid_reference images) to FID/KID (collective: every process calls it)."""
        for batch in reference_batches:
            self.outputs.add_reference("", batch)
            if self.random is not None:
                self.random.add_reference("random", batch)
        scores = self.outputs.compute()
        counts = self.outputs.image_counts.get("", {})
        summary: dict[str, Any] = {"images": counts["paired"]} if counts.get("paired") else {}
        summary.update(legacy_names(scores, "output_"))
        if self.baseline is not None:
            summary.update(legacy_names(self.baseline.compute(), "identity_"))
        if self.diversity is not None:
            summary.update(self.diversity.compute(), samples_per_input=len(self.samples))
            summary.update({f"{key}_skipped": why for key, why in self.diversity.skipped.items()})
        if self.random is not None:
            summary.update(self.random.compute())
            summary.update({f"{key}_skipped": why for key, why in self.random.skipped.items()})
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
    return (f"{k} {v:.4f}" for k, v in metrics.items()
            if k.startswith(("output_", "identity_", "diversity_")) and not k.endswith("_skipped"))
