"""Seeding every random generator that affects training, and choosing GPU kernels: reproducible ones
(--deterministic) or the fastest cuDNN finds for the run's sizes."""
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


# --preprocess values after which every image has the same size (--crop_size): cropping is their last step
FIXED_SIZE_PREPROCESSING = ("resize_and_crop", "crop", "scale_width_and_crop")


def choose_kernels(deterministic: bool, preprocess: str) -> None:
    """--deterministic: deterministic kernels (`enable_determinism`). Otherwise cuDNN's autotuning, as the
    reference turns it on, where every batch has one size (a fixed-size `preprocess`): the first batch of a
    size times cuDNN's convolution algorithms and later ones use the fastest, where its heuristics alone
    picked FFT convolutions and layout changes for the reference's 256 px step. Where sizes vary
    (scale_width, none) each new size would be timed again, so it stays off. No effect on the CPU."""
    if deterministic:
        enable_determinism()
    else:
        torch.backends.cudnn.benchmark = preprocess in FIXED_SIZE_PREPROCESSING
