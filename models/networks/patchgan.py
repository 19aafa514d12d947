"""The PatchGAN discriminators: `--netD basic` (70x70), `n_layers` (--n_layers_D layers) and `pixel`
(1x1). Each outputs a grid of real/fake logits, one per overlapping patch. Layers and keys follow
the reference. Do not reorder."""
from __future__ import annotations

from typing import Any

from torch import nn

from models.networks.family import NetworkFamily, SizeRule
from models.networks.layers import get_norm_layer, uses_bias
from util.errors import UserError

# The reference's default discriminator, named here so that no other file spells it
DEFAULT = "basic"


class NLayerDiscriminator(nn.Module):
    """PatchGAN: a grid of real/fake logits, each judging an overlapping image patch."""

    def __init__(self, input_nc: int, ndf: int = 64, n_layers: int = 3, norm_layer=nn.BatchNorm2d):
        super().__init__()
        use_bias = uses_bias(norm_layer)
        kw, padw = 4, 1
        sequence = [nn.Conv2d(input_nc, ndf, kernel_size=kw, stride=2, padding=padw), nn.LeakyReLU(0.2, True)]
        nf_mult = 1
        for n in range(1, n_layers):
            nf_mult_prev, nf_mult = nf_mult, min(2 ** n, 8)
            sequence += [nn.Conv2d(ndf * nf_mult_prev, ndf * nf_mult, kernel_size=kw, stride=2, padding=padw, bias=use_bias),
                         norm_layer(ndf * nf_mult), nn.LeakyReLU(0.2, True)]
        nf_mult_prev, nf_mult = nf_mult, min(2 ** n_layers, 8)
        sequence += [nn.Conv2d(ndf * nf_mult_prev, ndf * nf_mult, kernel_size=kw, stride=1, padding=padw, bias=use_bias),
                     norm_layer(ndf * nf_mult), nn.LeakyReLU(0.2, True)]
        sequence += [nn.Conv2d(ndf * nf_mult, 1, kernel_size=kw, stride=1, padding=padw)]
        self.model = nn.Sequential(*sequence)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.model(input)


class PixelDiscriminator(nn.Module):
    """1x1 PatchGAN: a real/fake logit per pixel."""

    def __init__(self, input_nc: int, ndf: int = 64, norm_layer=nn.BatchNorm2d):
        super().__init__()
        use_bias = uses_bias(norm_layer)
        self.net = nn.Sequential(
            nn.Conv2d(input_nc, ndf, kernel_size=1, stride=1, padding=0),
            nn.LeakyReLU(0.2, True),
            nn.Conv2d(ndf, ndf * 2, kernel_size=1, stride=1, padding=0, bias=use_bias),
            norm_layer(ndf * 2),
            nn.LeakyReLU(0.2, True),
            nn.Conv2d(ndf * 2, 1, kernel_size=1, stride=1, padding=0, bias=use_bias))

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.net(input)



class PatchGANFamily(NetworkFamily):
    """basic: 3 stride-2 layers; n_layers: --n_layers_D of them."""

    role = "discriminator"
    names = ("basic", "n_layers")
    shape_flags = ("ndf", "norm", "n_layers_D", "D_spectral")
    description = "basic: 70x70 PatchGAN; n_layers: set --n_layers_D"

    def n_layers(self, flags: Any) -> int:
        return 3 if self.name == DEFAULT else flags.n_layers_D

    def build(self, flags: Any, input_nc: int, output_nc: int = 1) -> nn.Module:
        return NLayerDiscriminator(input_nc, flags.ndf, self.n_layers(flags), norm_layer=get_norm_layer(flags.norm))

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
