"""The volumetric U-Net generators (`--netG unet_32_3d`, `unet_64_3d`, `unet_128_3d`): unet.py's
U-Net with every layer in 3-D, for pix2pix (and CycleGAN) on medical volumes. `num_downs` halvings
(5, 6, 7: log2 of the number) with skip connections, so a volume whose sides are 2**num_downs is
1x1x1 at the bottleneck; sizes smaller than the 2-D ones because volumes are trained in patches.

Layers and keys are the 2-D reference's (`model.model.0.weight`, nested one `model` per level) with
Conv3d and ConvTranspose3d (4x4x4, stride 2) and 3-D norms; the conv weights are 5-D, which tells
the two families' weights apart. BicycleGAN's latent input (unet_latent.py) has no 3-D version.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import nn

from models.activation_checkpointing import recompute_in_backward
from models.networks.family import NetworkFamily, SizeRule
from models.networks.layers import (check_volume_size, get_norm_layer, norm_seen, resize_seen, use_resize_convolutions,
                                    uses_bias)
from models.networks.unet import UnetFamily

_DEPTHS = {"unet_32_3d": 5, "unet_64_3d": 6, "unet_128_3d": 7}


class Unet3dGenerator(nn.Module):
    """U-Net with `num_downs` (at least 5) halvings of a volume: unet.py's UnetGenerator in 3-D."""

    def __init__(self, input_nc: int, output_nc: int, num_downs: int, ngf: int = 64,
                 norm_layer=nn.BatchNorm3d, use_dropout: bool = False):
        super().__init__()
        # Built from the innermost block outwards.
        unet_block = Unet3dSkipConnectionBlock(ngf * 8, ngf * 8, submodule=None, norm_layer=norm_layer,
                                               innermost=True)
        for _ in range(num_downs - 5):
            unet_block = Unet3dSkipConnectionBlock(ngf * 8, ngf * 8, submodule=unet_block, norm_layer=norm_layer,
                                                   use_dropout=use_dropout)
        unet_block = Unet3dSkipConnectionBlock(ngf * 4, ngf * 8, submodule=unet_block, norm_layer=norm_layer)
        unet_block = Unet3dSkipConnectionBlock(ngf * 2, ngf * 4, submodule=unet_block, norm_layer=norm_layer)
        unet_block = Unet3dSkipConnectionBlock(ngf, ngf * 2, submodule=unet_block, norm_layer=norm_layer)
        self.model = Unet3dSkipConnectionBlock(output_nc, ngf, input_nc=input_nc, submodule=unet_block,
                                               outermost=True, norm_layer=norm_layer)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.model(input)


class Unet3dSkipConnectionBlock(nn.Module):
    """One U-Net level of a volume: down, the inner levels, up, concatenated with the input (skip)."""

    def __init__(self, outer_nc: int, inner_nc: int, input_nc: int | None = None, submodule=None,
                 outermost: bool = False, innermost: bool = False, norm_layer=nn.BatchNorm3d,
                 use_dropout: bool = False):
        super().__init__()
        self.outermost = outermost
        use_bias = uses_bias(norm_layer)
        if input_nc is None:
            input_nc = outer_nc
        downconv = nn.Conv3d(input_nc, inner_nc, kernel_size=4, stride=2, padding=1, bias=use_bias)
        downrelu = nn.LeakyReLU(0.2, True)
        downnorm = norm_layer(inner_nc)
        uprelu = nn.ReLU(True)
        upnorm = norm_layer(outer_nc)
        if outermost:
            upconv = nn.ConvTranspose3d(inner_nc * 2, outer_nc, kernel_size=4, stride=2, padding=1)
            model = [downconv, submodule, uprelu, upconv, nn.Tanh()]
        elif innermost:
            upconv = nn.ConvTranspose3d(inner_nc, outer_nc, kernel_size=4, stride=2, padding=1, bias=use_bias)
            model = [downrelu, downconv, uprelu, upconv, upnorm]
        else:
            upconv = nn.ConvTranspose3d(inner_nc * 2, outer_nc, kernel_size=4, stride=2, padding=1, bias=use_bias)
            model = [downrelu, downconv, downnorm, submodule, uprelu, upconv, upnorm]
            if use_dropout:
                model += [nn.Dropout(0.5)]
        self.model = nn.Sequential(*model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.outermost:
            return self.model(x)
        return torch.cat([x, self.model(x)], 1)


class CheckpointedUnet3dBlock(Unet3dSkipConnectionBlock):
    """A U-Net level below the outermost whose own layers are recomputed in backward, as unet.py's
    CheckpointedUnetBlock: its down part (conv, norm) and its up part (conv, norm, dropout), each
    from its input; the levels inside it run as themselves (checkpointed in turn), so every layer is
    recomputed once. Each part's leading in-place activation runs outside the checkpoint, whose
    saved input must not change before the recomputation."""

    @staticmethod
    def applies_to(block: Unet3dSkipConnectionBlock) -> bool:
        return not block.outermost

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        layers = list(self.model)
        # [downrelu, downconv, (downnorm), (submodule), uprelu, upconv, upnorm, (dropout)]
        up_start = next(i for i, layer in enumerate(layers) if isinstance(layer, nn.ReLU))
        inner = layers[up_start - 1] if isinstance(layers[up_start - 1], Unet3dSkipConnectionBlock) else None
        down = nn.Sequential(*layers[1:up_start - 1 if inner is not None else up_start])
        x = layers[0](x)
        h = recompute_in_backward(self.model, down, x)
        if inner is not None:
            h = inner(h)
        h = layers[up_start](h)
        return torch.cat([x, recompute_in_backward(self.model, nn.Sequential(*layers[up_start + 1:]), h)], 1)


class Unet3dFamily(NetworkFamily):
    """unet_32_3d / unet_64_3d / unet_128_3d: volume sides that are multiples of 32 (64, 128)."""

    role = "generator"
    names = tuple(_DEPTHS)
    shape_flags = ("ngf", "norm", "no_dropout", "upsample")
    checkpointed_blocks = {Unet3dSkipConnectionBlock: CheckpointedUnet3dBlock}
    description = "unet_32_3d, unet_64_3d, unet_128_3d: a U-Net for volumes of 32 (64, 128) voxels a side"
    # pix2pix's U-Nets: 6 halvings fit the default 64-voxel patches
    stands_in_for = dict.fromkeys(UnetFamily.names, "unet_64_3d")

    @property
    def depth(self) -> int:
        return _DEPTHS[self.name]

    def build(self, flags: Any, input_nc: int, output_nc: int = 1) -> nn.Module:
        net = Unet3dGenerator(input_nc, output_nc, self.depth, flags.ngf, norm_layer=get_norm_layer(flags.norm, dims=3),
                              use_dropout=not flags.no_dropout)
        if getattr(flags, "upsample", "transpose") != "transpose":
            use_resize_convolutions(net, flags.upsample)
        return net

    @classmethod
    def from_weights(cls, state: Mapping[str, Any]) -> dict | None:
        """Nested blocks, one "model" per level of depth, with 5-D conv weights (4-D ones are
        unet.py's); a U-Net's dropout has no weights, so the weights cannot say whether it had any."""
        first = state.get("model.model.0.weight")
        if first is None or first.ndim != 5:
            return None
        depth = max(key.split(".").count("model") for key in state) - 1
        name = next((name for name, levels in _DEPTHS.items() if levels == depth), None)
        if name is None or not {"model.model.3.weight", "model.model.3.1.weight"} & set(state):
            return None
        # ConvTranspose3d's weight is (in, out, ...); with --upsample resize a Conv3d's (out, in, ...)
        output_nc = (state["model.model.3.weight"].shape[1] if "model.model.3.weight" in state
                     else state["model.model.3.1.weight"].shape[0])
        return {"netG": name, "norm": norm_seen(state, "model.model.0"), "ngf": first.shape[0],
                "input_nc": first.shape[1], "output_nc": output_nc, **resize_seen(state)}

    def size_rule(self, flags: Any) -> SizeRule:
        multiple = 2 ** self.depth  # halved once per level, down to 1 voxel
        return SizeRule(multiple, multiple, dims=3)

    def check_input_size(self, flags: Any, *sizes: int) -> None:
        rule = self.size_rule(flags)
        check_volume_size(f"--netG {self.name} (halving the volume {self.depth} times)", rule.multiple, rule.minimum,
                          sizes)
