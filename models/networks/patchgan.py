"""The PatchGAN discriminators: `--netD basic` (70x70), `n_layers` (--n_layers_D layers) and `pixel`
(1x1). Each outputs a grid of real/fake logits, one per overlapping patch. Under CUT (its
--no_antialias off) basic and n_layers are CUT's antialiased discriminator. The same classes build
the volumetric discriminators of patchgan_3d.py (`dims=3`). Layers and keys follow the reference
(and CUT's). Do not reorder."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from models.networks.blur import Downsample
from models.networks.family import NetworkFamily, SizeRule
from models.networks.layers import convolutions, get_norm_layer, uses_bias, wants_sliced_pads
from util.errors import UserError

# The reference's default discriminator, named here so that no other file spells it
DEFAULT = "basic"


class NLayerDiscriminator(nn.Module):
    """PatchGAN: a grid of real/fake logits, each judging an overlapping image patch (`dims` 3: a
    block of voxels, every layer in 3-D, the same keys).

    With `antialias` (CUT's discriminator, 2-D only), each stride-2 convolution runs at stride 1 and
    a blur-downsample (layers.Downsample) follows its activation: CUT's module order and keys
    (`model.2.filt`, ...), so that its checkpoints load both ways. `sliced_pads`: the blur's
    reflection pads built from slices (--deterministic)."""

    def __init__(self, input_nc: int, ndf: int = 64, n_layers: int = 3, norm_layer=nn.BatchNorm2d, *,
                 dims: int = 2, antialias: bool = False, sliced_pads: bool = False):
        super().__init__()
        if dims != 2 and antialias:
            raise ValueError("CUT's antialiased discriminator blurs with 2-D filters only")
        conv, _ = convolutions(dims)
        use_bias = uses_bias(norm_layer)
        kw, padw = 4, 1

        def downsampling(in_channels: int, out_channels: int, **bias) -> list[nn.Module]:
            if antialias:
                return [conv(in_channels, out_channels, kernel_size=kw, stride=1, padding=padw, **bias)]
            return [conv(in_channels, out_channels, kernel_size=kw, stride=2, padding=padw, **bias)]

        def blur(channels: int) -> list[nn.Module]:
            return [Downsample(channels, sliced_pads)] if antialias else []

        sequence = [*downsampling(input_nc, ndf), nn.LeakyReLU(0.2, True), *blur(ndf)]
        nf_mult = 1
        for n in range(1, n_layers):
            nf_mult_prev, nf_mult = nf_mult, min(2 ** n, 8)
            sequence += [*downsampling(ndf * nf_mult_prev, ndf * nf_mult, bias=use_bias), norm_layer(ndf * nf_mult),
                         nn.LeakyReLU(0.2, True), *blur(ndf * nf_mult)]
        nf_mult_prev, nf_mult = nf_mult, min(2 ** n_layers, 8)
        sequence += [conv(ndf * nf_mult_prev, ndf * nf_mult, kernel_size=kw, stride=1, padding=padw, bias=use_bias),
                     norm_layer(ndf * nf_mult), nn.LeakyReLU(0.2, True)]
        sequence += [conv(ndf * nf_mult, 1, kernel_size=kw, stride=1, padding=padw)]
        self.model = nn.Sequential(*sequence)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.model(input)


class PixelDiscriminator(nn.Module):
    """1x1 PatchGAN: a real/fake logit per pixel (per voxel with `dims` 3)."""

    def __init__(self, input_nc: int, ndf: int = 64, norm_layer=nn.BatchNorm2d, *, dims: int = 2):
        super().__init__()
        conv, _ = convolutions(dims)
        use_bias = uses_bias(norm_layer)
        self.net = nn.Sequential(
            conv(input_nc, ndf, kernel_size=1, stride=1, padding=0),
            nn.LeakyReLU(0.2, True),
            conv(ndf, ndf * 2, kernel_size=1, stride=1, padding=0, bias=use_bias),
            norm_layer(ndf * 2),
            nn.LeakyReLU(0.2, True),
            conv(ndf * 2, 1, kernel_size=1, stride=1, padding=0, bias=use_bias))

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.net(input)


def antialiased(flags: Any) -> bool:
    """Whether the run asks for CUT's antialiased discriminator: CUT's --no_antialias off (the flag
    exists under --model cut only; without it, no blur)."""
    return not getattr(flags, "no_antialias", True)


class PatchGANFamily(NetworkFamily):
    """basic: 3 stride-2 layers; n_layers: --n_layers_D of them."""

    role = "discriminator"
    names = ("basic", "n_layers")
    # --no_antialias is CUT's flag (models/cut_model.py): its discriminator blurs before subsampling
    shape_flags = ("ndf", "norm", "n_layers_D", "D_spectral", "no_antialias")
    description = "basic: 70x70 PatchGAN; n_layers: set --n_layers_D"

    def n_layers(self, flags: Any) -> int:
        return 3 if self.name == DEFAULT else flags.n_layers_D

    def build(self, flags: Any, input_nc: int, output_nc: int = 1) -> nn.Module:
        return NLayerDiscriminator(input_nc, flags.ndf, self.n_layers(flags), norm_layer=get_norm_layer(flags.norm),
                                   antialias=antialiased(flags), sliced_pads=wants_sliced_pads(flags))

    def size_rule(self, flags: Any) -> SizeRule:
        return SizeRule(1, 3 * 2 ** self.n_layers(flags))  # after the stride-2 layers: 3 pixels, for two more 4x4 convs

    def check_input_size(self, flags: Any, *sizes: int) -> None:
        n_layers, smallest = self.n_layers(flags), self.size_rule(flags).minimum
        if min(sizes) < smallest:
            raise UserError(f"--netD {self.name} with {n_layers} downsampling layers needs images of at least "
                            f"{smallest}x{smallest} pixels but got {'x'.join(map(str, sizes))}; use a larger "
                            f"--crop_size, fewer --n_layers_D with --netD n_layers, or --netD pixel.")


class PixelFamily(NetworkFamily):
    """pixel: a logit per pixel, any size; no intermediate feature maps to match (--lambda_feat)."""

    role = "discriminator"
    names = ("pixel",)
    shape_flags = ("ndf", "norm", "D_spectral")
    description = "pixel: 1x1 PatchGAN"

    def build(self, flags: Any, input_nc: int, output_nc: int = 1) -> nn.Module:
        return PixelDiscriminator(input_nc, flags.ndf, norm_layer=get_norm_layer(flags.norm))

    def check_flags(self, flags: Any) -> tuple[str, str] | None:
        if getattr(flags, "lambda_feat", 0.0) > 0:
            return ("lambda_feat", f"the feature-matching loss compares the discriminator's intermediate features, "
                                   f"which --netD {self.name} (1x1 convolutions) hardly has; use --netD multiscale, "
                                   f"basic or n_layers, or --lambda_feat 0")
        return None
