"""The volumetric PatchGAN discriminators (`--netD basic_3d`, `n_layers_3d` with --n_layers_D layers,
and `pixel_3d`): patchgan.py's discriminators built with every layer in 3-D (`dims=3`), for the 3-D
generators (resnet_3d.py, unet_3d.py) on medical volumes. Each outputs a 5-D grid of real/fake logits
(N x 1 x d x h x w), one per overlapping block of voxels; basic_3d judges 70x70x70 blocks.

Layers and keys are the 2-D reference's (`model.0.weight`, ...; `net.0.weight` for pixel_3d) with
Conv3d (4x4x4; 1x1x1 for pixel_3d) and 3-D norms. pix2pixHD's feature matching (--lambda_feat) and
CUT's antialiased discriminator read 2-D PatchGANs only, so they are refused here.
"""
from __future__ import annotations

from typing import Any

from torch import nn

from models.networks.family import NetworkFamily, SizeRule
from models.networks.layers import check_volume_size, get_norm_layer
from models.networks.patchgan import NLayerDiscriminator, PatchGANFamily, PixelDiscriminator, PixelFamily

_FIXED_LAYERS = {"basic_3d": 3}  # the others take --n_layers_D


def _refuse_2d_only_flags(name: str, flags: Any) -> tuple[str, str] | None:
    """(flag, why) for the discriminator options that work on 2-D PatchGANs only."""
    if getattr(flags, "lambda_feat", 0.0) > 0:
        return ("lambda_feat", f"the feature-matching loss reads the layers of 2-D PatchGANs (--netD basic, "
                               f"n_layers, multiscale), not those of --netD {name}; pass --lambda_feat 0")
    if getattr(flags, "no_antialias", True) is False:
        return ("no_antialias", f"CUT's antialiased discriminator blurs with 2-D filters, which --netD {name} "
                                f"(volumes) has none of; pass --no_antialias --no_antialias_up")
    return None


class PatchGAN3dFamily(NetworkFamily):
    """basic_3d: 3 stride-2 layers; n_layers_3d: --n_layers_D of them."""

    role = "discriminator"
    names = ("basic_3d", "n_layers_3d")
    shape_flags = ("ndf", "norm", "n_layers_D", "D_spectral")
    description = "basic_3d: 70x70x70 PatchGAN of volumes; n_layers_3d: set --n_layers_D"
    stands_in_for = {name: f"{name}_3d" for name in PatchGANFamily.names}

    def n_layers(self, flags: Any) -> int:
        return _FIXED_LAYERS.get(self.name) or flags.n_layers_D

    def build(self, flags: Any, input_nc: int, output_nc: int = 1) -> nn.Module:
        return NLayerDiscriminator(input_nc, flags.ndf, self.n_layers(flags),
                                   norm_layer=get_norm_layer(flags.norm, dims=3), dims=3)

    def size_rule(self, flags: Any) -> SizeRule:
        # after the stride-2 layers: 3 voxels a side, for two more 4x4x4 convs
        return SizeRule(1, 3 * 2 ** self.n_layers(flags), dims=3)

    def check_input_size(self, flags: Any, *sizes: int) -> None:
        rule = self.size_rule(flags)
        check_volume_size(f"--netD {self.name} (with {self.n_layers(flags)} downsampling layers)", rule.multiple,
                          rule.minimum, sizes)

    def check_flags(self, flags: Any) -> tuple[str, str] | None:
        return _refuse_2d_only_flags(self.name, flags)


class Pixel3dFamily(NetworkFamily):
    """pixel_3d: a logit per voxel, any size."""

    role = "discriminator"
    names = ("pixel_3d",)
    shape_flags = ("ndf", "norm", "D_spectral")
    description = "pixel_3d: 1x1x1 PatchGAN of volumes"
    stands_in_for = {name: f"{name}_3d" for name in PixelFamily.names}

    def build(self, flags: Any, input_nc: int, output_nc: int = 1) -> nn.Module:
        return PixelDiscriminator(input_nc, flags.ndf, norm_layer=get_norm_layer(flags.norm, dims=3), dims=3)

    def size_rule(self, flags: Any) -> SizeRule:
        return SizeRule(1, 1, dims=3)

    def check_input_size(self, flags: Any, *sizes: int) -> None:
        check_volume_size(f"--netD {self.name}", 1, 1, sizes)

    def check_flags(self, flags: Any) -> tuple[str, str] | None:
        return _refuse_2d_only_flags(self.name, flags)
