"""Per-image quality measures between an output and its target.

Tensors are network images in [-1, 1] (CxHxW or 1xCxHxW); arrays are HxWxC (or HxW) uint8
images as saved to disk. PSNR and SSIM are computed on 8-bit images (what the user sees and
what `scripts/evaluate.py` reads back), so test.py and evaluate.py agree; L1 is in the network's
[-1, 1] units (0 = identical, 2 = maximal).

SSIM follows Wang et al. (2004): 11x11 Gaussian window with sigma 1.5, K1 = 0.01, K2 = 0.03,
population covariances, mean over pixels and channels - scikit-image's `structural_similarity`
with `gaussian_weights=True, sigma=1.5, use_sample_covariance=False, data_range=255`.
Distribution metrics (FID, KID) live in util/fid.py.
"""
from __future__ import annotations

import math

import numpy as np
import torch

SSIM_MIN_SIDE = 11  # the Gaussian window is 11x11: smaller images have no SSIM (nan)


def to_uint8(image: torch.Tensor) -> np.ndarray:
    """[-1, 1] tensor images as the uint8 arrays that would be saved: CxHxW -> HxWxC,
    NxCxHxW -> NxHxWxC."""
    x = torch.round((image.detach().float().cpu().clamp(-1.0, 1.0) + 1.0) * 127.5)
    return x.movedim(-3, -1).numpy().astype(np.uint8)


def l1_distance(output: torch.Tensor, target: torch.Tensor) -> float:
    """Mean absolute difference, in the [-1, 1] scale of the network (0 = identical, 2 = max)."""
    return (output.float() - target.float()).abs().mean().item()


def psnr(output: torch.Tensor, target: torch.Tensor) -> float:
    """Peak signal-to-noise ratio in dB of 8-bit images (inf when identical); a batch is one signal."""
    return psnr_uint8(to_uint8(output), to_uint8(target))


def ssim(output: torch.Tensor, target: torch.Tensor) -> float:
    """Structural similarity of the 8-bit images (1.0 when identical; see the module docstring);
    the mean over the images of a batch."""
    out8, target8 = to_uint8(output), to_uint8(target)
    if out8.ndim == 4:
        return float(np.mean([ssim_uint8(o, t) for o, t in zip(out8, target8)]))
    return ssim_uint8(out8, target8)


def psnr_uint8(output: np.ndarray, target: np.ndarray) -> float:
    """PSNR in dB of two uint8 arrays of the same shape: 10 log10(255^2 / MSE); inf when equal."""
    _check_same_shape(output, target)
    mse = np.mean((output.astype(np.float64) - target.astype(np.float64)) ** 2)
    return math.inf if mse == 0 else 10.0 * math.log10(255.0 ** 2 / mse)


def ssim_uint8(output: np.ndarray, target: np.ndarray) -> float:
    """SSIM of two uint8 arrays (HxW or HxWxC) of the same shape; nan if a side is under 11 px."""
    from skimage.metrics import structural_similarity  # imported here: only metric runs need it

    _check_same_shape(output, target)
    if min(output.shape[:2]) < SSIM_MIN_SIDE:
        return math.nan
    channel_axis = 2 if output.ndim == 3 else None
    return float(structural_similarity(output, target, data_range=255, channel_axis=channel_axis,
                                       gaussian_weights=True, sigma=1.5, use_sample_covariance=False))


def l1_uint8(output: np.ndarray, target: np.ndarray) -> float:
    """Mean absolute difference of two uint8 arrays, in [-1, 1] units (difference / 127.5)."""
    _check_same_shape(output, target)
    return float(np.mean(np.abs(output.astype(np.float64) - target.astype(np.float64))) / 127.5)


def _check_same_shape(output: np.ndarray, target: np.ndarray) -> None:
    if output.shape != target.shape:
        raise ValueError(f"images differ in shape: {output.shape} vs {target.shape}")


class MetricAverager:
    """Averages of named per-image measures over a test set.

    `add_pair(prefix, output, target)` adds `<prefix>_L1` and `<prefix>_PSNR` (an infinite PSNR
    counts as 100 dB so that one perfect image does not make the mean infinite) and, when built
    with `with_ssim=True`, `<prefix>_SSIM`. The caller advances `count` once per image.
    """

    def __init__(self, with_ssim: bool = False) -> None:
        self.totals: dict[str, float] = {}
        self.count = 0
        self.with_ssim = with_ssim

    def _add(self, key: str, value: float) -> None:
        self.totals[key] = self.totals.get(key, 0.0) + value

    def add_pair(self, prefix: str, output: torch.Tensor, target: torch.Tensor) -> None:
        self._add(f"{prefix}_L1", l1_distance(output, target))
        self._add(f"{prefix}_PSNR", min(psnr(output, target), 100.0))
        if self.with_ssim:
            self._add(f"{prefix}_SSIM", ssim(output, target))

    def means(self) -> dict[str, float]:
        return {k: v / max(self.count, 1) for k, v in self.totals.items()}
