"""The encoders (`--netE resnet_256|resnet_128|conv_256|conv_128`, BicycleGAN's): an image to a
latent code, E(B) -> (mu, logvar) of `--nz` numbers each (a Gaussian the code is drawn from).

The image is halved until it is 8x8 (five times for the *_256 names, four for *_128), averaged over
an 8x8 window and mapped by two linear layers, so an encoder takes images of the size its name
says (from 256 to 511 pixels a side for *_256, 128 to 255 for *_128). Module structure and
parameter names follow BicycleGAN's networks (`conv.0.weight`, `fc.0.weight`, `fcVar.0.weight`),
so its checkpoints load with strict=True. Do not reorder.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import nn

from models.networks.family import ENCODER, NetworkFamily, SizeRule
from models.networks.layers import get_norm_layer
from util.errors import UserError

# name -> (kind, number of halvings before the 8x8 average)
_SHAPES = {"resnet_256": ("residual", 5), "resnet_128": ("residual", 4), "conv_256": ("strided", 5),
           "conv_128": ("strided", 4)}
DEFAULT = "resnet_256"


def _leaky() -> nn.Module:
    return nn.LeakyReLU(0.2, True)


class HalvingResidualBlock(nn.Module):
    """norm, activation, 3x3 conv, norm, activation, 3x3 conv then 2x2 average (halving the size),
    plus a shortcut that averages first and maps channels by a 1x1 conv."""

    def __init__(self, in_channels: int, out_channels: int, norm_layer=None) -> None:
        super().__init__()
        norm = (lambda channels: [norm_layer(channels)]) if norm_layer is not None else (lambda channels: [])
        self.conv = nn.Sequential(
            *norm(in_channels), _leaky(), nn.Conv2d(in_channels, in_channels, 3, padding=1),
            *norm(in_channels), _leaky(),
            nn.Sequential(nn.Conv2d(in_channels, out_channels, 3, padding=1), nn.AvgPool2d(2, 2)))
        self.shortcut = nn.Sequential(nn.AvgPool2d(2, 2), nn.Conv2d(in_channels, out_channels, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x) + self.shortcut(x)


class GaussianHead(nn.Module):
    """Convolutional features (`conv`, ending in the 8x8 average) mapped by two linear layers to the
    mean and log-variance of a code of `nz` numbers; subclasses build the layers of `conv`."""

    def set_layers(self, layers: list[nn.Module], width: int, nz: int) -> None:
        self.conv = nn.Sequential(*layers)
        self.fc = nn.Sequential(nn.Linear(width, nz))
        self.fcVar = nn.Sequential(nn.Linear(width, nz))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.conv(x).flatten(1)
        return self.fc(features), self.fcVar(features)


class ResnetEncoder(GaussianHead):
    """A strided 4x4 conv, then `halvings - 1` residual blocks halving the size (ndf x 1, 2, 3, 4,
    4, ... channels), an activation and the 8x8 average; linear layers give mu and logvar."""

    def __init__(self, input_nc: int, nz: int, ndf: int, halvings: int, norm_layer=None) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(input_nc, ndf, 4, stride=2, padding=1)]
        width = ndf
        for level in range(1, halvings):
            width = ndf * min(4, level + 1)
            layers.append(HalvingResidualBlock(ndf * min(4, level), width, norm_layer))
        layers += [_leaky(), nn.AvgPool2d(8)]
        self.set_layers(layers, width, nz)


class ConvEncoder(GaussianHead):
    """`halvings` strided 4x4 convs (ndf x 1, 2, 4, 4, ... channels) and the 8x8 average; linear
    layers give mu and logvar."""

    def __init__(self, input_nc: int, nz: int, ndf: int, halvings: int, norm_layer=None) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(input_nc, ndf, 4, stride=2, padding=1), _leaky()]
        width = ndf
        for level in range(1, halvings):
            previous, width = width, ndf * min(2 ** level, 4)
            layers.append(nn.Conv2d(previous, width, 4, stride=2, padding=1))
            layers += [norm_layer(width)] if norm_layer is not None else []
            layers.append(_leaky())
        layers.append(nn.AvgPool2d(8))
        self.set_layers(layers, width, nz)


def optional_norm_layer(norm: str):
    """BicycleGAN's networks leave the layer out for --norm none (its keys count on it)."""
    return None if norm == "none" else get_norm_layer(norm)


class EncoderFamily(NetworkFamily):
    """resnet_256 / resnet_128 / conv_256 / conv_128: B -> (mu, logvar) of --nz numbers."""

    role = ENCODER
    names = tuple(_SHAPES)
    shape_flags = ("nef", "nz", "norm")
    description = ("resnet_256, resnet_128: residual encoders for 256 (128) px images; conv_256, conv_128: "
                   "plain strided convolutions")

    @property
    def halvings(self) -> int:
        return _SHAPES[self.name][1]

    def build(self, flags: Any, input_nc: int, output_nc: int = 1) -> nn.Module:
        """An encoder of `input_nc`-channel images into codes of `output_nc` (--nz) numbers."""
        kind = _SHAPES[self.name][0]
        encoder = ResnetEncoder if kind == "residual" else ConvEncoder
        return encoder(input_nc, output_nc, flags.nef, self.halvings, optional_norm_layer(flags.norm))

    def size_rule(self, flags: Any) -> SizeRule:
        smallest = 8 * 2 ** self.halvings
        return SizeRule(1, smallest)

    def check_input_size(self, flags: Any, *sizes: int) -> None:
        smallest = 8 * 2 ** self.halvings
        if all(smallest <= size < 2 * smallest for size in sizes):
            return
        other = next((name for name, (kind, halvings) in _SHAPES.items()
                      if kind == _SHAPES[self.name][0] and all(8 * 2 ** halvings <= size < 16 * 2 ** halvings
                                                                for size in sizes)), None)
        hint = f"use --netE {other}, which takes that size, or " if other else ""
        raise UserError(f"--netE {self.name} encodes images of {smallest} to {2 * smallest - 1} pixels a side (it "
                        f"halves them {self.halvings} times down to one 8x8 average) but the target images are "
                        f"{'x'.join(map(str, sizes))}; {hint}set --crop_size {smallest}.")

    @classmethod
    def from_weights(cls, state: Mapping[str, Any]) -> dict | None:
        first, mean = state.get("conv.0.weight"), state.get("fc.0.weight")
        if first is None or mean is None or "fcVar.0.weight" not in state:
            return None
        resnet = any(key.endswith("shortcut.1.weight") for key in state)
        if resnet:
            halvings = 1 + len({key.split(".")[1] for key in state if ".shortcut." in key})
        else:
            halvings = sum(1 for key, value in state.items() if key.startswith("conv.") and value.ndim == 4)
        seen = ("residual" if resnet else "strided", halvings)
        name = next((name for name, shape in _SHAPES.items() if shape == seen), None)
        if name is None:
            return None
        return {"netE": name, "nef": first.shape[0], "nz": mean.shape[0], "input_nc": first.shape[1]}
