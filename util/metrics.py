"""Per-image quality measures between an output and its target (images in [-1, 1])."""
from __future__ import annotations

import math

import torch


def l1_distance(output: torch.Tensor, target: torch.Tensor) -> float:
    """Mean absolute difference, in the [-1, 1] scale of the network (0 = identical, 2 = max)."""
    return (output.float() - target.float()).abs().mean().item()


def psnr(output: torch.Tensor, target: torch.Tensor) -> float:
    """Peak signal-to-noise ratio in dB of 8-bit images (inf when identical)."""
    to_uint8 = lambda x: torch.round((x.float().clamp(-1, 1) + 1) * 127.5)  # noqa: E731
    mse = (to_uint8(output) - to_uint8(target)).pow(2).mean().item()
    return math.inf if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


class MetricAverager:
    """Averages of named per-image measures over a test set."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}
        self.count = 0

    def add_pair(self, prefix: str, output: torch.Tensor, target: torch.Tensor) -> None:
        self.totals[f"{prefix}_L1"] = self.totals.get(f"{prefix}_L1", 0.0) + l1_distance(output, target)
        self.totals[f"{prefix}_PSNR"] = self.totals.get(f"{prefix}_PSNR", 0.0) + min(psnr(output, target), 100.0)

    def means(self) -> dict[str, float]:
        return {k: v / max(self.count, 1) for k, v in self.totals.items()}
