"""Template for a custom dataset: copy this file, rename the class, and adapt it.

It works as is (mode `--dataset_mode template`): it reads the images in `dataroot/phase`
and pairs each image A with its mirror image as B, which is enough to run a pix2pix-style
model end to end. A dataset is one file; write these:

1. `modify_commandline_options(parser, is_train)`: add flags for your dataset and change
   defaults of existing ones (optional; return the parser). Declare with each flag what a
   change of it does when a run is continued (`on_resume`, docs/resume.md); left out, such a
   change is honoured with a note.
2. `__init__(self, opt)`: call `super().__init__(opt)`, then find your files (use
   `make_dataset` for a folder of images) and raise `UserError` for anything the user must fix.
3. `__len__(self)`: the number of samples.
4. `__getitem__(self, index)`: load sample `index` and return a dict of tensors plus
   "*_paths" strings. Draw every random choice from `self.sample_rng(index)` (e.g. via
   `get_params`) so augmentations are reproducible across workers, GPUs and resumed runs.
5. Optional: `paired = True` if B is A's true counterpart (scored with L1/PSNR/SSIM), and the
   classmethods `required_folders(opt)` and `files_read(opt)` (data/layout.py), which let the
   run refuse a missing folder or a bad image file before any model is built.

Save it anywhere importable (e.g. `my_datasets/satellite_dataset.py`) and pass its dotted module
path, `--dataset_mode my_datasets.satellite_dataset`: nothing else needs to change. A dataset that
ships with the project is `data/<name>_dataset.py` holding a class `<Name>Dataset`, found as
`--dataset_mode <name>` (data/registry.py finds it by its file: nothing else to edit). See
docs/datasets.md.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from data.base_dataset import BaseDataset, check_preprocess, domain_specs, get_params, get_transform, picture_size
from data.image_folder import load_for_network, make_dataset
from data.layout import FileGroup, RequiredFolder, first_samples, phase_folder
from util.flag_types import finite_float


class TemplateDataset(BaseDataset):
    """Images in `dataroot/phase`; "A" is the image and "B" its horizontally mirrored copy.

    Sample: {"A": Tensor, "B": Tensor, "A_paths": str, "B_paths": str} (both paths the file).
    """

    @staticmethod
    def modify_commandline_options(parser: argparse.ArgumentParser, is_train: bool) -> argparse.ArgumentParser:
        """Add `--new_dataset_option` (an example flag, stored as `self.new_option`)."""
        parser.add_argument("--new_dataset_option", type=finite_float, default=1.0, on_resume="noted",
                            help="example flag of the template dataset (unused)")
        return parser

    @classmethod
    def required_folders(cls, opt: argparse.Namespace) -> list[RequiredFolder]:
        """`dataroot/phase` (checked before the run starts, with a message saying how to fix it)."""
        return [phase_folder(opt)]

    @classmethod
    def files_read(cls, opt: argparse.Namespace) -> list[FileGroup]:
        """Its images, each read for both domains (so each must convert to both channel counts)."""
        paths = first_samples(opt, make_dataset(os.path.join(opt.dataroot, opt.phase), opt.max_dataset_size))
        return [FileGroup(paths, list(domain_specs(opt)))]

    def __init__(self, opt: argparse.Namespace) -> None:
        super().__init__(opt)
        check_preprocess(opt)
        # getattr: the flag exists only when the parser was built for this dataset mode.
        self.spec_A, self.spec_B = domain_specs(opt)  # A/B are never swapped; the model uses --direction
        self.new_option = opt.new_dataset_option
        self.image_paths = make_dataset(os.path.join(opt.dataroot, opt.phase), opt.max_dataset_size)

    def __len__(self) -> int:
        return len(self.image_paths)

    def __getitem__(self, index: int) -> dict[str, Any]:
        path = self.image_paths[index]
        # The file read once per domain: each gets its own channel count.
        (A_img,), (B_img,) = load_for_network(path, [self.spec_A]), load_for_network(path, [self.spec_B])
        # One set of params for both, and B mirrored after cropping, so B is exactly the
        # mirror image of A (a learnable mapping).
        params = get_params(self.opt, picture_size(A_img), self.sample_rng(index))
        A = get_transform(self.opt, params)(A_img)
        B = get_transform(self.opt, params)(B_img).flip(-1)
        return {"A": A, "B": B, "A_paths": path, "B_paths": path}
