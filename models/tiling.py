"""Translate images of any size at test time: pad to the generator's size multiple, optionally
in overlapping tiles that are blended without seams, and crop back to the original size.

Contract of `SizeAdapter(net, multiple, tile, overlap)(x)`: the output has the height and width
of `x` (any size, not only multiples of `multiple`); nothing is resized, so the aspect ratio and
every pixel position are kept.

- Padding: the image is extended by reflection (split evenly between the two sides) up to the
  next multiple of `multiple` (the generator family's `size_rule`), translated, and the padding is cut
  off the result. Reflection avoids the dark borders that zero padding would give.
- Tiles (`tile` > 0): the padded image is cut into tiles of at most `tile` x `tile` pixels whose
  neighbours overlap by at least `overlap` pixels; tile positions are multiples of 4, the
  downsampling factor of the resnet generators, so every tile sees the same pixel grid as the whole
  image. Along an edge shared with a neighbour, each tile's output is weighted by a window that is
  0 on the outer quarter of the overlap (those pixels saw the tile's artificial border), then rises
  linearly to 1 across the middle half of the overlap. The blended image is the weighted sum
  divided by the sum of weights.

Accuracy (see docs/evaluation.md, "Large and non-square images"): for generators whose output depends only on a
bounded neighbourhood - batch norm in eval mode, or no norm - tiled output equals whole-image
output up to float rounding (about 1e-5) when `overlap // 4 >= receptive_radius(netG)`; with less
overlap the difference is what the far edge of the receptive field contributes. Instance norm
normalises each tile with its own statistics, so tiled and whole-image outputs differ in tone
(as two crops of the same photo would), but the cross-fade leaves no visible seams.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from models.networks import family_of
from util.errors import UserError

ALIGN = 4  # resnet generators halve the size twice: tiles must start on this grid to match


def receptive_radius(netG: str, flags: Any = None) -> int | None:
    """Pixels from an output pixel to the farthest input pixel that influences it, as generator
    family `netG` says; None for one that sees the whole tile (a U-Net: tiling it is never exact)."""
    return family_of(netG).receptive_radius(flags)


def split_padding(size: int, multiple: int, minimum: int = 0) -> tuple[int, int]:
    """(before, after) padding that brings `size` up to the next multiple of `multiple` that is
    at least `minimum`, split evenly (the extra pixel after)."""
    target = max(-(-size // multiple) * multiple, -(-minimum // multiple) * multiple)
    total = target - size
    return total // 2, total - total // 2


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


def tile_starts(length: int, tile: int, overlap: int, align: int = ALIGN) -> list[int]:
    """Start positions of tiles of size `tile` covering [0, length), neighbours overlapping by at
    least `overlap`, spread evenly, each a multiple of `align`.

    Requires `length` and `tile` to be multiples of `align`, and `tile - overlap` to be one too
    (the caller rounds the overlap up), so that the rounding never shrinks an overlap.
    """
    if length <= tile:
        return [0]
    n = math.ceil((length - tile) / (tile - overlap)) + 1
    span = (length - tile) // align
    return [(i * span // (n - 1)) * align for i in range(n)]


def edge_ramp(length: int, overlap: int, ramp_start: bool, ramp_end: bool,
              device=None, dtype=torch.float32) -> torch.Tensor:
    """1-D blending weights of one tile: 0 on the outer quarter of the overlap at each end that
    borders another tile, rising linearly to 1 over the middle half; 1 elsewhere."""
    weight = torch.ones(length, device=device, dtype=dtype)
    if overlap <= 0:
        return weight
    margin = overlap // 4
    width = max(overlap - 2 * margin, 1)
    distance = torch.arange(length, device=device, dtype=dtype)
    ramp = ((distance - margin + 0.5) / width).clamp(0.0, 1.0)
    if ramp_start:
        weight = weight * ramp
    if ramp_end:
        weight = weight * ramp.flip(0)
    return weight


def translate_tiled(net: nn.Module, x: torch.Tensor, tile: int, overlap: int, *codes: torch.Tensor) -> torch.Tensor:
    """`net(x, *codes)` computed tile by tile and blended (see the module docstring). `x` is NxCxHxW
    with H and W multiples of 4; tiles are `tile` x `tile` (clipped to the image) and `tile` must be a
    size `net` accepts; `codes` (a latent generator's, one per image) go with every tile. Only one
    tile's activations are in memory at a time."""
    height, width = x.shape[-2:]
    overlap = min(-(-overlap // ALIGN) * ALIGN, tile - ALIGN)  # rounded up to the 4-pixel grid
    tile_h, tile_w = min(tile, height), min(tile, width)
    rows = tile_starts(height, tile_h, overlap)
    cols = tile_starts(width, tile_w, overlap)
    out = weights = None
    for top in rows:
        wy = edge_ramp(tile_h, overlap, top > 0, top + tile_h < height, x.device, x.dtype)
        for left in cols:
            wx = edge_ramp(tile_w, overlap, left > 0, left + tile_w < width, x.device, x.dtype)
            y = net(x[..., top:top + tile_h, left:left + tile_w], *codes)
            if out is None:
                out = y.new_zeros(*y.shape[:2], height, width)
                weights = x.new_zeros(height, width)
            w = wy[:, None] * wx[None, :]
            out[..., top:top + tile_h, left:left + tile_w] += y * w
            weights[top:top + tile_h, left:left + tile_w] += w
    return out / weights


class GeneratorWrapper(nn.Module):
    """A generator wrapped for inference (`wrap_generators`), the generator itself in `self.net`."""

    net: nn.Module


class SizeAdapter(GeneratorWrapper):
    """Wraps a generator so that it takes images of any size and returns the same size (see the
    module docstring); `tile` > 0 translates in blended tiles of that size."""

    def __init__(self, net: nn.Module, multiple: int, tile: int = 0, overlap: int = 0, minimum: int = 0):
        super().__init__()
        self.net = net
        self.multiple = multiple
        self.minimum = minimum
        self.tile = tile
        self.overlap = overlap

    @classmethod
    def for_generator(cls, net: nn.Module, netG: str, tile: int = 0, overlap: int = 0,
                      flags: Any = None) -> "SizeAdapter":
        """The adapter with the size rule of generator family `netG` (with the options `flags`)."""
        rule = family_of(netG).size_rule(flags)
        return cls(net, rule.multiple, tile, overlap, rule.minimum)

    def forward(self, x: torch.Tensor, *codes: torch.Tensor) -> torch.Tensor:
        """`x` translated at its own size; `codes`: what else the generator takes (a latent code)."""
        height, width = x.shape[-2:]
        top, bottom = split_padding(height, self.multiple, self.minimum)
        left, right = split_padding(width, self.multiple, self.minimum)
        padded = reflect_pad(x, top, bottom, left, right)
        ph, pw = padded.shape[-2:]
        if self.tile and (ph > self.tile or pw > self.tile):
            y = translate_tiled(self.net, padded, self.tile, self.overlap, *codes)
        else:
            y = self.net(padded, *codes)
        return y[..., top:top + height, left:left + width]


def check_tiling(netG: str, tile: int, overlap: int, flags: Any = None) -> None:
    """Raise a UserError unless --tile/--tile_overlap suit generator family `netG`."""
    rule = family_of(netG).size_rule(flags)
    multiple, minimum = rule.multiple, rule.minimum
    if tile < 0 or overlap < 0:
        raise UserError(f"--tile {tile} and --tile_overlap {overlap} must not be negative; use --tile 0 to "
                        f"translate whole images.")
    if tile == 0:
        return
    minimum = max(minimum, 16)
    if tile % multiple or tile < minimum:
        raise UserError(
            f"--tile {tile} does not suit --netG {netG}: tiles must be multiples of {multiple} pixels and at "
            f"least {minimum}; use e.g. --tile {max(minimum, 512 // multiple * multiple)}.")
    if overlap > tile // 2:
        raise UserError(
            f"--tile_overlap {overlap} is more than half of --tile {tile}; tiles would overlap more than "
            f"they advance. Use --tile_overlap {tile // 8} (or a bigger --tile).")


def adapt_generators(model, netG: str, tile: int = 0, overlap: int = 0, flags: Any = None) -> list[str]:
    """Wrap each generator of `model` in a SizeAdapter (see `wrap_generators`); returns the wrapped
    attribute names."""
    return wrap_generators(model, lambda net: SizeAdapter.for_generator(net, netG, tile, overlap, flags))


def wrap_generators(model, wrap: Callable[[nn.Module], nn.Module]) -> list[str]:
    """Replace each generator of `model` (its networks of role generator, under every attribute that
    holds one) by `wrap(generator)`, after its weights are loaded; returns the wrapped attribute names.
    Models call `self.net<name>(x)` in `forward`, so they need no change; a generator held under two
    names is wrapped once, and a wrapped one is not wrapped again."""
    generators = {id(net) for net in model.networks_with_role("generator").values()}
    wrapped: dict[int, nn.Module] = {}
    names = []
    for name, value in list(vars(model).items()):
        if id(value) in generators and not isinstance(value, GeneratorWrapper):
            if id(value) not in wrapped:
                wrapped[id(value)] = wrap(value)
            setattr(model, name, wrapped[id(value)])
            names.append(name)
    return names


class PadToMultiple(nn.Module):
    """The padding part of SizeAdapter in a form TorchScript and torch.export can trace with
    symbolic height and width (one reflection step, no loop): pads to the next multiple of
    `multiple` split evenly, runs `net`, crops back. Reflection needs the padding to be smaller
    than the image, so inputs must be at least `multiple // 2 + 1` pixels (U-Net 256: 129) and,
    for resnets, 8 (`export_min_size`)."""

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


def export_min_size(netG: str, flags: Any = None) -> int:
    """Smallest height/width a PadToMultiple-wrapped generator of family `netG` accepts."""
    rule = family_of(netG).size_rule(flags)
    multiple, minimum = rule.multiple, rule.minimum
    # Resnets: padding to a multiple of 4 leaves anything below 8 too small. U-Nets: any size pads
    # up to at least one multiple; reflection limits the padding to less than the image.
    return minimum if minimum > multiple else multiple // 2 + 1
