"""The volumetric resnet generators (`--netG resnet_9blocks_3d`, `resnet_6blocks_3d`): the resnet
generators of resnet.py with every layer in 3-D, for CycleGAN, pix2pix and CUT on medical volumes
(CT, MRI: N x C x depth x height x width). Volumes are translated as volumes rather than slice by
slice, so that neighbouring slices of a translation agree.

Layers and parameter names are the 2-D reference's, one for one (`model.1.weight`: the 7x7x7 conv,
`model.10.conv_block.1.weight`: the first residual block's first conv, ...), with Conv3d,
ConvTranspose3d, ReflectionPad3d and 3-D norms, so a reader (or a checkpoint tool) who knows the 2-D
layout knows this one; the conv weights are 5-D, which tells the two families' weights apart. CUT's
blur layers have no 3-D version here: under CUT, --no_antialias and --no_antialias_up default to on.
"""
from __future__ import annotations

import argparse
import re
from types import SimpleNamespace
from typing import Any, Mapping

import torch
from torch import nn

from models.activation_checkpointing import recompute_in_backward
from models.networks.family import NetworkFamily, SizeRule
from models.networks.layers import (check_volume_size, get_norm_layer, norm_seen, resize_seen, use_resize_convolutions,
                                    uses_bias)
from models.networks.resnet import FeatureReadingResnetGenerator, ResnetFamily
from util.errors import UserError

_BLOCKS = {"resnet_9blocks_3d": 9, "resnet_6blocks_3d": 6}


class Resnet3dGenerator(nn.Module):
    """Downsample twice, `n_blocks` residual blocks, upsample twice, on volumes: resnet.py's
    ResnetGenerator (without CUT's blur layers) in 3-D, layer for layer."""

    def __init__(self, input_nc: int, output_nc: int, ngf: int = 64, norm_layer=nn.BatchNorm3d,
                 use_dropout: bool = False, n_blocks: int = 6):
        assert n_blocks >= 0
        super().__init__()
        use_bias = uses_bias(norm_layer)
        model = [nn.ReflectionPad3d(3), nn.Conv3d(input_nc, ngf, kernel_size=7, padding=0, bias=use_bias),
                 norm_layer(ngf), nn.ReLU(True)]
        for mult in (1, 2):
            width = ngf * mult * 2
            model += [nn.Conv3d(ngf * mult, width, kernel_size=3, stride=2, padding=1, bias=use_bias),
                      norm_layer(width), nn.ReLU(True)]
        model += [Resnet3dBlock(ngf * 4, norm_layer=norm_layer, use_dropout=use_dropout, use_bias=use_bias)
                  for _ in range(n_blocks)]
        for mult in (4, 2):
            width = ngf * mult // 2
            model += [nn.ConvTranspose3d(ngf * mult, width, kernel_size=3, stride=2, padding=1, output_padding=1,
                                         bias=use_bias), norm_layer(width), nn.ReLU(True)]
        model += [nn.ReflectionPad3d(3), nn.Conv3d(ngf, output_nc, kernel_size=7, padding=0), nn.Tanh()]
        self.model = nn.Sequential(*model)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.model(input)


class FeatureReadingResnet3dGenerator(Resnet3dGenerator):
    """The 3-D generator as CUT trains it: `forward(x, layers, encode_only=True)` returns the outputs
    of the `model` layers numbered in `layers` (5-D feature maps), as resnet.py's
    FeatureReadingResnetGenerator does for images (the same forward)."""

    forward = FeatureReadingResnetGenerator.forward


class Resnet3dBlock(nn.Module):
    """conv-norm-relu-(dropout)-conv-norm with a skip connection, each 3x3x3 conv after a 1-voxel
    reflection pad (the 2-D block's default padding; its others are not offered in 3-D)."""

    def __init__(self, dim: int, norm_layer, use_dropout: bool, use_bias: bool):
        super().__init__()
        conv_block = [nn.ReflectionPad3d(1), nn.Conv3d(dim, dim, kernel_size=3, bias=use_bias), norm_layer(dim),
                      nn.ReLU(True)]
        if use_dropout:
            conv_block += [nn.Dropout(0.5)]
        conv_block += [nn.ReflectionPad3d(1), nn.Conv3d(dim, dim, kernel_size=3, bias=use_bias), norm_layer(dim)]
        self.conv_block = nn.Sequential(*conv_block)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv_block(x)


class CheckpointedResnet3dBlock(Resnet3dBlock):
    """A Resnet3dBlock whose conv block is recomputed in backward (--checkpoint_activations): at
    volume sizes the blocks' activations are most of the memory a step takes."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + recompute_in_backward(self.conv_block, self.conv_block, x)


class Resnet3dFamily(NetworkFamily):
    """resnet_9blocks_3d / resnet_6blocks_3d: volumes whose sides are multiples of 4 from 8 voxels up."""

    role = "generator"
    names = tuple(_BLOCKS)
    shape_flags = ("ngf", "norm", "no_dropout", "upsample")
    checkpointed_blocks = {Resnet3dBlock: CheckpointedResnet3dBlock}
    description = "resnet_9blocks_3d, resnet_6blocks_3d: the resnet generators for volumes (3-D convolutions)"
    stands_in_for = {name: f"{name}_3d" for name in ResnetFamily.names}  # the same blocks, one axis more

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
        net = Resnet3dGenerator(input_nc, output_nc, flags.ngf, get_norm_layer(flags.norm, dims=3),
                                not flags.no_dropout, self.n_blocks)
        if getattr(flags, "upsample", "transpose") != "transpose":
            use_resize_convolutions(net, flags.upsample)
        return net

    def rebuild(self, flags: Any, state: Mapping[str, Any], input_nc: int, output_nc: int) -> nn.Module:
        """The weights have no blur layers whatever CUT's flags say (a 3-D generator never has them)."""
        return self.build(SimpleNamespace(**{**vars(flags), "no_antialias": True, "no_antialias_up": True}),
                          input_nc, output_nc)

    def check_flags(self, flags: Any) -> tuple[str, str] | None:
        # CUT turns its blur layers on by default; in 3-D neither its generator's nor (cut_networks.py)
        # its discriminator's exist, so a run that asks for them is refused rather than run without.
        for flag in ("no_antialias", "no_antialias_up"):
            if getattr(flags, flag, True) is False:
                return (flag, f"--netG {self.name} has no antialiased (blur) down- or upsampling: CUT's blur "
                              f"layers are 2-D; pass --no_antialias --no_antialias_up for volumes")
        return None

    @classmethod
    def from_weights(cls, state: Mapping[str, Any]) -> dict | None:
        """pad, 7x7x7 conv, norm, relu, 2 downsamplings, blocks, ... (dropout seen in the blocks); 5-D
        conv weights (4-D ones are resnet.py's)."""
        first = state.get("model.1.weight")
        if first is None or first.ndim != 5:
            return None
        blocks = {key.split(".")[1] for key in state if ".conv_block." in key}
        name = next((name for name, count in _BLOCKS.items() if count == len(blocks)), None)
        if name is None:
            return None
        last = max(int(key.split(".")[1]) for key in state if re.fullmatch(r"model\.\d+\.weight", key))
        # Dropout shifts a block's second conv from index 5 to 6 (index 6 is a norm without it).
        dropout = any(key.endswith(".conv_block.6.weight") and state[key].ndim == 5 for key in state)
        return {"netG": name, "norm": norm_seen(state, "model.1"), "ngf": first.shape[0], "input_nc": first.shape[1],
                "output_nc": state[f"model.{last}.weight"].shape[0], "no_dropout": not dropout, **resize_seen(state)}

    def size_rule(self, flags: Any) -> SizeRule:
        # halved twice; the residual blocks' 1-voxel reflection padding needs 2 voxels at a quarter size
        return SizeRule(4, 8, dims=3)

    def check_input_size(self, flags: Any, *sizes: int) -> None:
        rule = self.size_rule(flags)
        check_volume_size(f"--netG {self.name}", rule.multiple, rule.minimum, sizes)

    def receptive_radius(self, flags: Any) -> int:
        # The 2-D generator's along each axis: the same convs, one more dimension.
        return 12 + 8 * self.n_blocks

    @staticmethod
    def read_features(net: Resnet3dGenerator) -> Resnet3dGenerator:
        """`net` (this family's) made able to return its layers' outputs, in place (CUT's PatchNCE)."""
        net.__class__ = FeatureReadingResnet3dGenerator
        return net

    def feature_layers(self, flags: Any) -> int:
        """How many layers `forward(x, layers, encode_only=True)` can read (CUT's --nce_layers)."""
        probe = SimpleNamespace(ngf=1, norm="none", no_dropout=True, upsample="transpose")
        return len(self.build(probe, 1, 1).model)

