"""Distances that see a texture but not where its stripes lie: for unpaired translations scored against
a true counterpart whose fine detail (a stripe's phase or direction) no model can know.

Pixel L1 against such a counterpart punishes stripes drawn half a period off as much as no stripes at all,
so the identity (no stripes) wins it. Compared over squares of `window` pixels about a stripe period wide
instead, the two questions separate:

  coarse_L1   L1 of the images' local means (each pixel the mean of its window): the scene's content and
              colours at the texture's scale, the same wherever the stripes lie;
  texture_L1  L1 of their local standard deviations (per channel): how much the image varies within each
              window, i.e. whether the texture is there and how strong.

An output with the right stripes anywhere scores near 0 on both; the input (solid shapes) fails texture_L1
and coarse_L1; a flat mean colour passes coarse_L1 and fails texture_L1. In the network's [-1, 1] units,
the mean over pixels and channels of each image, then over images.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def local_mean_and_std(images: torch.Tensor, window: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and standard deviation of every `window` x `window` square (stride 1, no padding) of each
    channel of `images` (N x C x H x W)."""
    images = images.double()
    mean = F.avg_pool2d(images, window, stride=1)
    mean_of_squares = F.avg_pool2d(images * images, window, stride=1)
    # clamp: rounding can make the variance of a flat square a tiny negative number
    return mean, (mean_of_squares - mean * mean).clamp_min(0).sqrt()


def texture_distances(output: torch.Tensor, target: torch.Tensor, window: int) -> dict[str, torch.Tensor]:
    """Per image (a tensor of N values each) coarse_L1 and texture_L1 of `output` against `target`
    (N x C x H x W, H and W at least `window`)."""
    if window < 1 or min(target.shape[-2:]) < window:
        raise ValueError(f"the texture window ({window} px) must fit the images ({tuple(target.shape[-2:])})")
    out_mean, out_std = local_mean_and_std(output, window)
    target_mean, target_std = local_mean_and_std(target, window)
    return {"coarse_L1": (out_mean - target_mean).abs().flatten(1).mean(1),
            "texture_L1": (out_std - target_std).abs().flatten(1).mean(1)}
