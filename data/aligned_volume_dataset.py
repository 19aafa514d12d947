"""Paired volumes: A and B volumes of the same scans in two folders, paired by file name (pix2pix on volumes)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from data.image_folder import pair_files_by_name
from data.layout import RequiredFolder
from data.volume_io import describe_grid, list_volumes, same_grid, volume_stem
from data.volume_patches import VolumeDataset, VolumeFile, split_folders, volume_folder
from util.errors import UserError


class AlignedVolumeDataset(VolumeDataset):
    """Paired volumes (.nii, .nii.gz, .npy) in `dataroot/<phase>/A` and `dataroot/<phase>/B` when both exist,
    else in `dataroot/<phase>A` and `dataroot/<phase>B`, paired by name without the extension
    (`trainA/case01.nii.gz` with `trainB/case01.nii.gz` or `case01.npy`).

    A pair must be one voxel grid: the same spatial shape and, for NIfTI files, the same affine (voxel
    spacing, orientation and position: no voxel more than `GRID_TOLERANCE_MM` apart); channels may differ. "A" is
    always domain A; --direction only sets the channels (the input domain gets --input_nc, the other
    --output_nc) and which side --intensity_jitter changes (the input). Every file's header is checked when
    the dataset is built.

    Training: A and B cut at the same random place (--foreground_fraction by A's foreground) and flipped
    alike (data/volume_patches.py). Inference: the whole volumes.
    Sample: {"A": Tensor (C, D, H, W) in [-1, 1], "B": the same, "A_paths": str, "B_paths": str}.
    """

    paired = True
    stands_in_for = ("aligned",)

    @classmethod
    def required_folders(cls, opt: argparse.Namespace) -> list[RequiredFolder]:
        """The A and B folders (see `split_folders`), holding volumes."""
        dir_A, dir_B = split_folders(opt.dataroot, opt.phase)
        inside = os.path.join(opt.dataroot, opt.phase, "A"), os.path.join(opt.dataroot, opt.phase, "B")
        why = (f"paired volumes are read from {dir_A} and {dir_B} (or from {inside[0]} and {inside[1]}); "
               f"check --dataroot/--phase.")
        return [volume_folder(dir_A, why), volume_folder(dir_B, why)]

    def __init__(self, opt: argparse.Namespace) -> None:
        super().__init__(opt)
        self.dir_A, self.dir_B = split_folders(opt.dataroot, opt.phase)
        pairs = pair_files_by_name(self.dir_A, self.dir_B, opt.max_dataset_size, list_files=list_volumes,
                                   stem=volume_stem, unpaired_mode="unaligned_volume")
        files_A = self.scan([a for a, _ in pairs], self.spec_A)
        files_B = self.scan([b for _, b in pairs], self.spec_B)
        for file_A, file_B in zip(files_A, files_B):
            check_same_grid(file_A, file_B)
        self.pairs = list(zip(files_A, files_B))
        # --intensity_jitter changes the model's input only: domain A with AtoB, B with BtoA.
        self.jitter_A = opt.direction != "BtoA"

    def domain_files(self, domain: str) -> list[VolumeFile]:
        return [pair["AB".index(domain)] for pair in self.pairs]

    def __len__(self) -> int:
        return self.samples(len(self.pairs))

    def __getitem__(self, index: int) -> dict[str, Any]:
        file_A, file_B = self.pairs[index % len(self.pairs)]
        if not self.training:
            return {"A": self.whole(file_A), "B": self.whole(file_B), "A_paths": file_A.path, "B_paths": file_B.path}
        rng = self.sample_rng(index)
        corner = self.draw_corner(rng, file_A)
        flip, jitter = self.draw_flip(rng), self.draw_jitter(rng)
        A = self.finish(self.reader.patch(file_A, corner, self.patch), flip, jitter if self.jitter_A else None)
        B = self.finish(self.reader.patch(file_B, corner, self.patch), flip, None if self.jitter_A else jitter)
        return {"A": A, "B": B, "A_paths": file_A.path, "B_paths": file_B.path}


def check_same_grid(file_A: VolumeFile, file_B: VolumeFile) -> None:
    """Raise `UserError` naming both files unless the pair is one voxel grid: the same shape and, for two
    NIfTI files, the same affine (voxel spacing, orientation and position; a .npy file has none)."""
    shape_A, shape_B = ("x".join(map(str, f.spatial_shape)) for f in (file_A, file_B))
    if file_A.spatial_shape != file_B.spatial_shape:
        raise UserError(
            f"paired volumes {file_A.path} ({shape_A} voxels) and {file_B.path} ({shape_B} voxels) differ in "
            f"shape: a pair must be the same scan voxel for voxel (patches are cut from both at the same "
            f"place). Resample one onto the other's grid, or for unpaired data use --dataset_mode "
            f"unaligned_volume.")
    if not same_grid(file_A.affine, file_B.affine, file_A.spatial_shape):
        raise UserError(
            f"paired volumes {file_A.path} and {file_B.path} have the same shape ({shape_A} voxels) but not the "
            f"same voxel grid: {file_A.path} has {describe_grid(file_A.affine)}, {file_B.path} has "
            f"{describe_grid(file_B.affine)} (their NIfTI affines differ), so a voxel of one is not the same place "
            f"as the voxel of the other and patches cut at one position would pair different anatomy. Resample one "
            f"onto the other's grid (e.g. nibabel.processing.resample_from_to), or, if they are the same grid and "
            f"one header is wrong, save it with the other's affine; for unpaired data use --dataset_mode "
            f"unaligned_volume.")
