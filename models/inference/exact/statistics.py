"""A normalisation's statistics over a whole map gathered region by region, in float64 (each region's mean and
sum of squared deviations, merged as Chan, Golub and LeVeque do, so a map of any size loses no precision), and the
normalisation applied to a region with them."""
from __future__ import annotations

import torch
from torch import nn


class WholeMapNorm:
    """Instance, batch or group norm `module` over a whole map that arrives in regions: `add(region)` for every
    region of its input, once each; then `apply(region)` normalises any region as the whole-map forward would."""

    def __init__(self, module: nn.Module):
        self.module = module
        self.count = 0
        self.mean: torch.Tensor | None = None
        self.squares: torch.Tensor | None = None  # sum of squared deviations from the mean
        self.shift: torch.Tensor | None = None
        self.factor: torch.Tensor | None = None

    def _grouped(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[int, ...]]:
        """`x` shaped so that the statistics are one per group of its dimension 0 (batch norm) or 0 and 1, and the
        dimensions reduced."""
        spatial = tuple(range(2, x.dim()))
        if isinstance(self.module, nn.GroupNorm):
            grouped = x.reshape(x.shape[0], self.module.num_groups, -1)
            return grouped, (2,)
        if isinstance(self.module, nn.modules.instancenorm._InstanceNorm):
            return x, spatial
        return x, (0, *spatial)

    def add(self, region: torch.Tensor) -> None:
        grouped, dims = self._grouped(region)
        count = 1
        for dim in dims:
            count *= grouped.shape[dim]
        if count == 0:
            return
        mean = grouped.sum(dims, dtype=torch.float64) / count  # float64 sums; no float64 copy of the region
        centre = mean.to(grouped.dtype)
        deviations = grouped - _expand(centre, grouped, dims)
        # sum of squared deviations from the exact mean, from those around its rounded value
        squares = (deviations * deviations).sum(dims, dtype=torch.float64) - count * (mean - centre.double()) ** 2
        if self.mean is None:
            self.count, self.mean, self.squares = count, mean, squares
            return
        total = self.count + count
        delta = mean - self.mean
        self.mean = self.mean + delta * (count / total)
        self.squares = self.squares + squares + delta ** 2 * (self.count * count / total)
        self.count = total

    def finish(self, channels: int) -> None:
        """Fix the normalisation of every region (and, in training mode, update the running statistics as the
        whole-map forward would)."""
        module = self.module
        variance = self.squares / self.count
        inverse = torch.rsqrt(variance + module.eps)
        mean = self.mean
        if isinstance(module, nn.GroupNorm):  # per (image, group) -> per (image, channel)
            mean = mean.repeat_interleave(channels // module.num_groups, dim=1)
            inverse = inverse.repeat_interleave(channels // module.num_groups, dim=1)
        weight = getattr(module, "weight", None)
        factor = inverse * weight.double() if weight is not None else inverse
        self.shift = mean
        self.factor = factor
        if getattr(module, "track_running_stats", False) and module.training:
            self._update_running(variance)

    def _update_running(self, variance: torch.Tensor) -> None:
        module = self.module
        mean, unbiased = self.mean, variance * self.count / max(self.count - 1, 1)
        if mean.dim() == 2:  # instance norm: the running statistics average the images'
            mean, unbiased = mean.mean(0), unbiased.mean(0)
        module.num_batches_tracked.add_(1)
        momentum = module.momentum if module.momentum is not None else 1.0 / float(module.num_batches_tracked)
        module.running_mean.mul_(1 - momentum).add_(mean.to(module.running_mean.dtype), alpha=momentum)
        module.running_var.mul_(1 - momentum).add_(unbiased.to(module.running_var.dtype), alpha=momentum)

    def apply(self, region: torch.Tensor) -> torch.Tensor:
        per_image = self.shift.shape[0] if self.shift.dim() == 2 else 1  # batch norm: one per channel for all
        shape = (per_image, -1, *(1,) * (region.dim() - 2))
        mean = self.shift.to(region.dtype).reshape(shape)
        factor = self.factor.to(region.dtype).reshape(shape)
        out = (region - mean) * factor
        bias = getattr(self.module, "bias", None)
        return out + bias.view(1, -1, *(1,) * (region.dim() - 2)) if bias is not None else out


def _expand(values: torch.Tensor, like: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    shape = list(like.shape)
    for dim in dims:
        shape[dim] = 1
    return values.reshape(shape)
