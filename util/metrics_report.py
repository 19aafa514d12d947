"""FID/KID of a test.py run (`--eval_metrics`), computed from the images it saved.

Which images are compared (docs/evaluation.md):
  outputs    the saved `*_fake_B.png` (pix2pix, CycleGAN A->B), `*_fake_B_rgb.png` (colorization)
             or `*_fake.png` (--model test);
  reference  --fid_reference DIR when given, else the saved real images of the target domain
             (`*_real_B.png`, `*_real_B_rgb.png`); --model test has none, so it needs the flag.
CycleGAN runs also get FID_A/KID_A: `*_fake_A.png` against the saved `*_real_A.png`.

FID/KID run when --fid_reference is given (then missing Inception weights are an error), or when
Inception weights are found (or --fid_features random_cnn); otherwise they are skipped with a
note saying where to put the weights. Working from the saved 8-bit files makes the values the
same as `scripts/evaluate.py` gives on the results folder.
"""
from __future__ import annotations

import os
from typing import Any, Sequence

import torch

from util.errors import UserError
from util.fid import fid_kid, find_inception_weights, list_images, make_extractor, weights_help

# (output label, reference label, key suffix), first match per suffix wins.
OUTPUT_REFERENCES = (("fake_B", "real_B", ""), ("fake_B_rgb", "real_B_rgb", ""), ("fake", None, ""),
                     ("fake_A", "real_A", "_A"))


def saved_images(image_dir: str, rows: Sequence[tuple[list[str], list[str]]], label: str) -> list[str]:
    """Paths of the saved images labelled `label`; `rows` holds (files, labels) per test image."""
    return [os.path.join(image_dir, f) for files, labels in rows for f, lab in zip(files, labels) if lab == label]


def check_distribution_inputs(opt) -> None:
    """Before translating anything: a UserError if --fid_reference was given but cannot be used
    (no such folder, or no Inception weights for --fid_features inception)."""
    if not opt.fid_reference:
        return
    if not list_images(opt.fid_reference):  # raises for a missing folder
        raise UserError(f"--fid_reference {opt.fid_reference} holds no images; point it at a folder of real images.")
    if opt.fid_features == "inception" and find_inception_weights(opt.inception_weights or None) is None:
        raise UserError(weights_help())


def distribution_metrics(opt, image_dir: str, rows: Sequence[tuple[list[str], list[str]]],
                         device: torch.device | str = "cpu") -> dict[str, Any]:
    """FID/KID entries for metrics.json (see the module docstring); {'fid_skipped': why} when
    they cannot be computed."""
    weights = opt.inception_weights or None
    if opt.fid_features == "inception" and not opt.fid_reference and find_inception_weights(weights) is None:
        return {"fid_skipped": "no Inception weights were found (put pt_inception-2015-12-05-6726825d.pth in "
                               f"{os.path.join(torch.hub.get_dir(), 'checkpoints')} or pass --inception_weights; "
                               "see docs/evaluation.md)"}
    result: dict[str, Any] = {}
    extractor = None
    reasons = []
    for output_label, reference_label, suffix in OUTPUT_REFERENCES:
        outputs = saved_images(image_dir, rows, output_label)
        if not outputs or f"FID{suffix}" in result:
            continue
        if suffix == "" and opt.fid_reference:
            reference, reference_name = list_images(opt.fid_reference), opt.fid_reference
        elif reference_label:
            reference, reference_name = saved_images(image_dir, rows, reference_label), f"saved *_{reference_label} images"
        else:
            reasons.append(f"no reference for the *_{output_label} images: pass --fid_reference DIR")
            continue
        if len(outputs) < 2:
            reasons.append(f"only {len(outputs)} *_{output_label} image (FID/KID need 2 or more; raise --num_test)")
            continue
        if extractor is None:
            extractor = make_extractor(opt.fid_features, weights, device)
        scores = fid_kid(outputs, reference, extractor, device=device)
        key = f"KID{suffix}"
        result.update({f"FID{suffix}": scores["FID"], f"{key}_mean": scores["KID_mean"], f"{key}_std": scores["KID_std"]})
        if suffix == "":
            result.update({k: scores[k] for k in ("fid_generated_images", "fid_reference_images", "fid_features")})
            result["fid_reference"] = reference_name
    if "FID" not in result:
        result["fid_skipped"] = "; ".join(reasons) or "no output images to compare"
    return result


def describe_distribution(metrics: dict[str, Any]) -> str:
    """One line for the console and the results page."""
    if "FID" not in metrics:
        return f"FID/KID skipped: {metrics.get('fid_skipped', 'not computed')}"
    line = (f"FID {metrics['FID']:.4f}, KID {metrics['KID_mean']:.6f} +- {metrics['KID_std']:.6f} "
            f"({metrics['fid_generated_images']} outputs vs {metrics['fid_reference_images']} reference images "
            f"from {metrics['fid_reference']}, {metrics['fid_features']} features; FID is biased upwards for "
            f"small sets: compare runs at equal image counts)")
    if "FID_A" in metrics:
        line += f"; B->A: FID {metrics['FID_A']:.4f}, KID {metrics['KID_A_mean']:.6f} +- {metrics['KID_A_std']:.6f}"
    return line
