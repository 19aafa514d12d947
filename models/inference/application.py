"""How a trained generator is applied, the one way test.py, validation, the Translator
(models/inference/translator.py), scripts/translate.py and the demos apply it: `inference_views`.

A generator takes inputs of the sizes its family's size rule allows. `InferenceGenerator` applies it
to any size and returns the input's size: a picture is padded by reflection (split evenly between
the two sides) up to the next size the generator takes, translated whole or, with tiles, in blended
windows (models/inference/windows.py), and the padding is cut off the result; nothing is resized, so the
aspect ratio and every pixel position are kept (reflection avoids the dark borders zero padding
would give). A volume is translated in blended windows of the patch size it trained on.

`PadToMultiple` is the padding step in the form TorchScript and torch.export can trace, for
scripts/export.py (an exported volume generator takes one window; the windows are the caller's).
"""
from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from models.inference.exact import ExactBudget, translate_exactly
from models.inference.windows import Windows, in_windows, monai_sliding_window_inference
from models.network_views import NetworkViews
from models.networks import SizeRule, family_of


def inference_views(nets: Mapping[str, nn.Module], generators: Collection[str], flags: Any,
                    windows: Windows | None = None, exact: ExactBudget | None = None) -> NetworkViews:
    """The networks `nets` (name -> module) as inference calls them: those named in `generators` as
    `InferenceGenerator`s of the --netG family `flags` names (with its options), the others (an
    encoder, a discriminator) as they are. `windows`: the tiles of large pictures, or the windows of
    volumes (which need them); `exact`: the memory of exact translation (None: pictures go whole)."""
    rule = family_of(flags.netG).size_rule(flags)
    return NetworkViews({name: InferenceGenerator(net, rule, windows, exact) if name in generators else net
                         for name, net in nets.items()})


class InferenceGenerator(nn.Module):
    """`net` applied to inputs of any size (see the module docstring): `forward(x, *codes)` (`codes`:
    what else the generator takes, e.g. a latent code per image) returns an output of `x`'s spatial
    size. `rule` is the generator's size rule; `windows` the tiles of pictures (None: whole) or the
    windows of volumes; `exact` the memory within which a picture without tiles is translated exactly
    (models/inference/exact/: whole where it fits; None: always whole)."""

    def __init__(self, net: nn.Module, rule: SizeRule, windows: Windows | None = None,
                 exact: ExactBudget | None = None) -> None:
        super().__init__()
        self.net = net
        self.rule = rule
        self.windows = windows
        self.exact = exact
        self.training = net.training  # the wrapper itself has no layers: it is in its network's mode
        if windows is not None:
            monai_sliding_window_inference()  # a missing MONAI is told now, before anything is translated

    def forward(self, x: torch.Tensor, *codes: torch.Tensor) -> torch.Tensor:
        if x.ndim == 5:  # a volume: in the windows it was trained for, or whole (exactly within `exact`)
            if self.windows is not None:
                return in_windows(self.net, x, self.windows, *codes)
            sides = [split_padding(side, self.rule.multiple) for side in x.shape[2:]]
            padded = F.pad(x, [width for pair in reversed(sides) for width in pair], mode="replicate")
            y = translate_exactly(self.net, padded, *codes, budget=self.exact) if self.exact else \
                self.net(padded, *codes)
            return y[(..., *(slice(before, before + side) for (before, _), side in zip(sides, x.shape[2:])))]
        height, width = x.shape[-2:]
        top, bottom = split_padding(height, self.rule.multiple, self.rule.minimum)
        left, right = split_padding(width, self.rule.multiple, self.rule.minimum)
        padded = reflect_pad(x, top, bottom, left, right)
        if self.windows is not None and not self.windows.covers(padded.shape[-2:]):
            y = in_windows(self.net, padded, self.windows, *codes)
        elif self.exact is not None:
            y = translate_exactly(self.net, padded, *codes, budget=self.exact)
        else:
            y = self.net(padded, *codes)
        return y[..., top:top + height, left:left + width]


def split_padding(size: int, multiple: int, minimum: int = 0) -> tuple[int, int]:
    """(before, after) padding that brings `size` up to the next multiple of `multiple` that is at
    least `minimum`, split evenly (the extra pixel after)."""
    target = max(-(-size // multiple) * multiple, -(-minimum // multiple) * multiple)
    extra = target - size
    return extra // 2, extra - extra // 2


def reflect_pad(x: torch.Tensor, top: int, bottom: int, left: int, right: int) -> torch.Tensor:
    """Reflection padding of any amount: PyTorch reflects at most size-1 pixels at once, so a
    small image (e.g. 100 px for a U-Net that needs 256) is reflected repeatedly."""
    while top or bottom or left or right:
        h, w = x.shape[-2:]
        step = [min(left, w - 1), min(right, w - 1), min(top, h - 1), min(bottom, h - 1)]
        if max(step) <= 0:  # a 1-pixel side cannot be reflected: repeat it instead
            return F.pad(x, [left, right, top, bottom], mode="replicate")
        x = F.pad(x, step, mode="reflect")
        left, right, top, bottom = left - step[0], right - step[1], top - step[2], bottom - step[3]
    return x


class PadToMultiple(nn.Module):
    """InferenceGenerator's padding in a form TorchScript and torch.export can trace with symbolic
    height and width (one reflection step, no loop): pads to the next multiple of `multiple` split
    evenly, runs `net`, crops back. Reflection needs the padding to be smaller than the image, so
    inputs must be at least `multiple // 2 + 1` pixels (U-Net 256: 129) and, for resnets, 8
    (`export_min_size`)."""

    def __init__(self, net: nn.Module, multiple: int):
        super().__init__()
        self.net = net
        self.multiple = multiple

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        padded, top, left = self.pad(x)
        return self.net(padded)[:, :, top:top + x.shape[2], left:left + x.shape[3]]

    def pad(self, x: torch.Tensor) -> tuple[torch.Tensor, int, int]:
        """`x` padded by reflection to the next multiple, split evenly; and the top and left padding."""
        height = x.shape[2]
        width = x.shape[3]
        pad_h = (self.multiple - height % self.multiple) % self.multiple
        pad_w = (self.multiple - width % self.multiple) % self.multiple
        top = pad_h // 2
        left = pad_w // 2
        return F.pad(x, [left, pad_w - left, top, pad_h - top], mode="reflect"), top, left


class LatentPadToMultiple(PadToMultiple):
    """PadToMultiple for a generator that takes a latent code beside the image: forward(x, z), z one
    code (N x latent size) per image."""

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        padded, top, left = self.pad(x)
        return self.net(padded, z)[:, :, top:top + x.shape[2], left:left + x.shape[3]]


class StepPadToMultiple(PadToMultiple):
    """PadToMultiple for one step of a Schrödinger bridge's generator (--model sb): forward(x, step, z), step
    the N step numbers (int64) and z N x code size, its noise code. The walk between steps is the caller's
    (models/losses/bridge.py, docs/export.md)."""

    def forward(self, x: torch.Tensor, step: torch.Tensor, z: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        padded, top, left = self.pad(x)
        return self.net(padded, step, z)[:, :, top:top + x.shape[2], left:left + x.shape[3]]


def export_min_size(netG: str, flags: Any = None) -> int:
    """Smallest height/width a PadToMultiple-wrapped generator of family `netG` accepts."""
    rule = family_of(netG).size_rule(flags)
    # Resnets: padding to a multiple of 4 leaves anything below 8 too small. U-Nets: any size pads
    # up to at least one multiple; reflection limits the padding to less than the image.
    return rule.minimum if rule.minimum > rule.multiple else rule.multiple // 2 + 1


def seeded_call(net: nn.Module, x: torch.Tensor, *codes: torch.Tensor, device: torch.device, seed: int) -> torch.Tensor:
    """net(x, *codes) with its random draws (dropout masks in training mode) from `seed` on `device`, so that the
    same image always gives the same output; the global random state is restored after."""
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        if device.type == "cuda":
            with torch.cuda.device(device):
                torch.cuda.manual_seed(seed)
        else:
            torch.default_generator.manual_seed(seed)
        return net(x, *codes)
