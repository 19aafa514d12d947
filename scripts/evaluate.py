"""Score translated images: PSNR/SSIM/L1 against ground truth, FID/KID against real images.

    # a test.py results folder of paired data (pix2pix, colorization): targets are its *_real_B.png
    python scripts/evaluate.py results/facades_pix2pix/test_latest --targets real --reference real
    # CycleGAN: how close are the translated horses to real zebras?
    python scripts/evaluate.py results/horse2zebra/test_latest --reference datasets/horse2zebra/testB
    # any two folders of images with the same file names, plus a folder of real images
    python scripts/evaluate.py outputs/ --targets ground_truth/ --reference real_photos/

RESULTS is a test.py results folder (with images/; the outputs are its *_<--output_label>.png,
found automatically among the outputs the built-in models score: fake_B, fake_B_rgb, fake, ...) or a
plain folder of output images.
--targets DIR|real: paired metrics, each output against the target of the same name ('real': the
saved *_real_B.png of the results folder). --reference DIR|real: FID and KID of all outputs against
all images in DIR. The files are read into [-1, 1] tensors and scored by util.evaluation.metrics, the code that
validation and test.py use: FID/KID equal test.py's (the Inception sees the same 8-bit values);
L1/PSNR/SSIM differ from test.py's in-memory values only by the files' 8-bit rounding.
Prints a table and writes JSON (default RESULTS/evaluation.json). Exit status 2 on bad input.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402

from data.image_folder import PIL_EXTENSIONS, image_batches, is_image_file, list_images, load_image_tensor  # noqa: E402
from models import builtin_models  # noqa: E402
from util.console import setup_logging  # noqa: E402
from util.errors import UserError, exit_with_status, exits_on_user_error  # noqa: E402
from util.evaluation.inception import (  # noqa: E402
    add_inception_weights_flag,
    inception_weights_available,
    missing_inception_weights_message,
)
from util.evaluation.metrics import KID_SUBSET_SIZE, KID_SUBSETS, TranslationMetrics  # noqa: E402
from util.evaluation.metrics_report import FEATURES_NAME, legacy_names  # noqa: E402
from util.flag_types import Bounded, OneParagraphParser, batch_size  # noqa: E402
from util.paths import unwritable_file_reason, why_missing  # noqa: E402
from util.safe_files import atomic_write_json  # noqa: E402


def scored_outputs() -> dict[str, str | None]:
    """The output visual each built-in model's test.py scores first ("the outputs"), with its target
    visual (None: it has none), e.g. {"fake_B": "real_B", ..., "fake": None}."""
    outputs: dict[str, str | None] = {}
    for model_class in builtin_models().values():
        for paired in (True, False):
            pairs = model_class.scored_pairs(paired)
            if pairs:
                output, target = next(iter(pairs.values()))
                outputs.setdefault(output, target)
    return outputs


TARGET_FOR = scored_outputs()  # output label -> target label
OUTPUT_LABELS = tuple(TARGET_FOR)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = OneParagraphParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("results", help="test.py results folder (with images/) or a folder of output images")
    parser.add_argument("--targets", default="", help="folder of ground-truth images with the outputs' names, "
                        "or 'real' for the results folder's saved real images: PSNR, SSIM, L1")
    parser.add_argument("--reference", default="", help="folder of real images, or 'real': FID and KID")
    parser.add_argument("--output_label", default="", help="label of the output images in a test.py folder "
                        f"(default: the first of {', '.join(OUTPUT_LABELS)} present)")
    parser.add_argument("--target_label", default="", help="label of the saved targets (default: the output's "
                        "target, e.g. real_B for fake_B, real_B_rgb for fake_B_rgb)")
    parser = add_inception_weights_flag(parser)
    parser.add_argument("--batch_size", type=batch_size, default=32, help="images of one size per Inception batch")
    parser.add_argument("--device", default="cpu", help="device for the feature network (cpu, cuda)")
    parser.add_argument("--kid_subsets",type=Bounded(int, low=1, high=100_000, name="kid_subsets"),default=KID_SUBSETS,
                        help="KID: number of random subsets")
    parser.add_argument("--kid_subset_size", type=Bounded(int, low=2, name="kid_subset_size"), default=KID_SUBSET_SIZE,
                        help="KID: images per subset (capped at the set sizes)")
    parser.add_argument("--json", default="", help="where to write the scores (default RESULTS/evaluation.json)")
    args = parser.parse_args(argv)
    check_device(parser, args.device)
    reason = unwritable_file_reason(json_path(args))
    if reason:  # refused now, not after the scores have been computed
        parser.error(f"argument --json: cannot write the scores to {json_path(args)} ({reason}); "
                     f"pass --json with another file")
    if is_image_file(json_path(args)):  # an image among those scored (or any image) is never written over
        parser.error(f"argument --json: {json_path(args)} is an image file name, and the scores are JSON; pass "
                     f"--json with a .json file, e.g. --json {os.path.splitext(json_path(args))[0]}.json")
    return args


def json_path(args: argparse.Namespace) -> str:
    return args.json or os.path.join(args.results, "evaluation.json")


def check_device(parser: argparse.ArgumentParser, device: str) -> None:
    """Refuse a --device that is not one, or CUDA where PyTorch sees no GPU."""
    try:
        kind = torch.device(device).type
    except RuntimeError:
        parser.error(f"argument --device: {device!r} is not a device; use cpu, cuda or cuda:N")
    if kind == "cuda" and not torch.cuda.is_available():
        parser.error("argument --device: PyTorch sees no CUDA GPU on this machine; use --device cpu")


class Outputs:
    """The output images of RESULTS: `paths` and, per path, the key that names its target."""

    def __init__(self, results: str, output_label: str):
        if not os.path.isdir(results):
            raise UserError(f"results folder {results} {why_missing(results)}; pass the folder test.py printed "
                            f"(results/<name>/<phase>_<epoch>) or a folder of images.")
        images = os.path.join(results, "images")
        self.from_test_py = os.path.isdir(images)
        self.folder = images if self.from_test_py else results
        self.label = ""
        if self.from_test_py:
            labels = [output_label] if output_label else OUTPUT_LABELS
            for label in labels:
                if list_images(self.folder, "_" + label):
                    self.label = label
                    break
            else:
                raise UserError(f"{self.folder} has no *_{'.png, *_'.join(labels)}.png images; pass --output_label "
                                f"with the label of the translated images (the part after the last '_').")
        self.paths = list_images(self.folder, "_" + self.label if self.label else "")
        if not self.paths:
            raise UserError(f"{self.folder} has no images ({', '.join(PIL_EXTENSIONS)}).")

    def key(self, path: str) -> str:
        return _stem(path)[: -len(self.label) - 1] if self.label else _stem(path)

    def saved(self, label: str) -> list[str]:
        """The results folder's saved images labelled `label` (e.g. real_B)."""
        return list_images(self.folder, "_" + label) if self.from_test_py else []


def _stem(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0]


def real_label(outputs: Outputs, target_label: str, flag: str) -> str:
    label = target_label or TARGET_FOR.get(outputs.label) or ""
    if not outputs.from_test_py or not label:
        raise UserError(f"{flag} real needs a test.py results folder whose outputs have saved real images "
                        f"(*_real_B.png); pass {flag} with a folder of images instead.")
    return label


def paired_scores(outputs: Outputs, targets: str, target_label: str) -> dict[str, float]:
    """Mean PSNR/SSIM/L1 of each output against the target image with the same key."""
    if targets == "real":
        label = real_label(outputs, target_label, "--targets")
        by_key = {_stem(p)[: -len(label) - 1]: p for p in outputs.saved(label)}
    else:
        by_key = {_stem(p): p for p in list_images(targets)}
    missing = [p for p in outputs.paths if outputs.key(p) not in by_key]
    if missing:
        where = f"saved *_{target_label or TARGET_FOR.get(outputs.label)} images" if targets == "real" else targets
        raise UserError(f"{len(missing)} output image(s) have no target of the same name in {where}, e.g. "
                        f"{', '.join(missing[:3])}; targets are matched by file name without extension.")
    metrics = TranslationMetrics({"": ("output", "target")}, paired=True)
    for path in outputs.paths:
        target = by_key[outputs.key(path)]
        output_image, target_image = load_image_tensor(path), load_image_tensor(target)
        if output_image.shape != target_image.shape:
            (oh, ow), (th, tw) = output_image.shape[-2:], target_image.shape[-2:]
            raise UserError(f"output {path} is {ow}x{oh} but its target {target} is {tw}x{th}; paired metrics "
                            f"need images of the same size.")
        metrics.update({"output": output_image, "target": target_image})
    return {"paired_images": len(outputs.paths), **metrics.compute(), **_skipped(metrics)}


def distribution_scores(outputs: Outputs, reference: list[str], args: argparse.Namespace) -> dict:
    """FID and KID of all outputs against all `reference` images."""
    if not inception_weights_available(args.inception_weights or None):
        raise UserError(missing_inception_weights_message())
    metrics = TranslationMetrics({"": ("output", None)}, paired=False, distribution=True, device=args.device,
                                 inception_weights=args.inception_weights or None, external_reference={""},
                                 kid_subsets=args.kid_subsets, kid_subset_size=args.kid_subset_size)
    for batch in image_batches(outputs.paths, args.batch_size):
        metrics.update({"output": batch})
    for batch in image_batches(reference, args.batch_size):
        metrics.add_reference("", batch)
    scores = legacy_names(metrics.compute())
    counts = metrics.image_counts[""]
    if "FID" not in scores:
        raise UserError(f"FID/KID cannot be computed: {metrics.skipped['FID']}.")
    return {**scores, "fid_generated_images": counts["outputs"], "fid_reference_images": counts["reference"],
            "fid_features": FEATURES_NAME}


def _skipped(metrics: TranslationMetrics) -> dict:
    return {"skipped": metrics.skipped} if metrics.skipped else {}


def evaluate(args: argparse.Namespace) -> dict:
    """All requested scores as a JSON-ready dict."""
    if not args.targets and not args.reference:
        raise UserError("nothing to compute: pass --targets (PSNR, SSIM, L1 against ground truth) and/or "
                        "--reference (FID, KID against real images); see docs/evaluation.md.")
    outputs = Outputs(args.results, args.output_label)
    result: dict = {"results": os.path.abspath(args.results), "outputs": len(outputs.paths),
                    "output_label": outputs.label or None}
    if args.targets:
        result.update(paired_scores(outputs, args.targets, args.target_label))
    if args.reference:
        if args.reference == "real":
            reference = outputs.saved(real_label(outputs, args.target_label, "--reference"))
            result["fid_reference"] = f"saved real images in {outputs.folder}"
        else:
            reference = list_images(args.reference)
            result["fid_reference"] = os.path.abspath(args.reference)
        result.update(distribution_scores(outputs, reference, args))
    return result


@exits_on_user_error(memory_advice="lower --batch_size")
def main(argv: list[str] | None = None) -> int:
    setup_logging()
    args = parse_args(argv)
    result = evaluate(args)
    for key in ("PSNR", "SSIM", "L1", "FID", "KID_mean", "KID_std"):
        if key in result:
            print(f"{key:<10}{result[key]:.6f}")
    path = json_path(args)
    atomic_write_json(path, result, indent=1)
    print(f"scores of {result['outputs']} images written to {path}")
    return 0


if __name__ == "__main__":
    exit_with_status(main())
