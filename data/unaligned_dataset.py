"""Unpaired datasets: two folders of images from two domains (CycleGAN's format)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from data.base_dataset import BaseDataset, check_preprocess, domain_specs, get_params, get_transform, picture_size
from data.image_folder import load_for_network, make_dataset
from data.layout import FileGroup, RequiredFolder, samples_read


class UnalignedDataset(BaseDataset):
    """Images in `dataroot/<phase>A` and `dataroot/<phase>B` (e.g. trainA, trainB).

    "A" always comes from `<phase>A` and "B" from `<phase>B`; the model picks its input with
    `--direction` (as in the original), which here only sets the channels: the input domain
    gets `--input_nc`, the other `--output_nc`. Sample `index` takes A image
    `index % size_A`; its partner is B image `index % size_B` with
    --serial_batches, else one drawn at random from `sample_rng(index)`. A and B get
    independent crops and flips. len = max(size_A, size_B).
    Sample: {"A": Tensor, "B": Tensor, "A_paths": str, "B_paths": str}. With --second_input (UNSB:
    --model sb sets it) also a second image of the model's input domain, drawn at random from
    `sample_rng(index)` with crops and flips of its own: "A2" (or "B2" with --direction BtoA).
    """

    gives_second_input = True  # with --second_input

    @staticmethod
    def modify_commandline_options(parser: argparse.ArgumentParser, is_train: bool) -> argparse.ArgumentParser:
        parser.add_argument("--second_input", action="store_true", on_resume="noted",
                            help="also load a second, independent image of the input domain per sample (A2; "
                                 "--model sb's Schrödinger-bridge loss, which sets it)")
        return parser

    @classmethod
    def required_folders(cls, opt: argparse.Namespace) -> list[RequiredFolder]:
        """`<phase>A` and `<phase>B`; if only `<phase>` exists, the reason suggests the aligned mode."""
        root, phase = opt.dataroot, opt.phase
        dir_A, dir_B = os.path.join(root, phase + "A"), os.path.join(root, phase + "B")
        hint = ""
        if not os.path.isdir(dir_A) and os.path.isdir(os.path.join(root, phase)):
            hint = f"; {os.path.join(root, phase)} exists, so for A|B side-by-side images use --dataset_mode aligned"
        why = f"unaligned datasets need {dir_A} and {dir_B}; check --dataroot/--phase{hint}."
        return [RequiredFolder(dir_A, why), RequiredFolder(dir_B, why)]

    @classmethod
    def files_read(cls, opt: argparse.Namespace) -> list[FileGroup]:
        """The A images and the B images; at test time those of the first --num_test samples."""
        spec_A, spec_B = domain_specs(opt)
        a_paths = make_dataset(os.path.join(opt.dataroot, opt.phase + "A"), opt.max_dataset_size)
        b_paths = make_dataset(os.path.join(opt.dataroot, opt.phase + "B"), opt.max_dataset_size)
        count = samples_read(opt)
        if count is None:
            return [FileGroup(a_paths, [spec_A]), FileGroup(b_paths, [spec_B])]
        samples = min(count, max(len(a_paths), len(b_paths)))
        # Sample i reads A image i % size_A, and B image i % size_B with --serial_batches
        # (test.py's default), else a B image drawn at random: any of them.
        return [FileGroup(a_paths[:samples], [spec_A]),
                FileGroup(b_paths[:samples] if opt.serial_batches else b_paths, [spec_B])]

    def __init__(self, opt: argparse.Namespace) -> None:
        super().__init__(opt)
        check_preprocess(opt)
        self.spec_A, self.spec_B = domain_specs(opt)
        self.dir_A = os.path.join(opt.dataroot, opt.phase + "A")
        self.dir_B = os.path.join(opt.dataroot, opt.phase + "B")
        self.A_paths = make_dataset(self.dir_A, opt.max_dataset_size)
        self.B_paths = make_dataset(self.dir_B, opt.max_dataset_size)
        self.A_size = len(self.A_paths)
        self.B_size = len(self.B_paths)

    def __len__(self) -> int:
        # The larger domain sets the epoch length, so every image of both is seen.
        return max(self.A_size, self.B_size)

    def __getitem__(self, index: int) -> dict[str, Any]:
        rng = self.sample_rng(index)
        A_path = self.A_paths[index % self.A_size]
        if self.opt.serial_batches:
            index_B = index % self.B_size
        else:
            # Random partner avoids fixed pairs between the two domains.
            index_B = rng.randint(0, self.B_size - 1)
        B_path = self.B_paths[index_B]

        (A_img,), (B_img,) = load_for_network(A_path, [self.spec_A]), load_for_network(B_path, [self.spec_B])
        A = get_transform(self.opt, get_params(self.opt, picture_size(A_img), rng))(A_img)
        B = get_transform(self.opt, get_params(self.opt, picture_size(B_img), rng))(B_img)
        sample = {"A": A, "B": B, "A_paths": A_path, "B_paths": B_path}
        if self.opt.second_input:
            side, paths, spec = (("B", self.B_paths, self.spec_B) if self.opt.direction == "BtoA"
                                 else ("A", self.A_paths, self.spec_A))
            (second,) = load_for_network(paths[rng.randint(0, len(paths) - 1)], [spec])
            sample[side + "2"] = get_transform(self.opt, get_params(self.opt, picture_size(second), rng))(second)
        return sample
