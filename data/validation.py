"""Cheap up-front checks of the dataset folder layout, run before any model is built.

They catch the common mistakes (wrong --dataroot, wrong --phase, wrong --dataset_mode for
the folder layout) in a fraction of a second and say how to fix them, instead of failing
later, after the networks have been created.
"""

from __future__ import annotations

import argparse
import os
from itertools import islice

from data.image_folder import IMG_EXTENSIONS, iter_image_files
from util.errors import UserError


def _has_image(folder: str) -> bool:
    return next(iter_image_files(folder), None) is not None


def _some_files(folder: str, limit: int = 3) -> list[str]:
    found = (name for _, _, files in os.walk(folder) for name in files)
    return list(islice(found, limit))


def _require_images(folder: str, why: str) -> None:
    if not os.path.isdir(folder):
        raise UserError(f"missing folder {folder}: {why}")
    if not _has_image(folder):
        others = _some_files(folder)
        seen = f" (it holds e.g. {', '.join(others)})" if others else " (it is empty)"
        raise UserError(
            f"folder {folder} contains no images{seen}; accepted extensions are "
            f"{', '.join(IMG_EXTENSIONS)} in any letter case. Add images or fix --dataroot/--phase."
        )


def check_dataset_root(opt: argparse.Namespace) -> None:
    """Raise `UserError` if `opt.dataroot` lacks the folders/images `opt.dataset_mode` reads.

    aligned/colorization/template: `dataroot/phase`; unaligned: `dataroot/phaseA` and
    `dataroot/phaseB`; single: images anywhere under `dataroot`. Unknown modes are skipped
    (custom datasets check their own files).
    """
    root, phase, mode = opt.dataroot, opt.phase, opt.dataset_mode
    if not root or not os.path.isdir(root):
        raise UserError(f"dataset root {root} does not exist; set --dataroot to the dataset folder.")
    if mode == "unaligned":
        if not os.path.isdir(os.path.join(root, phase + "A")) and os.path.isdir(os.path.join(root, phase)):
            hint = f"; {os.path.join(root, phase)} exists, so for A|B side-by-side images use --dataset_mode aligned"
        else:
            hint = ""
        why = (f"unaligned datasets need {os.path.join(root, phase + 'A')} and "
               f"{os.path.join(root, phase + 'B')}; check --dataroot/--phase{hint}.")
        for suffix in ("A", "B"):
            _require_images(os.path.join(root, phase + suffix), why)
    elif mode in ("aligned", "colorization", "template"):
        folder = os.path.join(root, phase)
        if not os.path.isdir(folder) and os.path.isdir(os.path.join(root, phase + "A")):
            hint = (f"; {os.path.join(root, phase + 'A')} exists, so for separate A and B folders use "
                    f"--dataset_mode unaligned")
        else:
            hint = ""
        _require_images(folder, f"--dataset_mode {mode} reads images from {folder}; check --dataroot/--phase{hint}.")
    elif mode == "single":
        if not _has_image(root):
            sub = os.path.join(root, phase + "A")
            hint = f" For example --dataroot {sub}." if os.path.isdir(sub) else ""
            raise UserError(
                f"dataset root {root} contains no images; --dataset_mode single reads the images "
                f"directly under --dataroot (e.g. datasets/horse2zebra/testA).{hint}"
            )
