"""Colorization: pix2pix from the L channel of Lab to its ab channels."""
from __future__ import annotations

import numpy as np
import torch

from data.colorization_dataset import lab_to_rgb
from models.pix2pix_model import Pix2PixModel


class ColorizationModel(Pix2PixModel):
    """Same training as pix2pix; visuals are converted back to RGB so they can be viewed."""

    visual_sides = {"real_A": "A", "real_B_rgb": "B", "fake_B_rgb": "B"}
    translator_refusal = ("whose generator maps the L channel to the ab channels of the Lab colour space; "
                          "translate with test.py --model colorization instead")

    @classmethod
    def scored_pairs(cls, paired: bool) -> dict[str, tuple[str, str | None]]:
        """The colourised image against the original, both in RGB (the dataset is always paired)."""
        return {"": ("fake_B_rgb", "real_B_rgb")} if paired else {}

    @staticmethod
    def modify_commandline_options(parser, is_train: bool = True):
        Pix2PixModel.modify_commandline_options(parser, is_train)
        parser.set_defaults(dataset_mode="colorization")
        return parser

    def __init__(self, opt, ctx):
        super().__init__(opt, ctx)
        self.visual_names = ["real_A", "real_B_rgb", "fake_B_rgb"]

    @staticmethod
    def lab2rgb(L: torch.Tensor, ab: torch.Tensor) -> torch.Tensor:
        """Lab tensors as produced by the colorization dataset -> RGB images in [-1, 1]."""
        images = []
        for L_one, ab_one in zip(L.detach().float().cpu(), ab.detach().float().cpu()):
            rgb = lab_to_rgb(L_one.numpy(), ab_one.numpy())  # HxWx3 uint8
            images.append(torch.from_numpy(np.ascontiguousarray(rgb)).permute(2, 0, 1).float() / 127.5 - 1.0)
        return torch.stack(images)

    def compute_visuals(self) -> None:
        self.real_B_rgb = self.lab2rgb(self.real_A, self.real_B)
        self.fake_B_rgb = self.lab2rgb(self.real_A, self.fake_B)
