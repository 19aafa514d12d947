"""pix2pixHD's multi-scale discriminator (`--netD multiscale --num_D N`): N PatchGANs of the same
design (each built from --ndf, --n_layers_D and --norm), the k-th judging the image average-pooled
by 2, k times, so that the coarsest sees the whole layout (for 512 px and above). Its prediction is
a list, one logit grid per scale (the losses: models/losses/multiscale.py). Keys: `scale<k>.model.<i>.<param>`.
Under CUT (its --no_antialias off) each scale is CUT's antialiased PatchGAN.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from models.networks.family import NetworkFamily, SizeRule
from models.networks.layers import get_norm_layer, wants_sliced_pads
from models.networks.patchgan import NLayerDiscriminator, antialiased
from util.errors import UserError


class MultiscaleDiscriminator(nn.Module):
    """`num_D` PatchGANs, scale k judging the input downsampled by 2**k; returns their predictions
    (a list, finest first)."""

    def __init__(self, input_nc: int, ndf: int, n_layers: int, norm_layer, num_D: int, *, antialias: bool = False,
                 sliced_pads: bool = False) -> None:
        super().__init__()
        self.num_D = num_D
        for k in range(num_D):  # each CUT's antialiased PatchGAN with `antialias`
            self.add_module(f"scale{k}", NLayerDiscriminator(input_nc, ndf, n_layers, norm_layer=norm_layer,
                                                             antialias=antialias, sliced_pads=sliced_pads))
        # pix2pixHD's downsampling: padding not counted, so the border is not darkened
        self.downsample = nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False)

    def scales(self) -> list[NLayerDiscriminator]:
        return [getattr(self, f"scale{k}") for k in range(self.num_D)]

    def inputs(self, x: torch.Tensor) -> list[torch.Tensor]:
        """The input of each scale: `x`, then halved again for every further scale."""
        images = [x]
        for _ in range(self.num_D - 1):
            images.append(self.downsample(images[-1]))
        return images

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [scale(image) for scale, image in zip(self.scales(), self.inputs(x))]


def smallest_side(n_layers: int, num_D: int) -> int:
    """The smallest image side the coarsest of `num_D` scales of an `n_layers` PatchGAN can judge:
    3 pixels after its n stride-2 convs (for its two 4x4 stride-1 convs), and each scale halves."""
    return 3 * 2 ** n_layers * 2 ** (num_D - 1)


class MultiscaleFamily(NetworkFamily):
    """multiscale: --num_D n_layers PatchGANs on the image at 1, 1/2, 1/4... of its size."""

    role = "discriminator"
    names = ("multiscale",)
    shape_flags = ("ndf", "norm", "n_layers_D", "num_D", "D_spectral", "no_antialias")
    description = ("multiscale: pix2pixHD's --num_D n_layers PatchGANs on the image at 1, 1/2, 1/4... of its "
                   "size, for 512 px and above")

    def build(self, flags: Any, input_nc: int, output_nc: int = 1) -> nn.Module:
        return MultiscaleDiscriminator(input_nc, flags.ndf, flags.n_layers_D, get_norm_layer(flags.norm), flags.num_D,
                                       antialias=antialiased(flags), sliced_pads=wants_sliced_pads(flags))

    def size_rule(self, flags: Any) -> SizeRule:
        return SizeRule(1, smallest_side(flags.n_layers_D, flags.num_D))

    def check_input_size(self, flags: Any, *sizes: int) -> None:
        num_D, n_layers_D, side = flags.num_D, flags.n_layers_D, min(sizes)
        shown = "x".join(map(str, sizes))
        if side < smallest_side(n_layers_D, 1):  # even the finest scale cannot judge it
            raise UserError(f"--netD {self.name} with {n_layers_D} downsampling layers needs images of at least "
                            f"{smallest_side(n_layers_D, 1)}x{smallest_side(n_layers_D, 1)} pixels but got {shown}; "
                            f"use a larger --crop_size, fewer --n_layers_D with --netD n_layers, or --netD pixel.")
        smallest = smallest_side(n_layers_D, num_D)
        if side >= smallest:
            return
        fits = num_D
        while fits > 1 and side < smallest_side(n_layers_D, fits):
            fits -= 1
        fewer = f"--num_D {fits}" if side >= smallest_side(n_layers_D, fits) else "fewer --n_layers_D"
        raise UserError(f"--num_D {num_D}: --netD {self.name} with {num_D} scales of {n_layers_D}-layer PatchGANs "
                        f"(--n_layers_D) needs images of at least {smallest}x{smallest} pixels (the coarsest scale "
                        f"sees them halved {num_D - 1} times), but got {shown}; use {fewer}, or a larger --crop_size.")

    def check_flags(self, flags: Any) -> tuple[str, str] | None:
        if getattr(flags, "gan_mode", None) == "wgangp":
            return ("gan_mode", f"--gan_mode wgangp's gradient penalty needs one prediction per image, and --netD "
                                f"{self.name} gives one per scale; use --gan_mode lsgan or vanilla with it, or --netD "
                                f"basic with wgangp")
        return None
