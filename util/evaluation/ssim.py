"""SSIM of volumes, computed as torchmetrics computes it (its `structural_similarity_index_measure` with a
Gaussian window: sigma 1.5, 11 taps a side, reflection-padded, k1 0.01, k2 0.03), with the window applied
as three 1-D passes instead of one 11x11x11 convolution.

The Gaussian window is the outer product of three 1-D ones, so the three passes give torchmetrics' sums
up to rounding, with 33 products per voxel instead of 1331 (what that saves: docs/benchmarks.md;
tests/test_metrics.py checks the two agree)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

SIGMA, K1, K2 = 1.5, 0.01, 0.03
TAPS = int(3.5 * SIGMA + 0.5) * 2 + 1  # 11, as torchmetrics derives the Gaussian window's size from sigma


def gaussian_taps(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The normalised 1-D Gaussian window (TAPS values)."""
    offsets = torch.arange((1 - TAPS) / 2, (1 + TAPS) / 2, 1, dtype=dtype, device=device)
    taps = torch.exp(-(offsets / SIGMA) ** 2 / 2)
    return taps / taps.sum()


def _window(volumes: torch.Tensor) -> torch.Tensor:
    """The Gaussian-weighted local mean of each channel of N x C x D x H x W `volumes` (padded by TAPS // 2
    on every side beforehand), one axis at a time."""
    channels, taps = volumes.shape[1], gaussian_taps(volumes.dtype, volumes.device)
    for axis in range(3):
        shape = [1, 1, 1]
        shape[axis] = TAPS
        volumes = F.conv3d(volumes, taps.view(1, 1, *shape).expand(channels, 1, *shape), groups=channels)
    return volumes


def ssim_map_3d(output: torch.Tensor, target: torch.Tensor, data_range: float = 1.0) -> torch.Tensor:
    """The SSIM of each voxel of N x C x D x H x W `output` against `target` (values spanning `data_range`),
    each side at least TAPS // 2 + 1 voxels (the reflection padding)."""
    pad = (TAPS - 1) // 2
    output, target = (F.pad(v, (pad,) * 6, mode="reflect") for v in (output, target))
    stacked = _window(torch.cat((output, target, output * output, target * target, output * target)))
    mu_out, mu_tgt, mean_out_sq, mean_tgt_sq, mean_cross = stacked.split(output.shape[0])
    c1, c2 = (K1 * data_range) ** 2, (K2 * data_range) ** 2
    var_out = torch.clamp(mean_out_sq - mu_out ** 2, min=0.0)
    var_tgt = torch.clamp(mean_tgt_sq - mu_tgt ** 2, min=0.0)
    covariance = mean_cross - mu_out * mu_tgt
    numerator = (2 * mu_out * mu_tgt + c1) * (2 * covariance + c2)
    return numerator / ((mu_out ** 2 + mu_tgt ** 2 + c1) * (var_out + var_tgt + c2))
