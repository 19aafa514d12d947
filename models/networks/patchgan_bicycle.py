"""BicycleGAN's PatchGAN discriminators (`--netD`/`--netD2 basic_256_multi|basic_128_multi`): 3 (256)
or 2 (128) strided layers, judging the image at `--num_Ds` scales, each a PatchGAN half as wide as
the one before on the image averaged down once more; they return one prediction grid per scale (a
list), or the grid itself with --num_Ds 1. (Its code also names basic_256 and basic_128, which fail
to build there; they are left out here.)

Module structure and parameter names follow BicycleGAN's networks (`model_0.0.weight`, `model_1...`;
`model.0.weight` for one scale), so its checkpoints load with strict=True. Do not reorder.
"""
from __future__ import annotations

import argparse
from typing import Any

import torch
from torch import nn

from models.networks.family import DISCRIMINATOR, NetworkFamily, SizeRule
from models.networks.layers import get_norm_layer
from util.flag_types import Bounded

# name -> (strided layers, judged at several scales)
_LAYERS = {"basic_256_multi": 3, "basic_128_multi": 2}
DEFAULT = "basic_256_multi"


def patchgan_layers(input_nc: int, ndf: int, n_layers: int, norm_layer) -> list[nn.Module]:
    """4x4 convs: `n_layers` strided ones widening ndf x 1, 2, 4, 8 (at most), one more at stride 1,
    and a 1-channel prediction; normalised after all but the first and the last."""
    layers: list[nn.Module] = [nn.Conv2d(input_nc, ndf, 4, stride=2, padding=1), nn.LeakyReLU(0.2, True)]
    width = ndf
    for level in range(1, n_layers + 1):
        previous, width = width, ndf * min(2 ** level, 8)
        stride = 2 if level < n_layers else 1
        layers += [nn.Conv2d(previous, width, 4, stride=stride, padding=1)]
        layers += [norm_layer(width)] if norm_layer is not None else []
        layers += [nn.LeakyReLU(0.2, True)]
    layers.append(nn.Conv2d(width, 1, 4, stride=1, padding=1))
    return layers


class MultiScalePatchGAN(nn.Module):
    """`num_D` PatchGANs, the i-th (ndf / 2**i wide) judging the image averaged down i times.
    Returns a list of prediction grids, finest first, or one grid when `num_D` is 1."""

    def __init__(self, input_nc: int, ndf: int, n_layers: int, norm_layer, num_D: int) -> None:
        super().__init__()
        self.num_D = num_D
        if num_D == 1:
            self.model = nn.Sequential(*patchgan_layers(input_nc, ndf, n_layers, norm_layer))
            return
        self.model_0 = nn.Sequential(*patchgan_layers(input_nc, ndf, n_layers, norm_layer))
        self.down = nn.AvgPool2d(3, stride=2, padding=[1, 1], count_include_pad=False)
        for scale in range(1, num_D):
            width = int(round(ndf / 2 ** scale))
            self.add_module(f"model_{scale}", nn.Sequential(*patchgan_layers(input_nc, width, n_layers, norm_layer)))

    def forward(self, image: torch.Tensor) -> torch.Tensor | list[torch.Tensor]:
        if self.num_D == 1:
            return self.model(image)
        predictions = []
        for scale in range(self.num_D):
            predictions.append(getattr(self, f"model_{scale}")(image))
            if scale < self.num_D - 1:
                image = self.down(image)
        return predictions


class BicyclePatchGANFamily(NetworkFamily):
    role = DISCRIMINATOR
    names = tuple(_LAYERS)
    shape_flags = ("ndf", "norm", "num_Ds")
    description = "basic_256_multi, basic_128_multi: BicycleGAN's PatchGANs at --num_Ds scales"

    @staticmethod
    def add_flags(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        if "--num_Ds" not in parser._option_string_actions:  # --netD and --netD2 may both be of this family
            parser.add_argument("--num_Ds", type=Bounded(int, low=1, high=8, name="num_Ds"), default=2,
                                on_resume="architecture",
                                help="with --netD/--netD2 basic_*_multi: the number of scales each judges at")
        return parser

    def build(self, flags: Any, input_nc: int, output_nc: int = 1) -> nn.Module:
        norm_layer = None if flags.norm == "none" else get_norm_layer(flags.norm)
        return MultiScalePatchGAN(input_nc, flags.ndf, _LAYERS[self.name], norm_layer, getattr(flags, "num_Ds", 2))

    def size_rule(self, flags: Any) -> SizeRule:
        # the coarsest scale's input must survive the halvings and two 4x4 convs at stride 1
        smallest = 2 ** (getattr(flags, "num_Ds", 2) - 1) * (2 ** _LAYERS[self.name] * 3)
        return SizeRule(1, smallest)
