"""A single folder of images, for running a trained generator in one direction."""

from __future__ import annotations

import argparse
from typing import Any

from data.base_dataset import BaseDataset, check_preprocess, domain_specs, get_params, get_transform, picture_size
from data.image_folder import load_for_network, make_dataset


class SingleDataset(BaseDataset):
    """All images under `dataroot` itself (e.g. `datasets/horse2zebra/testA`), no phase subfolder.

    Images get `--output_nc` channels with `--direction BtoA`, else `--input_nc`, as in the reference:
    they are loaded as domain A (the "A" of the sample), and float data take domain A's --data_range.
    Sample: {"A": Tensor, "A_paths": str}.
    """

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
