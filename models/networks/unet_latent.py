"""U-Net generators that take a latent code beside the image, G(x, z) (BicycleGAN's): the code, one
vector per image, is spread over the image's pixels and concatenated to the input of the first
level only (`--where_add input`) or of every level on the way down (`--where_add all`, BicycleGAN's
default). Built by the U-Net family (unet.py) when the run's options give a code (`--nz` > 0).

Module structure and parameter names follow BicycleGAN's networks exactly (`model.down.0.weight`,
`model.submodule.down.1.weight`, ... for `all`; `model.model.0.weight`, ... for `input`), so its
checkpoints load with strict=True and ours in its test.py. Do not reorder. Its layers differ from
pix2pix's U-Net: every convolution has a bias, `--upsample bilinear` is a bilinear resize, a
reflection pad and a 3x3 convolution, `--norm none` leaves the layer out, and `--nl` picks the
activation of the way up.
"""
from __future__ import annotations

import functools
from typing import Callable

import torch
from torch import nn

from models.networks.layers import ReflectionPad2d

NONLINEARITIES = ("relu", "lrelu", "elu")
# BicycleGAN's --upsample values: transposed convolutions ("basic", its default), or a bilinear resize
BASIC_UPSAMPLING = "basic"
UPSAMPLINGS = (BASIC_UPSAMPLING, "bilinear")
WHERE_ADD = ("input", "all")


def nonlinearity(name: str) -> Callable[[], nn.Module]:
    """A constructor of the activation `--nl` names (in place, as BicycleGAN's)."""
    if name == "relu":
        return lambda: nn.ReLU(True)
    if name == "lrelu":
        return lambda: nn.LeakyReLU(0.2, True)
    if name == "elu":
        return lambda: nn.ELU(inplace=True)
    raise ValueError(f"--nl {name}: choose one of {', '.join(NONLINEARITIES)}")


def doubling_layers(in_channels: int, out_channels: int, upsample: str, sliced_pads: bool = False) -> list[nn.Module]:
    """The layers that double the size on the way up: a transposed convolution (`basic`), or a
    bilinear resize, a reflection pad (from slices with `sliced_pads`: --deterministic) and a 3x3
    convolution (`bilinear`)."""
    if upsample == BASIC_UPSAMPLING:
        return [nn.ConvTranspose2d(in_channels, out_channels, kernel_size=4, stride=2, padding=1)]
    return [nn.Upsample(scale_factor=2, mode="bilinear"), ReflectionPad2d(1, sliced=sliced_pads),
            nn.Conv2d(in_channels, out_channels, kernel_size=3, stride=1, padding=0)]


def _spread(z: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """The codes z (N x nz) as N x nz x H x W planes the size of `like`, concatenated to it."""
    planes = z.to(like.dtype).view(z.size(0), z.size(1), 1, 1).expand(-1, -1, like.size(2), like.size(3))
    return torch.cat([like, planes], 1)


class LevelWithCode(nn.Module):
    """One U-Net level whose input gets the code concatenated (`--where_add all`): `down`, the
    inner levels (`submodule`, given the code too), `up`, then the skip connection."""

    def __init__(self, input_nc: int, outer_nc: int, inner_nc: int, nz: int, submodule: nn.Module | None,
                 outermost: bool = False, innermost: bool = False, norm_layer=None,
                 nl_layer: Callable[[], nn.Module] = lambda: nn.ReLU(True), use_dropout: bool = False,
                 upsample: str = BASIC_UPSAMPLING, sliced_pads: bool = False):
        super().__init__()
        self.outermost, self.nz = outermost, nz
        doubling = functools.partial(doubling_layers, upsample=upsample, sliced_pads=sliced_pads)
        downconv = nn.Conv2d(input_nc + nz, inner_nc, kernel_size=4, stride=2, padding=1)
        if outermost:
            down = [downconv]
            up = [nl_layer(), *doubling(inner_nc * 2, outer_nc), nn.Tanh()]
        elif innermost:
            down = [nn.LeakyReLU(0.2, True), downconv]
            up = [nl_layer(), *doubling(inner_nc, outer_nc)]
            up += [norm_layer(outer_nc)] if norm_layer is not None else []
        else:
            down = [nn.LeakyReLU(0.2, True), downconv]
            down += [norm_layer(inner_nc)] if norm_layer is not None else []
            up = [nl_layer(), *doubling(inner_nc * 2, outer_nc)]
            up += [norm_layer(outer_nc)] if norm_layer is not None else []
            up += [nn.Dropout(0.5)] if use_dropout else []
        self.down = nn.Sequential(*down)
        self.submodule = submodule
        self.up = nn.Sequential(*up)

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        x_and_z = _spread(z, x) if self.nz > 0 else x
        if self.submodule is None:  # the innermost level; TorchScript compiles only the branch that applies
            return torch.cat([self.up(self.down(x_and_z)), x], 1)
        inner = self.submodule(self.down(x_and_z), z)
        return self.up(inner) if self.outermost else torch.cat([self.up(inner), x], 1)


class Level(nn.Module):
    """One U-Net level without the code (`--where_add input`: the code joins the image once)."""

    def __init__(self, input_nc: int, outer_nc: int, inner_nc: int, submodule: nn.Module | None = None,
                 outermost: bool = False, innermost: bool = False, norm_layer=None,
                 nl_layer: Callable[[], nn.Module] = lambda: nn.ReLU(True), use_dropout: bool = False,
                 upsample: str = BASIC_UPSAMPLING, sliced_pads: bool = False):
        super().__init__()
        self.outermost = outermost
        doubling = functools.partial(doubling_layers, upsample=upsample, sliced_pads=sliced_pads)
        downconv = nn.Conv2d(input_nc, inner_nc, kernel_size=4, stride=2, padding=1)
        norm = (lambda channels: [norm_layer(channels)]) if norm_layer is not None else (lambda channels: [])
        if outermost:
            layers = [downconv, submodule, nl_layer(), *doubling(inner_nc * 2, outer_nc), nn.Tanh()]
        elif innermost:
            layers = [nn.LeakyReLU(0.2, True), downconv, nl_layer(), *doubling(inner_nc, outer_nc),
                      *norm(outer_nc)]
        else:
            layers = [nn.LeakyReLU(0.2, True), downconv, *norm(inner_nc), submodule, nl_layer(),
                      *doubling(inner_nc * 2, outer_nc), *norm(outer_nc)]
            layers += [nn.Dropout(0.5)] if use_dropout else []
        self.model = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x) if self.outermost else torch.cat([self.model(x), x], 1)


class LatentUnetGenerator(nn.Module):
    """A U-Net with `num_downs` halvings taking G(x, z): z (N x nz) joins the input of every level
    (`where_add="all"`) or of the first only (`"input"`). Channels: ngf, 2, 4, then 8 x ngf."""

    __constants__ = ["code_at_every_level"]  # TorchScript compiles only the branch this constant takes

    def __init__(self, input_nc: int, output_nc: int, nz: int, num_downs: int, ngf: int = 64,
                 norm_layer=None, nl_layer: Callable[[], nn.Module] = lambda: nn.ReLU(True),
                 use_dropout: bool = False, upsample: str = BASIC_UPSAMPLING, where_add: str = "all",
                 sliced_pads: bool = False):
        super().__init__()
        self.nz, self.where_add = nz, where_add
        self.code_at_every_level = where_add == "all"
        common = dict(norm_layer=norm_layer, nl_layer=nl_layer, upsample=upsample, sliced_pads=sliced_pads)
        widest = ngf * 8
        if where_add == "all":
            block = LevelWithCode(widest, widest, widest, nz, None, innermost=True, **common)
            for _ in range(num_downs - 5):  # the 8 x ngf levels below the three widening ones
                block = LevelWithCode(widest, widest, widest, nz, block, use_dropout=use_dropout, **common)
            for outer in (ngf * 4, ngf * 2, ngf):
                block = LevelWithCode(outer, outer, min(outer * 2, widest), nz, block, **common)
            self.model = LevelWithCode(input_nc, output_nc, ngf, nz, block, outermost=True, **common)
        else:
            block = Level(widest, widest, widest, innermost=True, **common)
            for _ in range(num_downs - 5):
                block = Level(widest, widest, widest, block, use_dropout=use_dropout, **common)
            for outer in (ngf * 4, ngf * 2, ngf):
                block = Level(outer, outer, min(outer * 2, widest), block, **common)
            self.model = Level(input_nc + nz, output_nc, ngf, block, outermost=True, **common)

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        if self.code_at_every_level:
            return self.model(x, z)
        return self.model(_spread(z, x) if self.nz > 0 else x)
