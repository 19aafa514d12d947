"""The time-conditioned PatchGAN of UNSB (`--netD basic_cond`, `--netE basic_cond`; --model sb): CUT's
antialiased 70x70 PatchGAN whose every convolution also adds an embedding of the step's time index
per channel. --model sb judges the last step's outputs with one (D) and scores pairs of (input,
output) with another (E, the energy of the Schrödinger-bridge loss), which takes the pair and a
second pair concatenated along the channels (`forward(x, time_index, x2)`).

Layers and keys follow cyclomon/UNSB's NLayerDiscriminator_ncsn (`model_main.0.conv1.weight`,
`model_main.0.dense.weight`, `model_main.0.down.filt`, `final_conv.weight`, `t_embed.main.0.weight`),
so its checkpoints load with strict=True and ours in its code. Do not reorder. Like its code, it has
3 downsampling layers whatever --n_layers_D says, and only the antialiased layout (its --no_antialias
branch builds nothing usable), so --no_antialias is refused with it.
"""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from models.networks.blur import Downsample
from models.networks.family import NetworkFamily, SizeRule
from models.networks.layers import get_norm_layer, uses_bias, wants_sliced_pads

# The name --model sb defaults to for D and E, spelled here alone (its family's)
DEFAULT = "basic_cond"
LAYERS = 3


def timestep_embedding(steps: torch.Tensor, width: int, max_period: float = 10000.0) -> torch.Tensor:
    """Sinusoidal embedding of whole step numbers (N,) as N x width (sines, then cosines), the
    transformers' position code that UNSB (after NCSN++) feeds its networks; an odd width is zero-padded."""
    half = width // 2
    frequencies = torch.exp(torch.arange(half, dtype=torch.float32, device=steps.device)
                            * -(math.log(max_period) / (half - 1)))
    angles = steps.float()[:, None] * frequencies[None, :]
    embedding = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
    return F.pad(embedding, (0, 1)) if width % 2 else embedding


class TimeConditionedConvBlock(nn.Module):
    """conv (4x4, stride 1) + the time embedding per channel, (norm), LeakyReLU, (blur-downsample):
    UNSB's ConvBlock_cond. Its `down` is built, and saved, even where it is not applied."""

    def __init__(self, in_channels: int, out_channels: int, embed_width: int, norm_layer=None, downsample: bool = True,
                 use_bias: bool = True, sliced_pads: bool = False):
        super().__init__()
        self.downsample = downsample
        self.conv1 = nn.Conv2d(in_channels, out_channels, kernel_size=4, stride=1, padding=1, bias=use_bias)
        self.norm = norm_layer(out_channels) if norm_layer is not None else None
        self.act = nn.LeakyReLU(0.2, True)
        self.down = Downsample(out_channels, sliced_pads)
        self.dense = nn.Linear(embed_width, out_channels)

    def forward(self, x: torch.Tensor, time_embedding: torch.Tensor) -> torch.Tensor:
        out = self.conv1(x) + self.dense(time_embedding)[:, :, None, None]
        if self.norm is not None:
            out = self.norm(out)
        out = self.act(out)
        return self.down(out) if self.downsample else out


class TimeEmbedding(nn.Module):
    """The sinusoidal embedding of the time index through two linear layers (UNSB's TimestepEmbedding)."""

    def __init__(self, width: int):
        super().__init__()
        self.width = width
        self.main = nn.Sequential(nn.Linear(width, width), nn.LeakyReLU(0.2), nn.Linear(width, width),
                                  nn.LeakyReLU(0.2))

    def forward(self, time_index: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return self.main(timestep_embedding(time_index, self.width).to(dtype))


class TimeConditionedPatchDiscriminator(nn.Module):
    """A grid of logits (D) or energies (E) for x, or for x and x2 side by side along the channels."""

    def __init__(self, input_nc: int, ndf: int = 64, norm_layer=nn.InstanceNorm2d, sliced_pads: bool = False):
        super().__init__()
        use_bias, width = uses_bias(norm_layer), 4 * ndf
        blocks = [TimeConditionedConvBlock(input_nc, ndf, width, use_bias=use_bias, sliced_pads=sliced_pads)]
        mult = 1
        for n in range(1, LAYERS):
            previous, mult = mult, min(2 ** n, 8)
            blocks.append(TimeConditionedConvBlock(ndf * previous, ndf * mult, width, norm_layer, use_bias=use_bias,
                                                   sliced_pads=sliced_pads))
        previous, mult = mult, min(2 ** LAYERS, 8)
        blocks.append(TimeConditionedConvBlock(ndf * previous, ndf * mult, width, norm_layer, downsample=False,
                                               use_bias=use_bias, sliced_pads=sliced_pads))
        self.model_main = nn.ModuleList(blocks)
        self.final_conv = nn.Conv2d(ndf * mult, 1, kernel_size=4, stride=1, padding=1)
        self.t_embed = TimeEmbedding(width)

    def forward(self, x: torch.Tensor, time_index: torch.Tensor, x2: torch.Tensor | None = None) -> torch.Tensor:
        time_embedding = self.t_embed(time_index, x.dtype)
        out = x if x2 is None else torch.cat([x, x2], dim=1)
        for block in self.model_main:
            out = block(out, time_embedding)
        return self.final_conv(out)


class TimeConditionedPatchGANFamily(NetworkFamily):
    """basic_cond: 3 blur-downsamplings, each layer told the time index."""

    role = "discriminator"
    names = (DEFAULT,)
    shape_flags = ("ndf", "norm")
    description = "basic_cond: UNSB's 70x70 PatchGAN taking a step's time index (--model sb)"

    def build(self, flags: Any, input_nc: int, output_nc: int = 1) -> nn.Module:
        return TimeConditionedPatchDiscriminator(input_nc, flags.ndf, get_norm_layer(flags.norm),
                                                 sliced_pads=wants_sliced_pads(flags))

    def size_rule(self, flags: Any) -> SizeRule:
        return SizeRule(1, 3 * 2 ** LAYERS)

    def time_conditioned(self, flags: Any) -> bool:
        return True

    def check_flags(self, flags: Any) -> tuple[str, str] | None:
        if getattr(flags, "no_antialias", False):
            return ("no_antialias", f"--netD {self.name} is UNSB's antialiased discriminator only (its code's "
                                    f"--no_antialias branch builds no usable network); drop --no_antialias")
        return None
