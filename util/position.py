"""Where a training run stands, in the terms every part of the loop (saving, logging, resuming) uses."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Position:
    """`images_done` images of `epoch` are done, `total_iters` since the run began (counted over all
    processes, as the reference's total_iters)."""

    epoch: int
    images_done: int = 0
    total_iters: int = 0
