"""A generator family that takes a latent code beside the image, G(x, z), existing only in the test
suite (`--netG custom_networks.latent_net`): the code (`--nz` numbers) is spread over the image and
concatenated to it as extra channels (BicycleGAN's "add to input"), then a small conv net with one
downsampling translates. Several codes give several outputs for one input."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from models.networks import NetworkFamily, SizeRule, get_norm_layer


class LatentGenerator(nn.Module):
    def __init__(self, input_nc: int, output_nc: int, nz: int, width: int, norm_layer) -> None:
        super().__init__()
        self.nz = nz
        self.model = nn.Sequential(
            nn.Conv2d(input_nc + nz, width, 3, padding=1), norm_layer(width), nn.ReLU(True),
            nn.Conv2d(width, 2 * width, 3, stride=2, padding=1), norm_layer(2 * width), nn.ReLU(True),
            nn.ConvTranspose2d(2 * width, width, 4, stride=2, padding=1), norm_layer(width), nn.ReLU(True),
            nn.Conv2d(width, output_nc, 3, padding=1), nn.Tanh())

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        code = z[:, :, None, None].expand(-1, -1, x.shape[2], x.shape[3]).to(x.dtype)
        return self.model(torch.cat([x, code], 1))


class LatentFamily(NetworkFamily):
    role = "generator"
    shape_flags = ("ngf", "norm", "nz")

    @staticmethod
    def add_flags(parser):
        if "--nz" not in parser._option_string_actions:  # a model giving codes (BicycleGAN) has it already
            parser.add_argument("--nz", type=int, default=4, on_resume="architecture",
                                help="numbers in the latent code")
        return parser

    def build(self, flags: Any, input_nc: int, output_nc: int = 1) -> nn.Module:
        return LatentGenerator(input_nc, output_nc, flags.nz, flags.ngf, get_norm_layer(flags.norm))

    def latent_size(self, flags: Any) -> int:
        return flags.nz

    def size_rule(self, flags: Any) -> SizeRule:
        return SizeRule(2, 4)

    def receptive_radius(self, flags: Any) -> int:
        return 8
