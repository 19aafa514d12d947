"""A single folder of images, for running a trained generator in one direction."""

from __future__ import annotations

import argparse
import os
from typing import Any

from data.base_dataset import BaseDataset, check_preprocess, domain_specs, get_params, get_transform, picture_size
from data.image_folder import load_for_network, make_dataset
from data.layout import FileGroup, RequiredFolder, first_samples


class SingleDataset(BaseDataset):
    """All images under `dataroot` itself (e.g. `datasets/horse2zebra/testA`), no phase subfolder.

    Images get `--output_nc` channels with `--direction BtoA`, else `--input_nc`, as in the reference:
    they are loaded as domain A (the "A" of the sample), and float data take domain A's --data_range.
    Sample: {"A": Tensor, "A_paths": str}.
    """

    has_targets = False  # inputs alone: test.py translates them, training cannot learn from them

    @classmethod
    def required_folders(cls, opt: argparse.Namespace) -> list[RequiredFolder]:
        """`dataroot` itself, holding images (in subfolders too)."""
        root = opt.dataroot
        sub = os.path.join(root, opt.phase + "A")
        hint = f" For example --dataroot {sub}." if os.path.isdir(sub) else ""
        why = "--dataset_mode single reads the images directly under --dataroot"
        return [RequiredFolder(root, f"{why}.", when_empty=(
            f"dataset root {root} contains no images; {why} (e.g. datasets/horse2zebra/testA).{hint}"))]

    @classmethod
    def files_read(cls, opt: argparse.Namespace) -> list[FileGroup]:
        """The images of the samples read, loaded as domain A."""
        return [FileGroup(first_samples(opt, make_dataset(opt.dataroot, opt.max_dataset_size)), [domain_specs(opt)[0]])]

    def __init__(self, opt: argparse.Namespace) -> None:
        super().__init__(opt)
        check_preprocess(opt)
        self.spec = domain_specs(opt)[0]
        self.input_nc = self.spec.channels
        self.A_paths = make_dataset(opt.dataroot, opt.max_dataset_size)

    def __len__(self) -> int:
        return len(self.A_paths)

    def __getitem__(self, index: int) -> dict[str, Any]:
        path = self.A_paths[index]
        (img,) = load_for_network(path, [self.spec])
        params = get_params(self.opt, picture_size(img), self.sample_rng(index))
        return {"A": get_transform(self.opt, params)(img), "A_paths": path}
