"""Translate whole volumes with a generator trained on patches: overlapping windows of the patch
size, blended with Gaussian weights so that no seam shows where windows meet.

A 3-D generator is trained on random patches (--patch_size) because whole volumes do not fit its
activations in memory. At test time, in validation and in the Translator, `SlidingWindow` wraps it:
the volume is cut into windows of the patch size overlapping by --window_overlap (a fraction of the
window), --window_batch windows go through the generator at once, and each output voxel is the
average of the windows that cover it, weighted by a Gaussian centred on each window (the voxels near a
window's border, which saw the least context, count least; `window_weights`). The flags are the volume datasets'
(data/volume_patches.py). A volume smaller than the window on an
axis is padded by replication and the padding cut off.

The windowing is MONAI's `sliding_window_inference`, a maintained implementation used across medical
imaging, rather than code of our own; it is imported only when a volume is translated (it takes
seconds to import).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

import torch
from torch import nn

from models.networks import GENERATOR, family_of
from models.tiling import GeneratorWrapper, wrap_generators
from util.errors import UserError

WINDOW_SIGMA = 0.125  # of the window's side: MONAI's default Gaussian, the usual choice for patch-trained nets


class SlidingWindow(GeneratorWrapper):
    """`net` applied to a whole volume (N x C x D x H x W, any size) in blended windows of `window`
    voxels (see the module docstring); the output has the input's spatial size."""

    def __init__(self, net: nn.Module, window: Sequence[int], overlap: float = 0.5, batch: int = 4) -> None:
        super().__init__()
        self.infer = monai_sliding_window_inference()  # a missing MONAI is told before any volume is read
        self.net = net
        self.window = tuple(int(side) for side in window)
        self.overlap = float(overlap)
        self.batch = max(int(batch), 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights = window_weights(self.window, x.dtype, x.device)
        return self.infer(x, self.window, self.batch, self.net, overlap=self.overlap, mode="gaussian",
                          sigma_scale=WINDOW_SIGMA, padding_mode="replicate", progress=False, roi_weight_map=weights)


def monai_sliding_window_inference() -> Callable[..., torch.Tensor]:
    """MONAI's `sliding_window_inference`, imported on first use; a UserError naming the package where
    it is not installed (a GPU machine with PyTorch but not requirements.txt, say)."""
    try:
        from monai.inferers import sliding_window_inference
    except ImportError as err:
        raise UserError("whole volumes are translated in windows by MONAI (the monai package), which is not "
                        "installed: pip install monai (requirements.txt; bash scripts/setup.sh installs it), "
                        "then run again.") from err
    return sliding_window_inference


def window_weights(window: Sequence[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Each voxel's weight in a window: a Gaussian of WINDOW_SIGMA x the window's side per axis, 1 at the
    centre. MONAI's own map is floored at 1e-3, which makes every window equal near a volume's edges and
    corners, where no window is centred: the voxels at a window's border, which saw zero padding, then
    count as much as those deep inside another window, and seams show there. Floored at 1e-12 instead
    (a weight, never a division by zero), the window that saw most of a voxel's neighbourhood wins."""
    profiles = []
    for side in window:
        position = torch.arange(side, dtype=torch.float64) - (side - 1) / 2
        profiles.append(torch.exp(-0.5 * (position / (WINDOW_SIGMA * side)) ** 2))
    weights = profiles[0]
    for profile in profiles[1:]:
        weights = weights[..., None] * profile
    return weights.clamp(min=1e-12).to(dtype=dtype, device=device)


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
                        f"that fits (e.g. {max(rule.minimum, rule.multiple * 2)}).")


def adapt_generators_to_volumes(model, window: Sequence[int], overlap: float, batch: int) -> list[str]:
    """Wrap each generator of `model` in a SlidingWindow (models/tiling.wrap_generators); returns the
    wrapped attribute names."""
    return wrap_generators(model, lambda net: SlidingWindow(net, window, overlap, batch))


@contextmanager
def windowed_generators(model, window: Sequence[int], overlap: float, batch: int) -> Iterator[list[str]]:
    """Within the block, the generators of `model` translate whole volumes in sliding windows (validation
    between training epochs); afterwards the model holds its plain generators again, as training needs."""
    names = adapt_generators_to_volumes(model, window, overlap, batch)
    try:
        yield names
    finally:
        for name in names:
            setattr(model, name, getattr(model, name).net)
