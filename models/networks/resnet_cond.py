"""The generator of UNSB (`--netG resnet_9blocks_cond`; Kim et al., "Unpaired Image-to-Image Translation
via Neural Schrödinger Bridge", ICLR 2024), used by --model sb: CUT's antialiased resnet whose residual
blocks are modulated by a random code z (4 x ngf numbers through a mapping network, as an adaptive
normalisation), so that each call draws a different answer and one network makes every refinement step
of the bridge.

`forward(x, time_index, z)` translates x (N x C x H x W) one step: `time_index` holds N whole step
numbers (0 .. --num_timesteps - 1), z is N x `code_size(ngf)`. `forward(x, time_index, z, layers,
encode_only=True)` returns the outputs of the layers numbered in `layers` (the downsampling layers of
`model`, then the residual blocks from len(model) on) for PatchNCE.

The network computes what UNSB's code computes, which is not everything its modules hold: its blocks
build a time embedding and a first convolution that their forward never applies (TimeConditionedBlock),
so the step's time index reaches nothing in the generator (its discriminators do use it). Its released
checkpoints were trained so, and give its outputs here only this way.

Layers and parameter names follow cyclomon/UNSB's ResnetGenerator_ncsn (`model.1.weight`,
`model_res.0.conv_block.1.weight`, `model_res.0.adaptive.style_net.weight`, `z_transform.1.weight`,
`time_embed.0.weight`, ...), so its checkpoints load with strict=True and ours in its test.py. Do not
reorder.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any, List, Mapping, Optional, Sequence

import torch
from torch import nn

from models.networks.blur import Downsample, Upsample
from models.networks.family import NetworkFamily, SizeRule
from models.networks.layers import get_norm_layer, norm_seen, reflection_pad, uses_bias, wants_sliced_pads
from models.networks.resnet import blur_flags

# The name --model sb defaults to, spelled here alone (its family's)
DEFAULT = "resnet_9blocks_cond"
_BLOCKS = {DEFAULT: 9}
MAPPING_LAYERS = 3  # UNSB's --n_mlp: linear layers of z's mapping network after the first


def code_size(ngf: int) -> int:
    """Numbers in the generator's random code z: 4 x ngf, as UNSB draws it."""
    return 4 * ngf


class PixelNorm(nn.Module):
    """Each code scaled to unit root-mean-square (the mapping network's first layer)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(torch.mean(x ** 2, dim=1, keepdim=True) + 1e-8)


class AdaptiveLayer(nn.Module):
    """gamma * x + beta, gamma and beta per channel from the mapped code (UNSB's AdaptiveLayer)."""

    def __init__(self, channels: int, code_width: int):
        super().__init__()
        self.style_net = nn.Linear(code_width, channels * 2)

    def forward(self, x: torch.Tensor, code: torch.Tensor) -> torch.Tensor:
        gamma, beta = self.style_net(code)[:, :, None, None].chunk(2, 1)
        return gamma * x + beta


class TimeConditionedBlock(nn.Module):
    """UNSB's ResnetBlock_cond as its code computes it: norm(x), the adaptive layer (the code), ReLU,
    (dropout), pad, conv, norm, plus the skip connection.

    Its block holds pad, conv (+ the time embedding per channel) and norm in `conv_block`, but its loop
    applies each of them to the block's input (`out = layer(x)`), so only the last, the norm, reaches the
    output: the conv and the time embedding are built, saved and never used, and UNSB's generator does
    not see the time index. Its checkpoints were trained so; computing what its code computes (without
    the discarded conv) is what makes them give its outputs here. The unused weights get no gradient
    (frozen, so that DDP waits for none)."""

    def __init__(self, dim: int, norm_layer, use_dropout: bool, use_bias: bool, embed_width: int,
                 sliced_pads: bool = False):
        super().__init__()
        self.conv_block = nn.ModuleList([reflection_pad(1, 2, sliced_pads),
                                         nn.Conv2d(dim, dim, kernel_size=3, bias=use_bias), norm_layer(dim)])
        self.adaptive = AdaptiveLayer(dim, embed_width)
        self.conv_fin = nn.ModuleList([nn.ReLU(True), *([nn.Dropout(0.5)] if use_dropout else []),
                                       reflection_pad(1, 2, sliced_pads),
                                       nn.Conv2d(dim, dim, kernel_size=3, bias=use_bias), norm_layer(dim)])
        self.Dense_time = nn.Linear(embed_width, dim)
        self.style = nn.Linear(embed_width, dim * 2)  # unused in UNSB's code too
        for unused in (self.conv_block[1], self.Dense_time, self.style):
            unused.requires_grad_(False)

    def forward(self, x: torch.Tensor, code: torch.Tensor) -> torch.Tensor:
        out = self.adaptive(self.conv_block[2](x), code)  # conv_block's last layer, on the block's input
        for layer in self.conv_fin:
            out = layer(out)
        return x + out


class TimeConditionedResnetGenerator(nn.Module):
    """UNSB's ResnetGenerator_ncsn (see the module docstring)."""

    def __init__(self, input_nc: int, output_nc: int, ngf: int = 64, norm_layer=nn.InstanceNorm2d,
                 use_dropout: bool = False, n_blocks: int = 9, antialias: bool = True, antialias_up: bool = True,
                 *, sliced_pads: bool = False):
        super().__init__()
        self.ngf = ngf
        use_bias = uses_bias(norm_layer)
        model = [reflection_pad(3, 2, sliced_pads), nn.Conv2d(input_nc, ngf, kernel_size=7, bias=use_bias),
                 norm_layer(ngf), nn.ReLU(True)]
        for mult in (1, 2):
            width = ngf * mult * 2
            if antialias:
                model += [nn.Conv2d(ngf * mult, width, kernel_size=3, padding=1, bias=use_bias), norm_layer(width),
                          nn.ReLU(True), Downsample(width, sliced_pads)]
            else:
                model += [nn.Conv2d(ngf * mult, width, kernel_size=3, stride=2, padding=1, bias=use_bias),
                          norm_layer(width), nn.ReLU(True)]
        self.model = nn.Sequential(*model)
        width = code_size(ngf)
        self.model_res = nn.ModuleList([TimeConditionedBlock(ngf * 4, norm_layer, use_dropout, use_bias, width,
                                                             sliced_pads) for _ in range(n_blocks)])
        upsample = []
        for mult in (4, 2):
            half = ngf * mult // 2
            if antialias_up:
                upsample += [Upsample(ngf * mult), nn.Conv2d(ngf * mult, half, kernel_size=3, padding=1, bias=use_bias),
                             norm_layer(half), nn.ReLU(True)]
            else:
                upsample += [nn.ConvTranspose2d(ngf * mult, half, kernel_size=3, stride=2, padding=1, output_padding=1,
                                                bias=use_bias), norm_layer(half), nn.ReLU(True)]
        upsample += [reflection_pad(3, 2, sliced_pads), nn.Conv2d(ngf, output_nc, kernel_size=7), nn.Tanh()]
        self.model_upsample = nn.Sequential(*upsample)
        mapping = [PixelNorm(), nn.Linear(width, width), nn.LeakyReLU(0.2)]
        for _ in range(MAPPING_LAYERS):
            mapping += [nn.Linear(width, width), nn.LeakyReLU(0.2)]
        self.z_transform = nn.Sequential(*mapping)
        # the time index's embedding, for the blocks' unused time inputs: kept for the checkpoints' keys
        self.time_embed = nn.Sequential(nn.Linear(ngf, width), nn.LeakyReLU(0.2), nn.Linear(width, width),
                                        nn.LeakyReLU(0.2)).requires_grad_(False)

    def forward(self, x: torch.Tensor, time_index: torch.Tensor, z: torch.Tensor, layers: Optional[List[int]] = None,
                encode_only: bool = False) -> torch.Tensor:
        code = self.z_transform(z.to(x.dtype))  # `time_index` reaches nothing, as in UNSB (TimeConditionedBlock)
        if not torch.jit.is_scripting():  # a branch of its own: TorchScript (scripts/export.py) compiles one step
            if encode_only:
                return self.features(x, code, layers or ())
        out = self.model(x)
        for block in self.model_res:
            out = block(out, code)
        return self.model_upsample(out)

    def features(self, x: torch.Tensor, code: torch.Tensor, layers: Sequence[int]) -> list[torch.Tensor]:
        """The outputs of the layers numbered in `layers` (`model`'s, then the blocks'), in order."""
        feats, last = [], max(layers)
        for index, layer in enumerate(self.model):
            x = layer(x)
            if index in layers:
                feats.append(x)
            if index == last:
                return feats
        for index, block in enumerate(self.model_res, start=len(self.model)):
            x = block(x, code)
            if index in layers:
                feats.append(x)
            if index == last:
                break
        return feats


class TimeConditionedResnetFamily(NetworkFamily):
    """resnet_9blocks_cond: a multiple of 4 from 8 pixels up; takes a time index and a code."""

    role = "generator"
    names = tuple(_BLOCKS)
    shape_flags = ("ngf", "norm", "no_dropout", "no_antialias", "no_antialias_up")
    description = "resnet_9blocks_cond: UNSB's resnet taking a step's time index and a random code (--model sb)"

    def build(self, flags: Any, input_nc: int, output_nc: int = 1) -> nn.Module:
        return TimeConditionedResnetGenerator(
            input_nc, output_nc, flags.ngf, get_norm_layer(flags.norm), not flags.no_dropout, _BLOCKS[self.name],
            antialias=not getattr(flags, "no_antialias", False),
            antialias_up=not getattr(flags, "no_antialias_up", False), sliced_pads=wants_sliced_pads(flags))

    def rebuild(self, flags: Any, state: Mapping[str, Any], input_nc: int, output_nc: int) -> nn.Module:
        """With the blur layers the weights hold (CUT's, read as for the resnets)."""
        return self.build(SimpleNamespace(**{**vars(flags), **blur_flags(state)}), input_nc, output_nc)

    @classmethod
    def from_weights(cls, state: Mapping[str, Any]) -> dict | None:
        """Weights with a time embedding and `model_res` blocks: UNSB's layout."""
        first = state.get("model.1.weight")
        if first is None or first.ndim != 4 or "time_embed.0.weight" not in state:
            return None
        blocks = len({key.split(".")[1] for key in state if key.startswith("model_res.")})
        name = next((name for name, count in _BLOCKS.items() if count == blocks), None)
        if name is None:
            return None
        convs = [key for key in state if key.startswith("model_upsample.") and key.endswith(".weight")
                 and state[key].ndim == 4]
        last = max(convs, key=lambda key: int(key.split(".")[1]))
        # Dropout shifts the second conv from conv_fin.2 to conv_fin.3 (a batch norm's weight is 1-D)
        dropout = not any(key.endswith(".conv_fin.2.weight") and state[key].ndim == 4 for key in state)
        return {"netG": name, "norm": norm_seen(state, "model.1"), "ngf": first.shape[0], "input_nc": first.shape[1],
                "output_nc": state[last].shape[0], "no_dropout": not dropout}

    def size_rule(self, flags: Any) -> SizeRule:
        return SizeRule(4, 8)  # as the resnets: halved twice, 1-pixel reflection pads at a quarter size

    def time_conditioned(self, flags: Any) -> bool:
        return True

    def step_code_size(self, flags: Any) -> int:
        return code_size(flags.ngf)

    def feature_layers(self, flags: Any) -> int:
        """`model`'s layers and the residual blocks (UNSB's --nce_layers count on both)."""
        antialias = not getattr(flags, "no_antialias", False)
        return (12 if antialias else 10) + _BLOCKS[self.name]
