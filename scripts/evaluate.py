"""Score translated images: PSNR/SSIM/L1 against ground truth, FID/KID against real images.

    # a test.py results folder of paired data (pix2pix, colorization): targets are its *_real_B.png
    python scripts/evaluate.py results/facades_pix2pix/test_latest --targets real --reference real
    # CycleGAN: how close are the translated horses to real zebras?
    python scripts/evaluate.py results/horse2zebra/test_latest --reference datasets/horse2zebra/testB
    # any two folders of images with the same file names, plus a folder of real images
    python scripts/evaluate.py outputs/ --targets ground_truth/ --reference real_photos/

RESULTS is a test.py results folder (with images/; the outputs are its *_<--output_label>.png,
found automatically among fake_B, fake_B_rgb and fake) or a plain folder of output images.
--targets DIR|real: paired metrics, each output against the target of the same name ('real': the
saved *_real_B.png of the results folder). --reference DIR|real: FID and KID of all outputs against
all images in DIR. Everything is measured on the 8-bit image files, as in docs/evaluation.md.
Prints a table and writes JSON (default RESULTS/evaluation.json). Exit status 2 on bad input.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from util.errors import EXIT_USER_ERROR, UserError, describe  # noqa: E402
from util.fid import (FEATURE_CHOICES, IMAGE_EXTENSIONS, fid_kid, list_images,  # noqa: E402
                      make_extractor)
from util.metrics import l1_uint8, psnr_uint8, ssim_uint8  # noqa: E402

OUTPUT_LABELS = ("fake_B", "fake_B_rgb", "fake")
TARGET_FOR = {"fake_B": "real_B", "fake_B_rgb": "real_B_rgb", "fake": None}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("results", help="test.py results folder (with images/) or a folder of output images")
    parser.add_argument("--targets", default="", help="folder of ground-truth images with the outputs' names, "
                        "or 'real' for the results folder's saved real images: PSNR, SSIM, L1")
    parser.add_argument("--reference", default="", help="folder of real images, or 'real': FID and KID")
    parser.add_argument("--output_label", default="", help="label of the output images in a test.py folder "
                        f"(default: the first of {', '.join(OUTPUT_LABELS)} present)")
    parser.add_argument("--target_label", default="", help="label of the saved targets (default: real_B, or "
                        "real_B_rgb for fake_B_rgb)")
    parser.add_argument("--fid_features", default="inception", choices=FEATURE_CHOICES,
                        help="feature network; random_cnn is for smoke tests only")
    parser.add_argument("--inception_weights", default="", help="Inception weights file (default: "
                        "$IMG2IMG_INCEPTION_WEIGHTS or pt_inception-2015-12-05-6726825d.pth in $TORCH_HOME/hub/checkpoints)")
    parser.add_argument("--batch_size", type=int, default=32, help="images per feature batch")
    parser.add_argument("--device", default="cpu", help="device for the feature network (cpu, cuda)")
    parser.add_argument("--kid_subsets", type=int, default=100, help="KID: number of random subsets")
    parser.add_argument("--kid_subset_size", type=int, default=1000, help="KID: images per subset (capped at the set sizes)")
    parser.add_argument("--json", default="", help="where to write the scores (default RESULTS/evaluation.json)")
    return parser.parse_args(argv)


class Outputs:
    """The output images of RESULTS: `paths` and, per path, the key that names its target."""

    def __init__(self, results: str, output_label: str):
        if not os.path.isdir(results):
            raise UserError(f"results folder {results} does not exist; pass the folder test.py printed "
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
            raise UserError(f"{self.folder} has no images ({', '.join(IMAGE_EXTENSIONS)}).")

    def key(self, path: str) -> str:
        return _stem(path)[: -len(self.label) - 1] if self.label else _stem(path)

    def saved(self, label: str) -> list[str]:
        """The results folder's saved images labelled `label` (e.g. real_B)."""
        return list_images(self.folder, "_" + label) if self.from_test_py else []


def _stem(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0]


def _uint8(path: str) -> np.ndarray:
    from util.fid import load_rgb

    return load_rgb(path).permute(1, 2, 0).mul(255).round().byte().numpy()


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
    scores: dict[str, list[float]] = {"PSNR": [], "SSIM": [], "L1": []}
    for path in outputs.paths:
        target = by_key[outputs.key(path)]
        out8, tgt8 = (_uint8(p) for p in (path, target))
        if out8.shape != tgt8.shape:
            raise UserError(f"output {path} is {out8.shape[1]}x{out8.shape[0]} but its target {target} is "
                            f"{tgt8.shape[1]}x{tgt8.shape[0]}; paired metrics need images of the same size.")
        scores["PSNR"].append(min(psnr_uint8(out8, tgt8), 100.0))
        scores["SSIM"].append(ssim_uint8(out8, tgt8))
        scores["L1"].append(l1_uint8(out8, tgt8))
    return {"paired_images": len(outputs.paths), **{k: float(np.mean(v)) for k, v in scores.items()}}


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
        extractor = make_extractor(args.fid_features, args.inception_weights or None, args.device)
        result.update(fid_kid(outputs.paths, reference, extractor, args.batch_size, args.device,
                              args.kid_subsets, args.kid_subset_size))
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        result = evaluate(args)
    except UserError as err:
        print(describe(err), file=sys.stderr)
        return EXIT_USER_ERROR
    for key in ("PSNR", "SSIM", "L1", "FID", "KID_mean", "KID_std"):
        if key in result:
            print(f"{key:<10}{result[key]:.6f}")
    path = args.json or os.path.join(args.results, "evaluation.json")
    with open(path, "wt") as f:
        json.dump(result, f, indent=1)
    print(f"scores of {result['outputs']} images written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
