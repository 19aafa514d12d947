"""A generator family that exists only in the test suite, used as `--netG custom_networks.dilated_net`
with tests/ on PYTHONPATH, as a user's own module would be: a stem, one stride-2 downsampling,
`--dilated_blocks` residual blocks of dilated 3x3 convolutions, one transposed-convolution
upsampling. Nothing in the product knows it; it declares its own facts here."""
from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import nn

from models.networks import NetworkFamily, SizeRule, get_norm_layer, recompute_in_backward, wants_checkpointing


class DilatedBlock(nn.Module):
    """Built with `recompute` (--checkpoint_activations), the body keeps only its input and
    recomputes its activations in backward."""

    def __init__(self, width: int, norm_layer, recompute: bool = False) -> None:
        super().__init__()
        self.recompute = recompute
        self.body = nn.Sequential(nn.Conv2d(width, width, 3, padding=2, dilation=2), norm_layer(width), nn.ReLU(True),
                                  nn.Conv2d(width, width, 3, padding=2, dilation=2), norm_layer(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.jit.is_scripting():  # scripts/export.py scripts the plain branch
            if self.recompute:
                return x + recompute_in_backward(self.body, self.body, x)
        return x + self.body(x)


class DilatedGenerator(nn.Module):
    def __init__(self, input_nc: int, output_nc: int, width: int, blocks: int, norm_layer,
                 recompute: bool = False) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(input_nc, width, 3, padding=1), norm_layer(width), nn.ReLU(True),
                                  nn.Conv2d(width, 2 * width, 3, stride=2, padding=1), norm_layer(2 * width),
                                  nn.ReLU(True))
        self.blocks = nn.Sequential(*[DilatedBlock(2 * width, norm_layer, recompute) for _ in range(blocks)])
        self.head = nn.Sequential(nn.ConvTranspose2d(2 * width, width, 4, stride=2, padding=1), norm_layer(width),
                                  nn.ReLU(True), nn.Conv2d(width, output_nc, 3, padding=1), nn.Tanh())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)))


class DilatedFamily(NetworkFamily):
    """Sides that are even and at least 4 pixels; each block reaches 8 pixels further."""

    role = "generator"
    shape_flags = ("ngf", "norm", "dilated_blocks")

    @staticmethod
    def add_flags(parser):
        parser.add_argument("--dilated_blocks", type=int, default=2, on_resume="architecture",
                            help="residual blocks of dilated convolutions")
        return parser

    def build(self, flags: Any, input_nc: int, output_nc: int = 1) -> nn.Module:
        return DilatedGenerator(input_nc, output_nc, flags.ngf, flags.dilated_blocks, get_norm_layer(flags.norm),
                                recompute=wants_checkpointing(flags))

    def recomputes_activations(self, flags: Any) -> bool:
        return True  # its dilated blocks

    @classmethod
    def from_weights(cls, state: Mapping[str, Any]) -> dict | None:
        if "stem.0.weight" not in state:
            return None
        blocks = {key.split(".")[1] for key in state if key.startswith("blocks.")}
        return {"netG": cls.__module__, "ngf": state["stem.0.weight"].shape[0], "dilated_blocks": len(blocks),
                "input_nc": state["stem.0.weight"].shape[1], "output_nc": state["head.3.weight"].shape[0],
                "norm": "none"}

    def size_rule(self, flags: Any) -> SizeRule:
        return SizeRule(2, 4)

    def receptive_radius(self, flags: Any) -> int:
        # stem 1 + 2, each block two dilation-2 convs at half size (8 px), head 2 + 1
        return 6 + 8 * flags.dilated_blocks
