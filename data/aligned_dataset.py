"""Paired datasets stored as side-by-side images (pix2pix's {A,B} format)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from data.base_dataset import (BaseDataset, check_preprocess, domain_channels, get_params,
                               get_transform)
from data.image_folder import load_image, make_dataset
from util.errors import UserError


class AlignedDataset(BaseDataset):
    """Images in `dataroot/phase` (e.g. `datasets/facades/train`), each A|B side by side.

    The left half is domain A and the right half domain B, whatever `--direction` says: the
    model picks its input from them (as in the original). Direction only sets the channels:
    the input domain gets `--input_nc`, the other `--output_nc` (1 = grayscale).
    Both halves get the same crop and flip.
    Sample: {"A": Tensor, "B": Tensor, "A_paths": str, "B_paths": str}, both paths the AB file.
    """

    def __init__(self, opt: argparse.Namespace) -> None:
        super().__init__(opt)
        check_preprocess(opt)
        self.nc_A, self.nc_B = domain_channels(opt)
        self.dir_AB = os.path.join(opt.dataroot, opt.phase)
        self.AB_paths = make_dataset(self.dir_AB, opt.max_dataset_size)

    def __len__(self) -> int:
        return len(self.AB_paths)

    def __getitem__(self, index: int) -> dict[str, Any]:
        path = self.AB_paths[index]
        AB = load_image(path, "RGB")
        w, h = AB.size
        if w % 2:
            raise UserError(
                f"image {path} is {w} pixels wide: aligned images must be A and B side by side, "
                f"with an even width; fix or remove the file, or use --dataset_mode unaligned "
                f"for separate A and B folders."
            )
        A, B = AB.crop((0, 0, w // 2, h)), AB.crop((w // 2, 0, w, h))

        params = get_params(self.opt, A.size, self.sample_rng(index))
        A_t = get_transform(self.opt, params, grayscale=self.nc_A == 1)(A)
        B_t = get_transform(self.opt, params, grayscale=self.nc_B == 1)(B)
        return {"A": A_t, "B": B_t, "A_paths": path, "B_paths": path}
