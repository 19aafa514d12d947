"""A single folder of volumes, for running a trained volume generator in one direction (`--model test`)."""

from __future__ import annotations

import argparse
from typing import Any

from data.layout import RequiredFolder
from data.volume_io import list_volumes
from data.volume_patches import VolumeDataset, VolumeFile, volume_folder


class SingleVolumeDataset(VolumeDataset):
    """All volumes (.nii, .nii.gz, .npy) directly under `dataroot` (e.g. `ct2mr/testA`), each whole.

    As `--dataset_mode single` for images: the volumes are domain A of the sample, with `--output_nc`
    channels under `--direction BtoA`, else `--input_nc`, and domain A's --data_range window.
    Sample: {"A": Tensor (C, D, H, W) in [-1, 1], "A_paths": str}.
    """

    has_targets = False  # inputs alone: test.py translates them, training cannot learn from them
    stands_in_for = ("single",)

    @classmethod
    def required_folders(cls, opt: argparse.Namespace) -> list[RequiredFolder]:
        """`dataroot` itself, holding volumes."""
        return [volume_folder(opt.dataroot, "--dataset_mode single_volume reads the volumes directly under "
                                            "--dataroot (e.g. ct2mr/testA).")]

    def __init__(self, opt: argparse.Namespace) -> None:
        super().__init__(opt)
        self.files = self.scan(list_volumes(opt.dataroot, opt.max_dataset_size), self.spec_A)

    def domain_files(self, domain: str) -> list[VolumeFile]:
        return self.files

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> dict[str, Any]:
        file = self.files[index]
        return {"A": self.whole(file), "A_paths": file.path}
