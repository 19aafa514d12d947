"""What a dataset reads, as it declares it for the up-front checks (data/input_checks.py).

A dataset class answers two questions about a run's options, before it is built:

- `required_folders(opt)`: the folders it reads images from (`RequiredFolder`), each with the
  reason the run is refused when the folder is missing or holds no image;
- `files_read(opt)`: the image files it will load (`FileGroup`), with the channel specs each
  file is loaded with and whether it holds A and B side by side.

`check_dataset_root` checks the folders in order, then the header of every file listed. A dataset
that declares nothing (the `BaseDataset` defaults) gets only the --dataroot check.
"""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

from data.image_folder import DomainSpec


@dataclass(frozen=True)
class RequiredFolder:
    """A folder that must exist and hold images.

    Missing, the run is refused with "missing folder <path>: <why>"; without images, with
    `when_empty` when given, else a message listing the accepted extensions. `extensions`: the
    files that count (None: the image extensions, `image_folder.IMG_EXTENSIONS`), e.g. volumes'."""
    path: str
    why: str
    when_empty: str | None = None
    extensions: tuple[str, ...] | None = None


@dataclass
class FileGroup:
    """Image files the dataset batches together, and how it loads them.

    `specs`: the `DomainSpec` each file is loaded with (None: no channel check, e.g. a dataset that
    converts any image itself); `side_by_side`: each file holds A|B, one spec per half."""
    paths: list[str]
    specs: list[DomainSpec] | None = None
    side_by_side: bool = False


def samples_read(opt: argparse.Namespace) -> int | None:
    """How many samples the run reads: None (all) when training, test.py's first --num_test (None in the
    options of validation's held-out split, data/held_out.py: validation caps its images itself)."""
    if opt.isTrain:
        return None
    count = opt.num_test
    return None if count is None else max(int(count), 0)


def first_samples(opt: argparse.Namespace, paths: list[str]) -> list[str]:
    """The files of the samples the run reads when sample i reads `paths[i]` (see `samples_read`)."""
    count = samples_read(opt)
    return paths if count is None else paths[:count]


def phase_folder(opt: argparse.Namespace, two_folder_hint: str = "") -> RequiredFolder:
    """`dataroot/phase`, the one folder `--dataset_mode` reads. When it is missing but `<phase>A`
    exists, the reason suggests --dataset_mode unaligned, after `two_folder_hint` (which ends "; ")."""
    folder = os.path.join(opt.dataroot, opt.phase)
    folder_A = os.path.join(opt.dataroot, opt.phase + "A")
    hint = ""
    if not os.path.isdir(folder) and os.path.isdir(folder_A):
        hint = (f"; {folder_A} exists, so {two_folder_hint}for separate (unpaired) A and B folders use "
                f"--dataset_mode unaligned")
    return RequiredFolder(folder, f"--dataset_mode {opt.dataset_mode} reads images from {folder}; "
                                  f"check --dataroot/--phase{hint}.")
