"""Unpaired volumes: two folders of 3-D medical images from two domains (CycleGAN/CUT on volumes)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from data.layout import RequiredFolder
from data.volume_io import list_volumes
from data.volume_patches import VolumeDataset, VolumeFile, volume_folder


class UnalignedVolumeDataset(VolumeDataset):
    """Volumes (.nii, .nii.gz, .npy) in `dataroot/<phase>A` and `dataroot/<phase>B` (e.g. trainA, trainB).

    As `--dataset_mode unaligned` for images: sample `index` takes A volume `index % size_A`, its partner
    B volume `index % size_B` with --serial_batches, else one drawn at random; len = max(size_A, size_B)
    (times --patches_per_volume when training);
    --direction only sets the channels (the input domain gets --input_nc, the other --output_nc). Every
    file's header is checked when the dataset is built (channels, a --data_range window, and for training
    at least --patch_size voxels on every axis).

    Training: A and B are independent random patches of --patch_size (data/volume_patches.py), each with
    its own placement (--foreground_fraction by its own domain's foreground), flip and --intensity_jitter
    (both domains are a generator's input in CycleGAN). Inference: the whole volumes.
    Sample: {"A": Tensor (C, D, H, W) in [-1, 1], "B": the same, "A_paths": str, "B_paths": str}.
    """

    stands_in_for = ("unaligned",)

    @classmethod
    def required_folders(cls, opt: argparse.Namespace) -> list[RequiredFolder]:
        """`<phase>A` and `<phase>B`, holding volumes."""
        dir_A, dir_B = (os.path.join(opt.dataroot, opt.phase + side) for side in "AB")
        why = f"unpaired volumes are read from {dir_A} and {dir_B}; check --dataroot/--phase."
        return [volume_folder(dir_A, why), volume_folder(dir_B, why)]

    def __init__(self, opt: argparse.Namespace) -> None:
        super().__init__(opt)
        self.dir_A = os.path.join(opt.dataroot, opt.phase + "A")
        self.dir_B = os.path.join(opt.dataroot, opt.phase + "B")
        self.files_A = self.scan(list_volumes(self.dir_A, opt.max_dataset_size), self.spec_A)
        self.files_B = self.scan(list_volumes(self.dir_B, opt.max_dataset_size), self.spec_B)

    def domain_files(self, domain: str) -> list[VolumeFile]:
        return self.files_A if domain == "A" else self.files_B

    def __len__(self) -> int:
        return self.samples(max(len(self.files_A), len(self.files_B)))

    def __getitem__(self, index: int) -> dict[str, Any]:
        rng = self.sample_rng(index)
        file_A = self.files_A[index % len(self.files_A)]
        index_B = index % len(self.files_B) if self.opt.serial_batches else rng.randint(0, len(self.files_B) - 1)
        file_B = self.files_B[index_B]
        if not self.training:
            A, B = self.whole(file_A), self.whole(file_B)
        else:
            A, B = self.random_patch(rng, file_A, jitter=True), self.random_patch(rng, file_B, jitter=True)
        return {"A": A, "B": B, "A_paths": file_A.path, "B_paths": file_B.path}
