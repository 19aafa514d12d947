"""The volumetric resnet generators (`--netG resnet_9blocks_3d`, `resnet_6blocks_3d`): resnet.py's
generators built with every layer in 3-D (`ResnetGenerator(..., dims=3)`), for CycleGAN, pix2pix
and CUT on medical volumes (CT, MRI: N x C x depth x height x width). Volumes are translated as
volumes rather than slice by slice, so that neighbouring slices of a translation agree.

Layers and parameter names are the 2-D reference's, one for one (`model.1.weight`: the 7x7x7 conv,
`model.10.conv_block.1.weight`: the first residual block's first conv, ...), with Conv3d,
ConvTranspose3d, reflection pads and norms in 3-D, so a reader (or a checkpoint tool) who knows the
2-D layout knows this one; the conv weights are 5-D, which tells the two families' weights apart.
CUT's blur layers have no 3-D version: under CUT, --no_antialias and --no_antialias_up default to on.
"""
from __future__ import annotations

import argparse
from types import SimpleNamespace
from typing import Any, Mapping

from torch import nn

from models.networks.family import SizeRule
from models.networks.layers import check_volume_size
from models.networks.resnet import ResnetFamily, resnet_seen
from util.errors import UserError

_BLOCKS = {"resnet_9blocks_3d": 9, "resnet_6blocks_3d": 6}


class Resnet3dFamily(ResnetFamily):
    """resnet_9blocks_3d / resnet_6blocks_3d: volumes whose sides are multiples of 4 from 8 voxels up."""

    names = tuple(_BLOCKS)
    shape_flags = ("ngf", "norm", "no_dropout", "upsample")
    description = "resnet_9blocks_3d, resnet_6blocks_3d: the resnet generators for volumes (3-D convolutions)"
    stands_in_for = {name: f"{name}_3d" for name in ResnetFamily.names}  # the same blocks, one axis more
    dims = 3

    @staticmethod
    def add_flags(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        """Under CUT, whose blur layers are 2-D only, they default to off (see `check_flags`)."""
        present = {action.dest for action in parser._actions}
        parser.set_defaults(**{flag: True for flag in ("no_antialias", "no_antialias_up") if flag in present})
        return parser

    @property
    def n_blocks(self) -> int:
        return _BLOCKS[self.name]

    def build(self, flags: Any, input_nc: int, output_nc: int = 1) -> nn.Module:
        refusal = self.check_flags(flags)
        if refusal:
            raise UserError(f"--{refusal[0]}: {refusal[1]}.")
        return super().build(flags, input_nc, output_nc)

    def rebuild(self, flags: Any, state: Mapping[str, Any], input_nc: int, output_nc: int) -> nn.Module:
        """The weights have no blur layers whatever CUT's flags say (a 3-D generator never has them)."""
        return self.build(SimpleNamespace(**{**vars(flags), "no_antialias": True, "no_antialias_up": True}),
                          input_nc, output_nc)

    def check_flags(self, flags: Any) -> tuple[str, str] | None:
        # CUT turns its blur layers on by default; in 3-D neither its generator's nor (patchgan_3d.py)
        # its discriminator's exist, so a run that asks for them is refused rather than run without.
        for flag in ("no_antialias", "no_antialias_up"):
            if getattr(flags, flag, True) is False:
                return (flag, f"--netG {self.name} has no antialiased (blur) down- or upsampling: CUT's blur "
                              f"layers are 2-D; pass --no_antialias --no_antialias_up for volumes")
        return None

    @classmethod
    def from_weights(cls, state: Mapping[str, Any]) -> dict | None:
        """5-D conv weights in the resnet layout (4-D ones are resnet.py's)."""
        return resnet_seen(state, 5, _BLOCKS)

    def size_rule(self, flags: Any) -> SizeRule:
        # halved twice; the residual blocks' 1-voxel reflection padding needs 2 voxels at a quarter size
        return SizeRule(4, 8, dims=3)

    def check_input_size(self, flags: Any, *sizes: int) -> None:
        rule = self.size_rule(flags)
        check_volume_size(f"--netG {self.name}", rule.multiple, rule.minimum, sizes)

    def feature_layers(self, flags: Any) -> int:
        """The length of the generator's `model` (CUT's --nce_layers); never with blur layers."""
        return super().feature_layers(SimpleNamespace(no_antialias=True, no_antialias_up=True))
