"""A dataset mode that exists only in tests: a user's dataset is one file, named on the command
line by its module path (`--dataset_mode custom_datasets.noisy_dataset`, tests/ being importable)
with no edit of the project.

Paired, for denoising: each image of `dataroot/<phase>` is read once per domain; B is the image and
A the same image with seeded noise added, both with the same crop and flip.
"""
from __future__ import annotations

import argparse
import os
from typing import Any

import torch

from data.base_dataset import BaseDataset, domain_specs, get_params, get_transform, picture_size
from data.image_folder import load_for_network, make_dataset
from data.layout import FileGroup, RequiredFolder, first_samples

NOISE = 0.1  # standard deviation, in the network's [-1, 1] units


class NoisyDataset(BaseDataset):
    """Sample: {"A": noisy image, "B": clean image, "A_paths": str, "B_paths": str} (both the file)."""

    paired = True

    @classmethod
    def required_folders(cls, opt: argparse.Namespace) -> list[RequiredFolder]:
        folder = os.path.join(opt.dataroot, opt.phase)
        return [RequiredFolder(folder, f"the noisy dataset reads clean images from {folder}; check --dataroot.")]

    @classmethod
    def files_read(cls, opt: argparse.Namespace) -> list[FileGroup]:
        paths = make_dataset(os.path.join(opt.dataroot, opt.phase), opt.max_dataset_size)
        return [FileGroup(first_samples(opt, paths), list(domain_specs(opt)))]

    def __init__(self, opt: argparse.Namespace) -> None:
        super().__init__(opt)
        self.spec_A, self.spec_B = domain_specs(opt)
        self.paths = make_dataset(os.path.join(opt.dataroot, opt.phase), opt.max_dataset_size)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> dict[str, Any]:
        path = self.paths[index]
        (A_img,), (B_img,) = load_for_network(path, [self.spec_A]), load_for_network(path, [self.spec_B])
        rng = self.sample_rng(index)  # every random choice from it: reproducible on any worker or rank
        params = get_params(self.opt, picture_size(B_img), rng)
        A, B = get_transform(self.opt, params)(A_img), get_transform(self.opt, params)(B_img)
        noise = torch.randn(A.shape, generator=torch.Generator().manual_seed(rng.getrandbits(63)))
        return {"A": (A + NOISE * noise).clamp(-1.0, 1.0), "B": B, "A_paths": path, "B_paths": path}
