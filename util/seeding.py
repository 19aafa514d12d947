"""Seeding every random generator that affects training, and making GPU arithmetic reproducible."""
from __future__ import annotations

import os
import random

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU and all CUDA devices)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def enable_determinism() -> None:
    """Make every kernel deterministic, so that the same run gives the same bits on a GPU too.

    Call before the first CUDA operation: cuBLAS reads CUBLAS_WORKSPACE_CONFIG when it starts.
    An operation without a deterministic kernel then raises instead of running (reflection
    padding's CUDA backward is one: models built with --deterministic pad with slices instead).
    """
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS reductions
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False  # autotuning may pick different kernels run to run
