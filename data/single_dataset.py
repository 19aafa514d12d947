"""A single folder of images, for running a trained generator in one direction."""

from __future__ import annotations

import argparse
from typing import Any

from data.base_dataset import BaseDataset, check_channels, check_preprocess, get_params, get_transform
from data.image_folder import load_image, make_dataset


class SingleDataset(BaseDataset):
    """All images under `dataroot` itself (e.g. `datasets/horse2zebra/testA`), no phase subfolder.

    Images get `--output_nc` channels with `--direction BtoA`, else `--input_nc` (they are
    the input of the generator that maps that direction).
    Sample: {"A": Tensor, "A_paths": str}.
    """

    def __init__(self, opt: argparse.Namespace) -> None:
        super().__init__(opt)
        check_preprocess(opt)
        self.input_nc = opt.output_nc if opt.direction == "BtoA" else opt.input_nc
        check_channels("--output_nc" if opt.direction == "BtoA" else "--input_nc", self.input_nc)
        self.A_paths = make_dataset(opt.dataroot, opt.max_dataset_size)

    def __len__(self) -> int:
        return len(self.A_paths)

    def __getitem__(self, index: int) -> dict[str, Any]:
        path = self.A_paths[index]
        img = load_image(path, "L" if self.input_nc == 1 else "RGB")
        params = get_params(self.opt, img.size, self.sample_rng(index))
        A = get_transform(self.opt, params, grayscale=self.input_nc == 1)(img)
        return {"A": A, "A_paths": path}
