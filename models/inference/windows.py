"""Inputs larger than a generator should see at once, translated in overlapping windows and blended:
one routine for pictures (--tile) and volumes (--patch_size), for any number of spatial dimensions.

`in_windows(predictor, x, windows, *codes)` cuts `x` (N x C x spatial...) into windows of
`windows.size`, runs `predictor` on `windows.batch` of them at a time, and gives each output pixel
(voxel) the weighted mean of the windows that cover it. The windowing is MONAI's
`sliding_window_inference`, a maintained implementation that takes any predictor and any number of
dimensions (imported on first use: it takes seconds). What differs is the blending each needs:

- Pictures (`Windows.for_tiles`: --tile, --tile_overlap in pixels): windows of the tile size (clipped to
  the image) on the 4-pixel grid of the resnet generators' two halvings, so that every tile sees the
  pixel grid the whole image does, neighbours overlapping by at least the overlap. A window's weight
  along each axis is ~0 on the outer quarter of the overlap at both ends (those pixels saw the tile's
  artificial border) and rises linearly to 1 across the middle half ("ramp"). For generators whose
  output depends only on a bounded neighbourhood (batch norm in eval mode, or no norm) the blend
  equals whole-image output up to float rounding when `overlap // 4 >= receptive_radius`
  (docs/evaluation.md); instance norm normalises each tile by its own statistics (tones differ as
  two crops of one photo would), and the cross-fade leaves no seam.
- Volumes (`Windows.for_volumes`: --patch_size, --window_overlap as a fraction, --window_batch):
  windows of the patch size the generator trained on, weighted by a Gaussian centred on each window
  ("gaussian"; the voxels near a window's border, which saw the least context, count least); a
  volume smaller than the window on an axis is padded by replication and the padding cut off.

Weights are floored at 1e-12 (per axis), never at MONAI's 1e-3: near an input's edges, where no window
is centred, a window that saw a pixel from its border must not count as much as one that saw it from
deep inside.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from models.networks import GENERATOR, family_of
from models.networks.layers import fitting_patch
from util.errors import UserError

ALIGN = 4                # resnet generators halve the size twice: tiles start on this grid to match
MAX_WINDOWS = 1_000_000  # per input: MONAI lists every window's position before translating the first
WINDOW_SIGMA = 0.125     # of the window's side: MONAI's default Gaussian, the usual choice for patch-trained nets
WEIGHT_FLOOR = 1e-12     # per axis: a weight, never a division by zero
RAMP, GAUSSIAN = "ramp", "gaussian"


@dataclass(frozen=True)
class Windows:
    """How a generator meets a large input: windows of `size` (one side per spatial dimension),
    `batch` through the generator at once, neighbours overlapping by `overlap` (pixels for "ramp"
    tiles, a fraction of the window for "gaussian" volume windows), blended by `blend`."""

    size: tuple[int, ...]
    overlap: float
    batch: int = 1
    blend: str = RAMP

    @classmethod
    def for_tiles(cls, tile: int, overlap: int) -> "Windows":
        """Pictures in tiles of `tile` x `tile` pixels (one at a time), overlapping by at least `overlap`."""
        return cls((tile, tile), overlap, 1, RAMP)

    @classmethod
    def for_volumes(cls, size: Sequence[int], overlap: float, batch: int) -> "Windows":
        """Volumes in windows of `size` voxels (D, H, W) overlapping by the fraction `overlap`, `batch` at once."""
        return cls(tuple(int(side) for side in size), float(overlap), max(int(batch), 1), GAUSSIAN)

    def covers(self, spatial: Sequence[int]) -> bool:
        """Whether an input of these spatial sizes fits in one window (tiles: nothing to cut)."""
        return self.blend == RAMP and all(side <= size for side, size in zip(spatial, self.size))

    def describe(self) -> str:
        if self.blend == RAMP:
            return f"tiles of {self.size[0]} px, overlap {self.overlap:g}"
        return f"windows of {'x'.join(map(str, self.size))} voxels, overlap {self.overlap:g}, {self.batch} at once"


def in_windows(predictor: Callable[..., torch.Tensor], x: torch.Tensor, windows: Windows,
               *codes: torch.Tensor) -> torch.Tensor:
    """`predictor(x, *codes)` computed window by window and blended (see the module docstring); `x` is
    N x C x spatial..., `codes` (a latent generator's, one row per image) go with every window of their
    image. The windows of pictures must be sizes the predictor takes (the caller pads `x` to its size
    rule first); only `windows.batch` windows' activations are in memory at a time."""
    infer = monai_sliding_window_inference()
    spatial = tuple(x.shape[2:])
    if windows.blend == RAMP:
        size = tuple(min(side, length) for side, length in zip(windows.size, spatial))
        # the overlap rounded up to the 4-pixel grid (an axis the image fits in has one window, no overlap)
        overlap_px = max(min(-(-int(windows.overlap) // ALIGN) * ALIGN, windows.size[0] - ALIGN), 0)
        weights = ramp_weights(size, overlap_px, x.dtype, x.device)
        # MONAI steps by int(size * (1 - fraction)): ask for exactly the stride, a multiple of 4
        strides = [tile_stride(length, side, overlap_px) for side, length in zip(size, spatial)]
        overlap = tuple(1 - (stride + 0.5) / side if stride < side else 0.0 for stride, side in zip(strides, size))
        padding = "constant"  # never used: the windows fit the image
    else:
        size, overlap, padding = windows.size, windows.overlap, "replicate"
        weights = gaussian_weights(size, x.dtype, x.device)

    count = window_count(spatial, size, overlap)
    if count > MAX_WINDOWS:
        what = (f"--tile {windows.size[0]} with --tile_overlap {windows.overlap:g}" if windows.blend == RAMP else
                f"windows of {'x'.join(map(str, size))} voxels overlapping by --window_overlap {windows.overlap:g}")
        fix = "a larger --tile" if windows.blend == RAMP else "a smaller --window_overlap (default 0.5)"
        raise UserError(f"{what} cut an input of {'x'.join(map(str, spatial))} into {count} windows, more than the "
                        f"{MAX_WINDOWS} one input may take (MAX_WINDOWS, models/inference/windows.py: their positions "
                        f"are listed first); use {fix}.")

    def run(images: torch.Tensor, predict: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        def own_output(window: torch.Tensor) -> torch.Tensor:
            out = predict(window)
            if out.dtype != images.dtype:
                # MONAI weights the output in its own dtype: under fp16 autocast a weight of 1e-12 at an
                # image's border would round it to 0 while the sum of weights, in the input's, does not
                return out.to(images.dtype)
            # and in place: an output that is a view of the input (an identity network), or of MONAI's
            # padded copy of it, would rewrite what the windows still to come read
            inputs = {images.untyped_storage().data_ptr(), window.untyped_storage().data_ptr()}
            return out.clone() if out.untyped_storage().data_ptr() in inputs else out

        return infer(images, size, windows.batch, own_output, overlap=overlap, padding_mode=padding, progress=False,
                     roi_weight_map=weights)

    if not codes:
        return run(x, predictor)
    # MONAI batches windows of several images together: one image at a time, each with its own code
    return torch.cat([run(x[i:i + 1], lambda window, i=i: predictor(window, *(c[i:i + 1].expand(len(window), -1)
                                                                              for c in codes)))
                      for i in range(len(x))])


def tile_stride(length: int, tile: int, overlap: int) -> int:
    """The step between the starts of tiles of `tile` pixels on an axis of `length` (both multiples of 4):
    the fewest tiles whose neighbours overlap by at least `overlap`, spread evenly on the 4-pixel grid
    (the last one ends at the axis's end); `tile` when one tile covers it."""
    if length <= tile:
        return tile
    count = -(-(length - tile) // (tile - overlap)) + 1
    return ALIGN * -(-(-(-(length - tile) // (count - 1))) // ALIGN)


def window_count(spatial: Sequence[int], size: Sequence[int], overlap: Sequence[float] | float) -> int:
    """How many windows MONAI cuts an input of `spatial` sizes into: per axis one where the window covers
    the input (padded to it), else enough, `int(size * (1 - overlap))` (at least 1) apart, to reach its end."""
    fractions = overlap if isinstance(overlap, Sequence) else [overlap] * len(size)
    count = 1
    for length, side, fraction in zip(spatial, size, fractions):
        length = max(length, side)
        step = max(int(side * (1 - fraction)), 1)
        count *= 1 if length == side else -(-(length - side) // step) + 1
    return count


def ramp_weights(size: Sequence[int], overlap: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A tile's weights: per axis ~0 (WEIGHT_FLOOR) on the outer quarter of `overlap` at each end,
    rising linearly to 1 over its middle half; their product over the axes."""
    profiles = []
    for side in size:
        profile = torch.ones(side, dtype=torch.float64)
        if overlap > 0:
            margin = overlap // 4
            width = max(overlap - 2 * margin, 1)
            ramp = ((torch.arange(side, dtype=torch.float64) - margin + 0.5) / width).clamp(0.0, 1.0)
            profile = ramp * ramp.flip(0)
        profiles.append(profile.clamp(min=WEIGHT_FLOOR))
    return _outer(profiles).to(dtype=dtype, device=device)


def gaussian_weights(size: Sequence[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A volume window's weights: a Gaussian of WINDOW_SIGMA x the window's side per axis, 1 at the
    centre, floored per axis at WEIGHT_FLOOR."""
    profiles = []
    for side in size:
        position = torch.arange(side, dtype=torch.float64) - (side - 1) / 2
        profiles.append(torch.exp(-0.5 * (position / (WINDOW_SIGMA * side)) ** 2).clamp(min=WEIGHT_FLOOR))
    return _outer(profiles).to(dtype=dtype, device=device)


def _outer(profiles: list[torch.Tensor]) -> torch.Tensor:
    weights = profiles[0]
    for profile in profiles[1:]:
        weights = weights[..., None] * profile
    return weights


def monai_sliding_window_inference() -> Callable[..., torch.Tensor]:
    """MONAI's `sliding_window_inference`, imported on first use; a UserError naming the package where
    it is not installed (a GPU machine with PyTorch but not requirements.txt, say)."""
    try:
        from monai.inferers import sliding_window_inference
    except ImportError as err:
        raise UserError("large pictures (--tile) and whole volumes are translated in windows by MONAI (the monai "
                        "package), which is not installed: pip install monai (requirements.txt; bash "
                        "scripts/setup.sh installs it), then run again.") from err
    return sliding_window_inference


# ---------------------------------------------------------------------------------- checks
def receptive_radius(netG: str, flags: Any = None) -> int | None:
    """Pixels from an output pixel to the farthest input pixel that influences it, as generator
    family `netG` says; None for one that sees the whole tile (a U-Net: tiling it is never exact)."""
    return family_of(netG).receptive_radius(flags)


def check_tiling(netG: str, tile: int, overlap: int, flags: Any = None) -> None:
    """Raise a UserError unless --tile/--tile_overlap suit generator family `netG`."""
    rule = family_of(netG).size_rule(flags)
    if tile < 0 or overlap < 0:
        raise UserError(f"--tile {tile} and --tile_overlap {overlap} must not be negative; use --tile 0 to "
                        f"translate whole images.")
    if tile == 0:
        return
    minimum = max(rule.minimum, 16)
    if tile % rule.multiple or tile < minimum:
        raise UserError(
            f"--tile {tile} does not suit --netG {netG}: tiles must be multiples of {rule.multiple} pixels and at "
            f"least {minimum}; use e.g. --tile {max(minimum, 512 // rule.multiple * rule.multiple)}.")
    if overlap > tile // 2:
        raise UserError(
            f"--tile_overlap {overlap} is more than half of --tile {tile}; tiles would overlap more than "
            f"they advance. Use --tile_overlap {tile // 8} (or a bigger --tile).")


def check_window(flags: Any, window: Sequence[int]) -> None:
    """A UserError when the run's generator cannot take windows of `window` voxels (the patch size)."""
    family = family_of(flags.netG, GENERATOR)
    rule = family.size_rule(flags)
    if len(window) != rule.dims:
        raise UserError(f"--netG {flags.netG} takes {rule.dims}-D input, but --patch_size gives {len(window)}-D "
                        f"windows; volumes need a 3-D generator (docs/volumes.md).")
    if not rule.fits(*window):
        raise UserError(f"--patch_size {'x'.join(map(str, window))}: --netG {flags.netG} needs sides that are "
                        f"multiples of {rule.multiple} and at least {rule.minimum} voxels; choose a --patch_size "
                        f"that fits, e.g. --patch_size {fitting_patch(tuple(window), rule.multiple, rule.minimum)}.")
