"""CUT's blur layers (Zhang, "Making convolutional networks shift-invariant again", ICML 2019), as
taesungp/contrastive-unpaired-translation builds them: `Downsample` in its generator's and
discriminator's downsamplings, `Upsample` in its generator's upsamplings (models/networks/resnet.py,
patchgan.py). Their filters are persistent buffers (`filt`) because CUT's checkpoints hold them."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from models.networks.layers import ReflectionPad2d


def _binomial_filter(taps: tuple[float, ...], channels: int, gain: float) -> torch.Tensor:
    """The separable blur `taps` x `taps`, normalised to sum `gain`, one copy per channel (depthwise)."""
    row = torch.tensor(taps, dtype=torch.float32)
    filt = row[:, None] * row[None, :]
    return (filt / filt.sum() * gain)[None, None].repeat(channels, 1, 1, 1)


class Downsample(nn.Module):
    """Blur with a 3x3 binomial filter (reflection-padded; from slices with `sliced`: --deterministic),
    then keep every second pixel: even sizes halve."""

    def __init__(self, channels: int, sliced: bool = False):
        super().__init__()
        self.register_buffer("filt", _binomial_filter((1.0, 2.0, 1.0), channels, 1.0))
        self.pad = ReflectionPad2d(1, sliced=sliced)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(self.pad(x), self.filt, stride=2, groups=x.shape[1])


class Upsample(nn.Module):
    """Double the size by a transposed 4x4 binomial blur (replicate-padded): no learned upconvolution,
    so no checkerboard."""

    def __init__(self, channels: int):
        super().__init__()
        self.register_buffer("filt", _binomial_filter((1.0, 3.0, 3.0, 1.0), channels, 4.0))  # 4: stride squared
        self.pad = nn.ReplicationPad2d(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Pad by one, spread with stride 2, then trim to exactly twice the input size.
        out = F.conv_transpose2d(self.pad(x), self.filt, stride=2, padding=2, groups=x.shape[1])
        return out[:, :, 1:-1, 1:-1]
