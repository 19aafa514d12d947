"""Latent codes for generators with many answers per input (a family's `latent_size` > 0): drawn
reproducibly from a seed, or given and checked. The Translator and test.py --n_samples draw them
the same way, so the same seed gives the same outputs in both."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from util.errors import UserError
from util.flag_types import MAX_SAMPLES


def draw_latent_codes(count: int, size: int, seed: int) -> torch.Tensor:
    """`count` x `size` codes (float64) from a standard normal distribution seeded by `seed`; `count` from 1 to
    `MAX_SAMPLES` (a UserError otherwise, before anything is allocated)."""
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_SAMPLES:
        raise UserError(f"n_samples {count!r}: pass a whole number of samples from 1 to {MAX_SAMPLES}.")
    return torch.randn(count, size, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def checked_latent_codes(codes: Any, size: int) -> torch.Tensor:
    """`codes` (N x `size` numbers, or one code of `size`) as an N x `size` float64 tensor; a UserError
    for any other shape or a value that is not finite."""
    try:
        chosen = torch.as_tensor(np.asarray(codes, dtype=np.float64))
    except (TypeError, ValueError):
        raise UserError(f"codes {codes!r}: pass N x {size} numbers.") from None
    if chosen.ndim == 1:
        chosen = chosen[None]
    if chosen.ndim != 2 or chosen.shape[1] != size or len(chosen) == 0 or not torch.isfinite(chosen).all():
        raise UserError(f"codes of shape {tuple(chosen.shape)}: the generator takes codes of {size} finite numbers; "
                        f"pass N x {size} values.")
    if len(chosen) > MAX_SAMPLES:
        raise UserError(f"{len(chosen)} codes: one answer is written per code and input, at most {MAX_SAMPLES}; "
                        f"pass fewer.")
    return chosen
