"""Cheap up-front checks of the dataset, run before any model is built.

They catch the common mistakes (wrong --dataroot, wrong --phase, wrong --dataset_mode for
the folder layout) and bad image files (empty, not an image, unreadable header, an odd-width
A|B image, a size the generator cannot take) in seconds and say how to fix them, instead of
failing later, after the networks have been created or in the middle of an epoch.

Image files are checked from their headers only (size and pixel mode, no decoding: cheap; see
docs/benchmarks.md), in the order the dataset lists them, for at most `HEADER_CHECK_SECONDS`; files
not reached by then (huge datasets, slow network disks) are checked when first loaded, like
files damaged after their header (truncated JPEGs), which no header check can see.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from dataclasses import dataclass
from itertools import islice

from data.base_dataset import _resized_size
from data.image_folder import IMG_EXTENSIONS, channel_mismatch, iter_image_files
from data.image_io import convertible, probe_image
from data.layout import FileGroup, RequiredFolder
from data.registry import built_in_datasets, find_dataset_using_name
from data.volume_io import NIFTI_EXTENSIONS
from util.console import print0
from util.errors import UserError
from util.paths import broken_link, why_missing

logger = logging.getLogger(__name__)

# Wall-clock budget for reading image headers. Local disks read a large dataset's headers well within
# it (docs/benchmarks.md); it matters on slow (network) disks, where the check stops early rather
# than delay the start of the run.
HEADER_CHECK_SECONDS = 5.0

# Preprocessing modes whose output size depends on the image (the others always produce
# --crop_size or --load_size squares, which train.py checks against --netG from the flags).
_SIZE_FOLLOWS_IMAGE = ("none", "crop", "scale_width")


def _has_image(folder: str, extensions: tuple[str, ...] | None = None) -> bool:
    """Whether `folder` holds an image (a file with one of `extensions`, when given)."""
    if extensions is None:
        return next(iter_image_files(folder), None) is not None
    return any(name.lower().endswith(extensions) and not name.startswith("._")
               for _, _, files in os.walk(folder) for name in files)


def _some_files(folder: str, limit: int = 3) -> list[str]:
    found = (name for _, _, files in os.walk(folder) for name in files)
    return list(islice(found, limit))


def volume_mode_advice(folder: str, dataset_mode: str, dataroot: str = "<dataroot>") -> str | None:
    """When `folder` holds NIfTI volumes (and `dataset_mode` reads pictures): which volume mode to pass
    instead (the one that stands in for `dataset_mode`, or all of them), naming a few of the files."""
    found = [name for _, _, files in os.walk(folder) for name in sorted(files)
             if name.lower().endswith(NIFTI_EXTENSIONS) and not name.startswith("._")]
    if not found:
        return None
    volume_modes = {name: cls for name, cls in built_in_datasets().items() if cls.spatial_dims == 3}
    counterpart = next((name for name, cls in volume_modes.items() if dataset_mode in cls.stands_in_for), None)
    instead = (f"pass --dataset_mode {counterpart} (the volume counterpart of {dataset_mode})" if counterpart else
               f"pass a volume --dataset_mode: {', '.join(volume_modes)}")
    return (f"folder {folder} holds NIfTI volumes ({', '.join(found[:3])}{', ...' if len(found) > 3 else ''}), "
            f"not pictures, and --dataset_mode {dataset_mode} reads pictures; {instead}, with --data_range MIN MAX "
            f"for their values unless they are 8-bit (`python scripts/data_range.py --dataroot {dataroot}` "
            f"suggests one; docs/volumes.md).")


def _require_images(folder: RequiredFolder, dataset_mode: str = "", dataroot: str = "<dataroot>") -> None:
    if not os.path.isdir(folder.path):
        link = broken_link(folder.path)
        raise UserError(f"missing folder {folder.path}{f' ({link}; fix the link)' if link else ''}: "
                        f"{folder.why}")
    if not _has_image(folder.path, folder.extensions):
        advice = volume_mode_advice(folder.path, dataset_mode, dataroot) if folder.extensions is None else None
        if advice:
            raise UserError(advice)
        if folder.when_empty:
            raise UserError(folder.when_empty)
        others = _some_files(folder.path)
        seen = f" (it holds e.g. {', '.join(others)})" if others else " (it is empty)"
        raise UserError(
            f"folder {folder.path} contains no images{seen}; accepted extensions are "
            f"{', '.join(IMG_EXTENSIONS)} in any letter case. Add images or fix --dataroot/--phase."
        )


def check_dataset_root(opt: argparse.Namespace, size_rule=None) -> None:
    """Raise `UserError` if `opt.dataroot` lacks the folders/images `opt.dataset_mode` reads.

    The dataset class says which (its `required_folders(opt)`, checked in order, then the header
    of every image it lists in `files_read(opt)`, see `check_image_files`; `size_rule`, the
    generator's `networks.SizeRule`, says which sizes it takes). A dataset that declares nothing
    gets only the --dataroot check. Raises `UserError` for an unknown --dataset_mode too.
    """
    root = opt.dataroot
    if root and os.path.exists(root) and not os.path.isdir(root):
        raise UserError(f"--dataroot {root} is a file, not a folder; set --dataroot to the dataset folder "
                        f"(unpack it first if it is an archive).")
    if not root or not os.path.isdir(root):
        fix = "fix the link, or set --dataroot to the dataset folder" if broken_link(root or ".") else \
            "set --dataroot to the dataset folder"
        raise UserError(f"dataset root {root} {why_missing(root or '.')}; {fix}.")
    for folder in find_dataset_using_name(opt.dataset_mode).required_folders(opt):
        _require_images(folder, opt.dataset_mode, opt.dataroot)
    check_image_files(opt, size_rule)


# ---------------------------------------------------------------------------------- image files
@dataclass
class _Problem:
    path: str
    message: str
    skippable: bool  # --skip_bad_images can skip the file (its dataset raises UserError for it)


def _test_time_any_size(opt: argparse.Namespace) -> bool:
    """At test time --preprocess none and --tile take images of any size (see models/inference/application.py)."""
    return not opt.isTrain and (opt.preprocess == "none" or opt.tile > 0)


def _final_size(opt: argparse.Namespace, w: int, h: int) -> tuple[int, int]:
    """(width, height) an image of w x h has after the resize/crop steps of `get_transform`."""
    if not opt.isTrain and opt.preprocess == "none":
        return w, h  # kept as it is at test time
    w, h = _resized_size(opt, w, h)
    c = opt.crop_size
    if "crop" in opt.preprocess and (w > c or h > c):
        return c, c  # (a crop that reaches past an edge is padded to the full square)
    if opt.preprocess == "none":
        return max(4, round(w / 4) * 4), max(4, round(h / 4) * 4)
    return w, h


def _how_preprocess_sizes(opt: argparse.Namespace) -> str:
    if opt.preprocess == "none":
        return "--preprocess none uses each image at its own size, rounded to multiples of 4"
    if opt.preprocess == "crop":
        return (f"--preprocess crop cuts a --crop_size {opt.crop_size} square out of each image but "
                f"leaves images no larger than that at their own size")
    return (f"--preprocess scale_width scales each image to a width of --load_size {opt.load_size} and keeps "
            f"its aspect ratio (height at least --crop_size {opt.crop_size})")


def _check_file(opt: argparse.Namespace, path: str, group: FileGroup, requirement, unranged_floats: list[str],
                ranged_integers: list[str]) -> tuple[_Problem | None, tuple[int, int] | None]:
    """Check one file's header; returns (its problem or None, its size after preprocessing when that
    size depends on the image, else None). Appends `path` to `unranged_floats` if it holds float data
    that no --data_range describes, and to `ranged_integers` if it holds integers a --data_range was
    given for (integers map by their full range: the flag does nothing to them)."""
    try:
        info = probe_image(path)
    except UserError as err:
        return _Problem(path, str(err), skippable=True), None
    for spec in group.specs or ():
        if not convertible(info.channels, info.alpha, spec.channels):
            return _Problem(path, str(channel_mismatch(path, info, spec.channels, spec.flag)), skippable=False), None
        if info.dtype.kind == "f" and spec.data_range is None:
            unranged_floats.append(path)
        elif info.dtype.kind in "ui" and spec.data_range is not None:
            ranged_integers.append(path)
    w, h = info.width, info.height
    size = f"{w}x{h} pixels"
    if group.side_by_side:
        if w % 2:
            return _Problem(path, (
                f"image {path} is {size}, an odd width: aligned images must be A and B side by side with an "
                f"even width (A the left half, B the right half, both the same size); re-save {path} as A|B, "
                f"remove it, or use --dataset_mode unaligned with separate {opt.phase}A and {opt.phase}B "
                f"folders."), skippable=True), None
        w //= 2  # each half goes through the preprocessing on its own
        size += f" (each half {w}x{h})"
    if opt.preprocess not in _SIZE_FOLLOWS_IMAGE:
        return None, None
    fw, fh = _final_size(opt, w, h)
    if requirement is not None:
        smallest, multiple = requirement.minimum, requirement.multiple
        if not requirement.fits(fh, fw):
            need = (f"{smallest}x{smallest} pixels or larger multiples of {multiple}" if smallest == multiple
                    else f"at least {smallest}x{smallest} pixels in multiples of {multiple}")
            return _Problem(path, (
                f"image {path} is {size}; {_how_preprocess_sizes(opt)}, so it reaches the generator as "
                f"{fw}x{fh}, but --netG {opt.netG} needs {need}. Use --preprocess resize_and_crop (resize to "
                f"--load_size, then crop to --crop_size), or enlarge or remove the file."), skippable=False), None
    return None, (fw, fh)


def _mixed_size_problem(opt: argparse.Namespace, sizes: dict[tuple[int, int], str]) -> _Problem | None:
    """Images of different sizes cannot be stacked into one batch."""
    if len(sizes) < 2 or opt.batch_size <= 1:
        return None
    (s1, p1), (s2, p2) = islice(sizes.items(), 2)
    return _Problem(p2, (
        f"{_how_preprocess_sizes(opt)}, but --batch_size {opt.batch_size} stacks several images into one "
        f"batch, which needs them all the same size: {p1} becomes {s1[0]}x{s1[1]} and {p2} becomes "
        f"{s2[0]}x{s2[1]}. Use --batch_size 1, or --preprocess resize_and_crop (or scale_width_and_crop) "
        f"to give every image the same size."), skippable=False)


def check_image_files(opt: argparse.Namespace, size_rule=None, budget_s: float = HEADER_CHECK_SECONDS) -> None:
    """Check the header of every image file the dataset will read; raise `UserError` for the first
    bad one (mentioning how many more there are).

    Refused: empty files, files that are not images, unreadable headers, channel counts that do not
    convert to the --input_nc/--output_nc of their domain (gray and RGB convert into each other,
    alpha is composited on white; see image_io.match_channels), aligned (A|B) images of odd width
    and, where the size reaching the generator follows the image (--preprocess none, crop,
    scale_width), sizes outside `size_rule` (the generator's; None: any size) or, with --batch_size > 1,
    differing sizes. Float data without --data_range get a warning (taken to lie in [0, 1]). With
    --skip_bad_images the unreadable files are only warned about (the loader skips them), unless
    none is left. Stops after `budget_s` seconds; the remaining files are checked as they load.
    """
    groups = find_dataset_using_name(opt.dataset_mode).files_read(opt)
    requirement = size_rule
    if _test_time_any_size(opt):
        requirement = None  # test.py pads each image for the generator and crops the output back
    skip = opt.skip_bad_images
    total = sum(len(group.paths) for group in groups)
    deadline = time.monotonic() + budget_s
    problems: list[_Problem] = []
    unranged_floats: list[str] = []
    ranged_integers: list[str] = []
    checked = 0
    for group in groups:
        paths = group.paths
        sizes: dict[tuple[int, int], str] = {}  # size after preprocessing -> first file of that size
        readable = 0
        for path in paths:
            if time.monotonic() > deadline:
                print0(f"note: checked the headers of {checked} of {total} images in {budget_s:.0f} s and "
                       f"stopped there; the others are checked as they are loaded.")
                return _raise_or_warn(problems, checked, skip)
            checked += 1
            problem, size = _check_file(opt, path, group, requirement, unranged_floats, ranged_integers)
            if problem is not None:
                problems.append(problem)
                continue
            readable += 1
            if size is not None:
                sizes.setdefault(size, path)
        mixed = _mixed_size_problem(opt, sizes)
        if mixed is not None:
            problems.append(mixed)
        if skip and paths and readable == 0:
            folder = os.path.dirname(paths[0])
            first = next(p for p in problems if p.path == paths[0])
            raise UserError(f"--skip_bad_images: none of the {len(paths)} images read from {folder} is usable, "
                            f"so there is nothing to train on. The first: {first.message}")
    _raise_or_warn(problems, checked, skip)
    if unranged_floats:
        logger.warning(f"{unranged_floats[0]} holds floating-point values and no --data_range says which of them "
                       f"map to the network's -1 and 1, so [0, 1] is assumed (values outside are clipped). Pass "
                       f"--data_range MIN MAX; `python scripts/data_range.py --dataroot {opt.dataroot}` computes it "
                       f"from the images.")
    if ranged_integers:
        logger.warning(f"--data_range {' '.join(f'{v:g}' for v in opt.data_range)} applies to floating-point "
                       f"images only, and {ranged_integers[0]} holds {probe_image(ranged_integers[0]).dtype} "
                       f"integers, which map to the network's -1 and 1 by their full range: the flag does nothing "
                       f"to it. Leave --data_range out for integer images.")


def _raise_or_warn(problems: list[_Problem], checked: int, skip: bool) -> None:
    if skip:
        refused = [p for p in problems if not p.skippable]
        skipped = [p for p in problems if p.skippable]
        for p in skipped[:10]:
            logger.warning(f"--skip_bad_images will skip this file: {p.message}")
        if len(skipped) > 10:
            logger.warning(f"and {len(skipped) - 10} more bad images will be skipped.")
        problems = refused
    if not problems:
        return
    message = problems[0].message
    others = problems[1:]
    if others:
        examples = ", ".join(p.path for p in others[:3]) + (", ..." if len(others) > 3 else "")
        hint = ("; --skip_bad_images skips the unreadable ones with a warning"
                if any(p.skippable for p in problems) else "")
        message += f" ({len(others)} more of the {checked} images checked have problems too: {examples}{hint}.)"
    raise UserError(message)
