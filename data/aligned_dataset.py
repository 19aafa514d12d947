"""Paired datasets: A|B images side by side (pix2pix's format), or two folders paired by file name."""

from __future__ import annotations

import argparse
import os
from typing import Any

from data.base_dataset import BaseDataset, check_preprocess, domain_specs, get_params, get_transform, picture_size
from data.image_folder import load_for_network, make_dataset, pair_files_by_name
from data.layout import FileGroup, RequiredFolder, first_samples, phase_folder


def uses_two_folders(root: str, phase: str) -> bool:
    """True when paired data is read from `<phase>A` and `<phase>B` (paired by name): `<phase>` is
    absent and both of those are folders. Otherwise A|B images are read from `<phase>`."""
    return (not os.path.isdir(os.path.join(root, phase)) and os.path.isdir(os.path.join(root, phase + "A"))
            and os.path.isdir(os.path.join(root, phase + "B")))


class AlignedDataset(BaseDataset):
    """Paired images A and B, in one of two layouts:

    - `dataroot/phase/*` (e.g. `datasets/facades/train`), each image A|B side by side: the left half
      is domain A, the right half domain B (both with the file's channel count);
    - when `dataroot/phase` does not exist but `dataroot/phaseA` and `dataroot/phaseB` do: the files of
      the two folders paired by name without extension (`trainA/0001.tif` with `trainB/0001.npy`), so
      A and B may differ in format, channel count and size.

    "A" is always domain A, whatever `--direction` says: the model picks its input from them (as in
    the original). Direction only sets the channels: the input domain gets `--input_nc`, the other
    `--output_nc`. Both get the same crop and flip.
    Sample: {"A": Tensor, "B": Tensor, "A_paths": str, "B_paths": str} (side by side: both the AB file).
    """

    paired = True

    @classmethod
    def required_folders(cls, opt: argparse.Namespace) -> list[RequiredFolder]:
        """`dataroot/phase`, or `<phase>A` and `<phase>B` (see `uses_two_folders`)."""
        root, phase = opt.dataroot, opt.phase
        if uses_two_folders(root, phase):
            why = f"paired data in two folders needs both {phase}A and {phase}B; check --dataroot/--phase."
            return [RequiredFolder(os.path.join(root, phase + side), why) for side in "AB"]
        return [phase_folder(opt, f"paired data in two folders needs {os.path.join(root, phase + 'B')} too; ")]

    @classmethod
    def files_read(cls, opt: argparse.Namespace) -> list[FileGroup]:
        """The A|B files (one spec per half), or the A files and the B files paired by name."""
        root, phase = opt.dataroot, opt.phase
        spec_A, spec_B = domain_specs(opt)
        if uses_two_folders(root, phase):
            pairs = first_samples(opt, pair_files_by_name(os.path.join(root, phase + "A"),
                                                          os.path.join(root, phase + "B"), opt.max_dataset_size))
            return [FileGroup([a for a, _ in pairs], [spec_A]), FileGroup([b for _, b in pairs], [spec_B])]
        paths = first_samples(opt, make_dataset(os.path.join(root, phase), opt.max_dataset_size))
        return [FileGroup(paths, [spec_A, spec_B], side_by_side=True)]

    def __init__(self, opt: argparse.Namespace) -> None:
        super().__init__(opt)
        check_preprocess(opt)
        self.spec_A, self.spec_B = domain_specs(opt)
        self.side_by_side = not uses_two_folders(opt.dataroot, opt.phase)
        if self.side_by_side:
            self.dir_AB = os.path.join(opt.dataroot, opt.phase)
            self.AB_paths = make_dataset(self.dir_AB, opt.max_dataset_size)
            self.pairs = [(path, path) for path in self.AB_paths]
        else:
            self.pairs = pair_files_by_name(os.path.join(opt.dataroot, opt.phase + "A"),
                                            os.path.join(opt.dataroot, opt.phase + "B"), opt.max_dataset_size)

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, index: int) -> dict[str, Any]:
        path_A, path_B = self.pairs[index]
        if self.side_by_side:
            A, B = load_for_network(path_A, [self.spec_A, self.spec_B], side_by_side=True)
        else:
            (A,), (B,) = load_for_network(path_A, [self.spec_A]), load_for_network(path_B, [self.spec_B])
        params = get_params(self.opt, picture_size(A), self.sample_rng(index))
        return {"A": get_transform(self.opt, params)(A), "B": get_transform(self.opt, params)(B),
                "A_paths": path_A, "B_paths": path_B}
