"""The resnet generators (`--netG resnet_9blocks`, `resnet_6blocks`): downsample twice, residual
blocks, upsample twice (Johnson et al.), with CUT's optional blur layers (Zhang, "Making
convolutional networks shift-invariant again"). The same classes build the volumetric generators
of resnet_3d.py (`dims=3`).

Layers and parameter names follow the reference (`model.1.weight`, `model.10.conv_block.1.weight`)
and, with blur, taesungp/contrastive-unpaired-translation (`model.7.filt`, ...), so that both
projects' checkpoints load here with `strict=True` and ours load in their test.py. Do not reorder.
"""
from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any, List, Mapping, Optional, Sequence

import torch
from torch import nn

from models.networks.blur import Downsample, Upsample
from models.networks.family import NetworkFamily, SizeRule
from models.networks.layers import (
    convolutions,
    get_norm_layer,
    norm_seen,
    recompute_in_backward,
    reflection_pad,
    replication_pad,
    resize_seen,
    use_resize_convolutions,
    uses_bias,
    wants_checkpointing,
    wants_sliced_pads,
)

_BLOCKS = {"resnet_9blocks": 9, "resnet_6blocks": 6}
# The reference's default generator, named here so that no other file spells it
DEFAULT = "resnet_9blocks"


class ResnetGenerator(nn.Module):
    """Downsample twice, `n_blocks` residual blocks, upsample twice, on images (`dims` 2) or volumes
    (`dims` 3: every layer in 3-D, the same keys). With `antialias`, each downsampling is conv
    (stride 1), norm, ReLU, blur-subsample; with `antialias_up` each upsampling is blur-upsample, 3x3
    conv, norm, ReLU (CUT's layers and keys, 2-D only); without, the reference's. `sliced_pads`:
    reflection pads built from slices (--deterministic); `recompute`: the residual blocks recompute
    their activations in backward (--checkpoint_activations).

    `forward(x)` translates; `forward(x, layers, encode_only=True)` returns the outputs of the
    `model` layers numbered in `layers` and stops after the last: how CUT's PatchNCE reads features
    through a DDP-wrapped generator (DDP hooks `forward` only). TorchScript scripts the first.
    """

    def __init__(self, input_nc: int, output_nc: int, ngf: int = 64, norm_layer=nn.BatchNorm2d,
                 use_dropout: bool = False, n_blocks: int = 6, padding_type: str = "reflect",
                 antialias: bool = False, antialias_up: bool = False, *, dims: int = 2, sliced_pads: bool = False,
                 recompute: bool = False):
        assert n_blocks >= 0
        if dims != 2 and (antialias or antialias_up):
            raise ValueError("CUT's blur layers (antialias, antialias_up) are 2-D only")
        super().__init__()
        conv, conv_transpose = convolutions(dims)
        use_bias = uses_bias(norm_layer)
        model = [reflection_pad(3, dims, sliced_pads), conv(input_nc, ngf, kernel_size=7, padding=0, bias=use_bias),
                 norm_layer(ngf), nn.ReLU(True)]
        for mult in (1, 2):
            width = ngf * mult * 2
            if antialias:
                model += [conv(ngf * mult, width, kernel_size=3, stride=1, padding=1, bias=use_bias),
                          norm_layer(width), nn.ReLU(True), Downsample(width, sliced_pads)]
            else:
                model += [conv(ngf * mult, width, kernel_size=3, stride=2, padding=1, bias=use_bias),
                          norm_layer(width), nn.ReLU(True)]
        model += [ResnetBlock(ngf * 4, padding_type=padding_type, norm_layer=norm_layer, use_dropout=use_dropout,
                              use_bias=use_bias, dims=dims, sliced_pads=sliced_pads, recompute=recompute)
                  for _ in range(n_blocks)]
        for mult in (4, 2):
            width = int(ngf * mult / 2)
            if antialias_up:
                model += [Upsample(ngf * mult), conv(ngf * mult, width, kernel_size=3, stride=1, padding=1,
                                                     bias=use_bias), norm_layer(width), nn.ReLU(True)]
            else:
                model += [conv_transpose(ngf * mult, width, kernel_size=3, stride=2, padding=1, output_padding=1,
                                         bias=use_bias), norm_layer(width), nn.ReLU(True)]
        model += [reflection_pad(3, dims, sliced_pads), conv(ngf, output_nc, kernel_size=7, padding=0), nn.Tanh()]
        self.model = nn.Sequential(*model)

    def forward(self, input: torch.Tensor, layers: Optional[List[int]] = None,
                encode_only: bool = False) -> torch.Tensor:
        if not torch.jit.is_scripting():  # a branch of its own: TorchScript compiles only the translation
            if encode_only:
                return self.features(input, layers or ())
        return self.model(input)

    def features(self, input: torch.Tensor, layers: Sequence[int]) -> list[torch.Tensor]:
        """The outputs of the `model` layers numbered in `layers`, in order."""
        feats, last = [], max(layers)
        for index, layer in enumerate(self.model):
            input = layer(input)
            if index in layers:
                feats.append(input)
            if index == last:
                break
        return feats


class ResnetBlock(nn.Module):
    """conv-norm-relu-(dropout)-conv-norm with a skip connection (3x3 convs; 3x3x3 with `dims` 3).
    With `recompute`, the conv block keeps only its input and recomputes its activations in backward
    (--checkpoint_activations: same output and gradients, less memory)."""

    def __init__(self, dim: int, padding_type: str, norm_layer, use_dropout: bool, use_bias: bool, *,
                 dims: int = 2, sliced_pads: bool = False, recompute: bool = False):
        super().__init__()
        self.dims, self.sliced_pads, self.recompute = dims, sliced_pads, recompute
        self.conv_block = self.build_conv_block(dim, padding_type, norm_layer, use_dropout, use_bias)

    def _padding(self, padding_type: str) -> tuple[list[nn.Module], int]:
        if padding_type == "reflect":
            return [reflection_pad(1, self.dims, self.sliced_pads)], 0
        if padding_type == "replicate":
            return [replication_pad(1, self.dims)], 0
        if padding_type == "zero":
            return [], 1
        raise NotImplementedError(f"padding {padding_type} is not implemented")

    def build_conv_block(self, dim, padding_type, norm_layer, use_dropout, use_bias) -> nn.Sequential:
        conv, _ = convolutions(self.dims)
        pad, p = self._padding(padding_type)
        conv_block = pad + [conv(dim, dim, kernel_size=3, padding=p, bias=use_bias), norm_layer(dim), nn.ReLU(True)]
        if use_dropout:
            conv_block += [nn.Dropout(0.5)]
        pad, p = self._padding(padding_type)
        conv_block += pad + [conv(dim, dim, kernel_size=3, padding=p, bias=use_bias), norm_layer(dim)]
        return nn.Sequential(*conv_block)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.jit.is_scripting():  # checkpointing is for training; scripted networks translate
            if self.recompute:
                return x + recompute_in_backward(self.conv_block, self.conv_block, x)
        return x + self.conv_block(x)


def blur_flags(state: Mapping[str, Any]) -> dict[str, bool]:
    """CUT's --no_antialias / --no_antialias_up as a resnet generator's state_dict shows them: its blur
    layers' `filt` buffers are 3x3 when downsampling, 4x4 when upsampling."""
    sizes = {tuple(value.shape[-2:]) for key, value in state.items() if key.endswith(".filt")}
    return {"no_antialias": (3, 3) not in sizes, "no_antialias_up": (4, 4) not in sizes}


def resnet_seen(state: Mapping[str, Any], ndim: int, names: Mapping[str, int]) -> dict | None:
    """The options the weights of a resnet generator with `ndim`-D conv weights show (4: images, 5:
    volumes) when their block count is one of `names` (name -> blocks); None for other weights.
    pad, 7x7 conv, norm, relu, 2 downsamplings, blocks, ... (dropout seen in the blocks)."""
    first = state.get("model.1.weight")
    if first is None or first.ndim != ndim:
        return None
    blocks = {key.split(".")[1] for key in state if key.startswith("model.") and ".conv_block." in key}
    name = next((name for name, count in names.items() if count == len(blocks)), None)
    if name is None:
        return None
    last = max(int(key.split(".")[1]) for key in state if re.fullmatch(r"model\.\d+\.weight", key))
    # Dropout shifts a block's second conv from index 5 to 6 (index 6 is a norm without it).
    dropout = any(key.endswith(".conv_block.6.weight") and state[key].ndim == ndim for key in state)
    return {"netG": name, "norm": norm_seen(state, "model.1"), "ngf": first.shape[0], "input_nc": first.shape[1],
            "output_nc": state[f"model.{last}.weight"].shape[0], "no_dropout": not dropout, **resize_seen(state)}


class ResnetFamily(NetworkFamily):
    """resnet_9blocks / resnet_6blocks: any multiple of 4 from 8 pixels up."""

    role = "generator"
    names = tuple(_BLOCKS)
    # --no_antialias/--no_antialias_up are CUT's flags (models/cut_model.py); without them: no blur
    shape_flags = ("ngf", "norm", "no_dropout", "upsample", "no_antialias", "no_antialias_up")
    description = "resnet_9blocks, resnet_6blocks: residual blocks between two down- and upsamplings"
    dims = 2

    @property
    def n_blocks(self) -> int:
        return _BLOCKS[self.name]

    def build(self, flags: Any, input_nc: int, output_nc: int = 1) -> nn.Module:
        net = ResnetGenerator(input_nc, output_nc, flags.ngf, get_norm_layer(flags.norm, self.dims),
                              not flags.no_dropout, self.n_blocks, antialias=not getattr(flags, "no_antialias", True),
                              antialias_up=not getattr(flags, "no_antialias_up", True), dims=self.dims,
                              sliced_pads=wants_sliced_pads(flags), recompute=wants_checkpointing(flags))
        if getattr(flags, "upsample", "transpose") != "transpose":
            use_resize_convolutions(net, flags.upsample)
        return net

    def rebuild(self, flags: Any, state: Mapping[str, Any], input_nc: int, output_nc: int) -> nn.Module:
        """With the blur layers the weights hold (a CUT checkpoint's load where any generator does)."""
        return self.build(SimpleNamespace(**{**vars(flags), **blur_flags(state)}), input_nc, output_nc)

    @classmethod
    def from_weights(cls, state: Mapping[str, Any]) -> dict | None:
        """4-D conv weights in the resnet layout (5-D ones are resnet_3d.py's)."""
        return resnet_seen(state, 4, _BLOCKS)

    def size_rule(self, flags: Any) -> SizeRule:
        # halved twice; the residual blocks' 1-pixel reflection padding needs 2 pixels at a quarter size
        return SizeRule(4, 8)

    def receptive_radius(self, flags: Any) -> int:
        # Each residual block's two 3x3 convs at quarter resolution reach 8 pixels further; the convs
        # around them add 12. Measured with a gradient probe (tests/test_tiling.py).
        return 12 + 8 * self.n_blocks

    def recomputes_activations(self, flags: Any) -> bool:
        return True  # the residual blocks

    def feature_layers(self, flags: Any) -> int:
        """The length of the generator's `model` with the run's blur layers (CUT's --nce_layers)."""
        probe = SimpleNamespace(ngf=1, norm="none", no_dropout=True, upsample="transpose",
                                no_antialias=getattr(flags, "no_antialias", True),
                                no_antialias_up=getattr(flags, "no_antialias_up", True))
        return len(self.build(probe, 1, 1).model)
