"""The resnet generators (`--netG resnet_9blocks`, `resnet_6blocks`): downsample twice, residual
blocks, upsample twice (Johnson et al.), with CUT's optional blur layers (Zhang, "Making
convolutional networks shift-invariant again").

Layers and parameter names follow the reference (`model.1.weight`, `model.10.conv_block.1.weight`)
and, with blur, taesungp/contrastive-unpaired-translation (`model.7.filt`, ...), so that both
projects' checkpoints load here with `strict=True` and ours load in their test.py. Do not reorder.
"""
from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from models.activation_checkpointing import recompute_in_backward
from models.networks.family import NetworkFamily, SizeRule
from models.networks.layers import get_norm_layer, norm_seen, resize_seen, use_resize_convolutions, uses_bias

_DOWN_TAPS = (1.0, 2.0, 1.0)       # CUT's 3-tap binomial blur before subsampling
_UP_TAPS = (1.0, 3.0, 3.0, 1.0)    # and its 4-tap one for upsampling
_BLOCKS = {"resnet_9blocks": 9, "resnet_6blocks": 6}
# The reference's default generator, named here so that no other file spells it
DEFAULT = "resnet_9blocks"


def _binomial_filter(taps: tuple[float, ...], channels: int, gain: float) -> torch.Tensor:
    """The separable blur `taps` x `taps`, normalised to sum `gain`, one copy per channel (depthwise)."""
    row = torch.tensor(taps, dtype=torch.float32)
    filt = row[:, None] * row[None, :]
    return (filt / filt.sum() * gain)[None, None].repeat(channels, 1, 1, 1)


class Downsample(nn.Module):
    """Blur with a 3x3 binomial filter (reflection-padded), then keep every second pixel: even sizes halve.
    The filter is a persistent buffer because CUT's checkpoints hold it."""

    def __init__(self, channels: int):
        super().__init__()
        self.register_buffer("filt", _binomial_filter(_DOWN_TAPS, channels, 1.0))
        self.pad = nn.ReflectionPad2d(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(self.pad(x), self.filt, stride=2, groups=x.shape[1])


class Upsample(nn.Module):
    """Double the size by a transposed 4x4 binomial blur (replicate-padded): no learned upconvolution,
    so no checkerboard."""

    def __init__(self, channels: int):
        super().__init__()
        self.register_buffer("filt", _binomial_filter(_UP_TAPS, channels, 4.0))  # 4: stride squared
        self.pad = nn.ReplicationPad2d(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Pad by one, spread with stride 2, then trim to exactly twice the input size.
        out = F.conv_transpose2d(self.pad(x), self.filt, stride=2, padding=2, groups=x.shape[1])
        return out[:, :, 1:-1, 1:-1]


class ResnetGenerator(nn.Module):
    """Downsample twice, `n_blocks` residual blocks, upsample twice. With `antialias`, each
    downsampling is conv (stride 1), norm, ReLU, blur-subsample; with `antialias_up` each upsampling
    is blur-upsample, 3x3 conv, norm, ReLU (CUT's layers and keys); without, the reference's."""

    def __init__(self, input_nc: int, output_nc: int, ngf: int = 64, norm_layer=nn.BatchNorm2d,
                 use_dropout: bool = False, n_blocks: int = 6, padding_type: str = "reflect",
                 antialias: bool = False, antialias_up: bool = False):
        assert n_blocks >= 0
        super().__init__()
        use_bias = uses_bias(norm_layer)
        model = [nn.ReflectionPad2d(3), nn.Conv2d(input_nc, ngf, kernel_size=7, padding=0, bias=use_bias),
                 norm_layer(ngf), nn.ReLU(True)]
        for mult in (1, 2):
            width = ngf * mult * 2
            if antialias:
                model += [nn.Conv2d(ngf * mult, width, kernel_size=3, stride=1, padding=1, bias=use_bias),
                          norm_layer(width), nn.ReLU(True), Downsample(width)]
            else:
                model += [nn.Conv2d(ngf * mult, width, kernel_size=3, stride=2, padding=1, bias=use_bias),
                          norm_layer(width), nn.ReLU(True)]
        model += [ResnetBlock(ngf * 4, padding_type=padding_type, norm_layer=norm_layer, use_dropout=use_dropout,
                              use_bias=use_bias) for _ in range(n_blocks)]
        for mult in (4, 2):
            width = int(ngf * mult / 2)
            if antialias_up:
                model += [Upsample(ngf * mult), nn.Conv2d(ngf * mult, width, kernel_size=3, stride=1, padding=1,
                                                          bias=use_bias), norm_layer(width), nn.ReLU(True)]
            else:
                model += [nn.ConvTranspose2d(ngf * mult, width, kernel_size=3, stride=2, padding=1,
                                             output_padding=1, bias=use_bias), norm_layer(width), nn.ReLU(True)]
        model += [nn.ReflectionPad2d(3), nn.Conv2d(ngf, output_nc, kernel_size=7, padding=0), nn.Tanh()]
        self.model = nn.Sequential(*model)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.model(input)


class FeatureReadingResnetGenerator(ResnetGenerator):
    """The generator as CUT trains it: `forward(x, layers, encode_only=True)` returns the outputs of
    the `model` layers numbered in `layers` and stops after the last, which is how PatchNCE reads
    features through a DDP-wrapped generator (DDP hooks `forward` only). Same layers and keys; a
    plain ResnetGenerator otherwise (TorchScript cannot script this forward, so exports use that)."""

    def forward(self, input: torch.Tensor, layers: tuple[int, ...] = (), encode_only: bool = False):
        if not encode_only:
            return self.model(input)
        feats, last = [], max(layers)
        for index, layer in enumerate(self.model):
            input = layer(input)
            if index in layers:
                feats.append(input)
            if index == last:
                break
        return feats


class ResnetBlock(nn.Module):
    """conv-norm-relu-(dropout)-conv-norm with a skip connection."""

    def __init__(self, dim: int, padding_type: str, norm_layer, use_dropout: bool, use_bias: bool):
        super().__init__()
        self.conv_block = self.build_conv_block(dim, padding_type, norm_layer, use_dropout, use_bias)

    @staticmethod
    def _padding(padding_type: str) -> tuple[list[nn.Module], int]:
        if padding_type == "reflect":
            return [nn.ReflectionPad2d(1)], 0
        if padding_type == "replicate":
            return [nn.ReplicationPad2d(1)], 0
        if padding_type == "zero":
            return [], 1
        raise NotImplementedError(f"padding {padding_type} is not implemented")

    def build_conv_block(self, dim, padding_type, norm_layer, use_dropout, use_bias) -> nn.Sequential:
        pad, p = self._padding(padding_type)
        conv_block = pad + [nn.Conv2d(dim, dim, kernel_size=3, padding=p, bias=use_bias), norm_layer(dim), nn.ReLU(True)]
        if use_dropout:
            conv_block += [nn.Dropout(0.5)]
        pad, p = self._padding(padding_type)
        conv_block += pad + [nn.Conv2d(dim, dim, kernel_size=3, padding=p, bias=use_bias), norm_layer(dim)]
        return nn.Sequential(*conv_block)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv_block(x)


class CheckpointedResnetBlock(ResnetBlock):
    """A ResnetBlock whose conv block is recomputed in backward (--checkpoint_activations)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + recompute_in_backward(self.conv_block, self.conv_block, x)


def blur_flags(state: Mapping[str, Any]) -> dict[str, bool]:
    """CUT's --no_antialias / --no_antialias_up as a resnet generator's state_dict shows them: its blur
    layers' `filt` buffers are 3x3 when downsampling, 4x4 when upsampling."""
    sizes = {tuple(value.shape[-2:]) for key, value in state.items() if key.endswith(".filt")}
    return {"no_antialias": (3, 3) not in sizes, "no_antialias_up": (4, 4) not in sizes}


class ResnetFamily(NetworkFamily):
    """resnet_9blocks / resnet_6blocks: any multiple of 4 from 8 pixels up."""

    role = "generator"
    names = tuple(_BLOCKS)
    # --no_antialias/--no_antialias_up are CUT's flags (models/cut_model.py); without them: no blur
    shape_flags = ("ngf", "norm", "no_dropout", "upsample", "no_antialias", "no_antialias_up")
    checkpointed_blocks = {ResnetBlock: CheckpointedResnetBlock}
    description = "resnet_9blocks, resnet_6blocks: residual blocks between two down- and upsamplings"

    @property
    def n_blocks(self) -> int:
        return _BLOCKS[self.name]

    def build(self, flags: Any, input_nc: int, output_nc: int = 1) -> nn.Module:
        net = ResnetGenerator(input_nc, output_nc, flags.ngf, get_norm_layer(flags.norm), not flags.no_dropout,
                              self.n_blocks, antialias=not getattr(flags, "no_antialias", True),
                              antialias_up=not getattr(flags, "no_antialias_up", True))
        if getattr(flags, "upsample", "transpose") != "transpose":
            use_resize_convolutions(net, flags.upsample)
        return net

    def rebuild(self, flags: Any, state: Mapping[str, Any], input_nc: int, output_nc: int) -> nn.Module:
        """With the blur layers the weights hold (a CUT checkpoint's load where any generator does)."""
        return self.build(SimpleNamespace(**{**vars(flags), **blur_flags(state)}), input_nc, output_nc)

    @classmethod
    def from_weights(cls, state: Mapping[str, Any]) -> dict | None:
        """pad, 7x7 conv, norm, relu, 2 downsamplings, blocks, ... (dropout seen in the blocks)."""
        first = state.get("model.1.weight")
        if first is None or first.ndim != 4:
            return None
        blocks = {key.split(".")[1] for key in state if ".conv_block." in key}
        name = f"resnet_{len(blocks)}blocks"
        if name not in _BLOCKS:
            return None
        last = max(int(key.split(".")[1]) for key in state if re.fullmatch(r"model\.\d+\.weight", key))
        # Dropout shifts a block's second conv from index 5 to 6 (index 6 is a norm without it).
        dropout = any(key.endswith(".conv_block.6.weight") and state[key].ndim == 4 for key in state)
        return {"netG": name, "norm": norm_seen(state, "model.1"), "ngf": first.shape[0], "input_nc": first.shape[1],
                "output_nc": state[f"model.{last}.weight"].shape[0], "no_dropout": not dropout, **resize_seen(state)}

    def size_rule(self, flags: Any) -> SizeRule:
        # halved twice; the residual blocks' 1-pixel reflection padding needs 2 pixels at a quarter size
        return SizeRule(4, 8)

    def receptive_radius(self, flags: Any) -> int:
        # Each residual block's two 3x3 convs at quarter resolution reach 8 pixels further; the convs
        # around them add 12. Measured with a gradient probe (tests/test_tiling.py).
        return 12 + 8 * self.n_blocks

    @staticmethod
    def read_features(net: ResnetGenerator) -> ResnetGenerator:
        """`net` (this family's) made able to return its layers' outputs, in place (CUT's PatchNCE)."""
        net.__class__ = FeatureReadingResnetGenerator
        return net

    def feature_layers(self, flags: Any) -> int:
        """How many layers `forward(x, layers, encode_only=True)` can read (CUT's --nce_layers)."""
        probe = SimpleNamespace(ngf=1, norm="none", no_dropout=True, upsample="transpose",
                                no_antialias=getattr(flags, "no_antialias", True),
                                no_antialias_up=getattr(flags, "no_antialias_up", True))
        return len(self.build(probe, 1, 1).model)

