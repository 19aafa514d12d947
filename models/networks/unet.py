"""The U-Net generators (`--netG unet_256`, `unet_128`): `num_downs` halvings with skip connections,
so a 2**num_downs input is 1x1 at the bottleneck. Layers and keys follow the reference
(`model.model.0.weight`, nested one `model` per level). Do not reorder.

With a latent code in the options (`--nz` > 0: BicycleGAN's model) the same names build BicycleGAN's
U-Net taking G(x, z) instead (unet_latent.py), as they do in its code."""
from __future__ import annotations

import functools
from typing import Any, Mapping

import torch
from torch import nn

from models.networks.family import NetworkFamily, SizeRule
from models.networks.layers import (
    convolutions,
    get_norm_layer,
    norm_seen,
    recompute_in_backward,
    resize_seen,
    use_resize_convolutions,
    uses_bias,
    wants_checkpointing,
    wants_sliced_pads,
)
from models.networks.unet_latent import BASIC_UPSAMPLING, LatentUnetGenerator, nonlinearity
from util.errors import UserError

_DEPTHS = {"unet_256": 8, "unet_128": 7}
# pix2pix's default generator (the reference's), named here so that no other file spells it
PIX2PIX_DEFAULT = "unet_256"


class UnetGenerator(nn.Module):
    """U-Net with `num_downs` halvings: a 2**num_downs input becomes 1x1 at the bottleneck; `dims` 3
    for volumes (unet_3d.py: the same levels with 3-D convolutions, the same keys). `recompute`: the
    levels below the outermost recompute their activations in backward (--checkpoint_activations)."""

    def __init__(self, input_nc: int, output_nc: int, num_downs: int, ngf: int = 64,
                 norm_layer=nn.BatchNorm2d, use_dropout: bool = False, dims: int = 2, *, recompute: bool = False):
        super().__init__()
        # Built from the innermost block outwards.
        level = functools.partial(UnetSkipConnectionBlock, input_nc=None, norm_layer=norm_layer, dims=dims,
                                  recompute=recompute)
        # Level d (0: the outermost) holds widths[d] channels inside and widths[d - 1] at its border; the
        # reference's levels below the fourth all hold ngf * 8, and only those between the fourth and the
        # innermost have dropout. Shallower U-Nets (the 3-D unet_8_3d, unet_16_3d) keep the same widths.
        widths = [ngf * min(2 ** d, 8) for d in range(num_downs)]
        unet_block = level(widths[-2], widths[-1], submodule=None, innermost=True)
        for d in range(num_downs - 2, 0, -1):
            unet_block = level(widths[d - 1], widths[d], submodule=unet_block, use_dropout=use_dropout and d >= 4)
        # the outermost level would gain nothing from recomputing: its output is the network's
        self.model = UnetSkipConnectionBlock(output_nc, ngf, input_nc=input_nc, submodule=unet_block,
                                             outermost=True, norm_layer=norm_layer, dims=dims)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.model(input)


class UnetSkipConnectionBlock(nn.Module):
    """One U-Net level: down, the inner levels, up, concatenated with the input (skip).

    With `recompute` (a level below the outermost, --checkpoint_activations), its own layers keep
    only their inputs and are recomputed in backward: its down part (conv, norm) and its up part
    (conv, norm, dropout), each from its input; the levels inside it run as themselves (recomputing in
    turn), so every layer is recomputed once. Same output, gradients and state_dict keys."""

    def __init__(self, outer_nc: int, inner_nc: int, input_nc: int | None = None, submodule=None,
                 outermost: bool = False, innermost: bool = False, norm_layer=nn.BatchNorm2d,
                 use_dropout: bool = False, dims: int = 2, recompute: bool = False):
        super().__init__()
        self.outermost = outermost
        self.recompute = recompute and not outermost
        use_bias = uses_bias(norm_layer)
        if input_nc is None:
            input_nc = outer_nc
        conv, conv_transpose = convolutions(dims)
        downconv = conv(input_nc, inner_nc, kernel_size=4, stride=2, padding=1, bias=use_bias)
        downrelu = nn.LeakyReLU(0.2, True)
        downnorm = norm_layer(inner_nc)
        uprelu = nn.ReLU(True)
        upnorm = norm_layer(outer_nc)
        if outermost:
            upconv = conv_transpose(inner_nc * 2, outer_nc, kernel_size=4, stride=2, padding=1)
            model = [downconv, submodule, uprelu, upconv, nn.Tanh()]
        elif innermost:
            upconv = conv_transpose(inner_nc, outer_nc, kernel_size=4, stride=2, padding=1, bias=use_bias)
            model = [downrelu, downconv, uprelu, upconv, upnorm]
        else:
            upconv = conv_transpose(inner_nc * 2, outer_nc, kernel_size=4, stride=2, padding=1, bias=use_bias)
            model = [downrelu, downconv, downnorm, submodule, uprelu, upconv, upnorm]
            if use_dropout:
                model += [nn.Dropout(0.5)]
        self.model = nn.Sequential(*model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.jit.is_scripting():  # checkpointing is for training; scripted networks translate
            if self.recompute:
                return self._recomputing_forward(x)
        if self.outermost:
            return self.model(x)
        return torch.cat([x, self.model(x)], 1)

    def _recomputing_forward(self, x: torch.Tensor) -> torch.Tensor:
        # Each of the two parts starts with an in-place activation whose output the plain level
        # shares with the skip connection or the inner level; it runs outside the checkpoint, whose
        # saved input must not change before the recomputation.
        layers = list(self.model)
        # [downrelu, downconv, (downnorm), (submodule), uprelu, upconv, upnorm, (dropout)]
        up_start = next(i for i, layer in enumerate(layers) if isinstance(layer, nn.ReLU))
        inner = layers[up_start - 1] if isinstance(layers[up_start - 1], UnetSkipConnectionBlock) else None
        down = nn.Sequential(*layers[1:up_start - 1 if inner is not None else up_start])
        x = layers[0](x)
        h = recompute_in_backward(self.model, down, x)
        if inner is not None:
            h = inner(h)
        h = layers[up_start](h)
        return torch.cat([x, recompute_in_backward(self.model, nn.Sequential(*layers[up_start + 1:]), h)], 1)


class UnetFamily(NetworkFamily):
    """unet_256 / unet_128: sides that are multiples of 256 (128), from that size up."""

    role = "generator"
    names = tuple(_DEPTHS)
    # nz, where_add, nl: BicycleGAN's U-Net (a run without a code has none of them)
    shape_flags = ("ngf", "norm", "no_dropout", "upsample", "nz", "where_add", "nl")
    description = "unet_256, unet_128: a U-Net for 256 (128) px images"

    @property
    def depth(self) -> int:
        return _DEPTHS[self.name]

    def latent_size(self, flags: Any) -> int:
        return int(getattr(flags, "nz", 0) or 0)

    def recomputes_activations(self, flags: Any) -> bool:
        return not self.latent_size(flags)  # the levels below the outermost; BicycleGAN's U-Net has none

    def build(self, flags: Any, input_nc: int, output_nc: int = 1) -> nn.Module:
        if self.latent_size(flags):  # BicycleGAN's defaults for what an architecture given in part leaves out
            return LatentUnetGenerator(input_nc, output_nc, flags.nz, self.depth, flags.ngf,
                                       norm_layer=None if flags.norm == "none" else get_norm_layer(flags.norm),
                                       nl_layer=nonlinearity(getattr(flags, "nl", None) or "relu"),
                                       use_dropout=not flags.no_dropout, upsample=flags.upsample,
                                       where_add=getattr(flags, "where_add", None) or "all",
                                       sliced_pads=wants_sliced_pads(flags))
        net = UnetGenerator(input_nc, output_nc, self.depth, flags.ngf, norm_layer=get_norm_layer(flags.norm),
                            use_dropout=not flags.no_dropout, recompute=wants_checkpointing(flags))
        if getattr(flags, "upsample", "transpose") != "transpose":
            use_resize_convolutions(net, flags.upsample)
        return net

    @classmethod
    def from_weights(cls, state: Mapping[str, Any]) -> dict | None:
        """Nested blocks, one "model" per level of depth; a U-Net's dropout has no weights, so the
        weights cannot say whether it had any."""
        if "model.down.0.weight" in state:
            return cls._latent_from_weights(state)
        first = state.get("model.model.0.weight")
        if first is None or first.ndim != 4:
            return None
        depth = max(key.split(".").count("model") for key in state) - 1
        name = next((name for name, levels in _DEPTHS.items() if levels == depth), None)
        if name is None or not {"model.model.3.weight", "model.model.3.1.weight"} & set(state):
            return None
        if "model.model.3.weight" in state:  # ConvTranspose2d: (in, out, kh, kw)
            output_nc = state["model.model.3.weight"].shape[1]
        else:  # --upsample resize: Conv2d (out, in, kh, kw)
            output_nc = state["model.model.3.1.weight"].shape[0]
        return {"netG": name, "norm": norm_seen(state, "model.model.0"), "ngf": first.shape[0],
                "input_nc": first.shape[1], "output_nc": output_nc, **resize_seen(state)}

    @staticmethod
    def _latent_from_weights(state: Mapping[str, Any]) -> dict | None:
        """BicycleGAN's U-Net with the code added at every level (`where_add all`): each level's
        first conv takes its input's channels plus nz. (With `where_add input` its weights look like a
        pix2pix U-Net's taking input_nc + nz channels; architecture.json or --nz tells them apart.)"""
        first, second = state["model.down.0.weight"], state.get("model.submodule.down.1.weight")
        if first.ndim != 4 or second is None:
            return None
        depth = max(key.split(".").count("submodule") for key in state) + 1
        name = next((name for name, levels in _DEPTHS.items() if levels == depth), None)
        if name is None:
            return None
        ngf = first.shape[0]
        nz = second.shape[1] - ngf
        basic = "model.up.1.weight" in state  # a transposed conv (in, out, ...) right after the activation
        output_nc = state["model.up.1.weight"].shape[1] if basic else state["model.up.3.weight"].shape[0]
        batch = any(key.endswith("running_mean") for key in state)
        return {"netG": name, "ngf": ngf, "nz": nz, "where_add": "all",
                "upsample": BASIC_UPSAMPLING if basic else "bilinear", "norm": "batch" if batch else "instance",
                "nl": "relu", "input_nc": first.shape[1] - nz, "output_nc": output_nc}

    def size_rule(self, flags: Any) -> SizeRule:
        multiple = 2 ** self.depth  # halved once per level, down to 1 pixel
        return SizeRule(multiple, multiple)

    def check_input_size(self, flags: Any, *sizes: int) -> None:
        multiple = self.size_rule(flags).multiple
        if min(sizes) < multiple:
            raise UserError(
                f"--netG {self.name} needs images of at least {multiple}x{multiple} pixels (it halves the size "
                f"{self.depth} times) but got {'x'.join(map(str, sizes))}; use --crop_size {multiple} (and "
                f"--load_size >= {multiple}) or a resnet generator, which takes any multiple of 4 from 8 up.")
        super().check_input_size(flags, *sizes)
