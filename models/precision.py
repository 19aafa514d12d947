"""The arithmetic a model runs in: its weights' dtype (--dtype), their memory format (--channels_last)
and the autocast of its forward passes (--amp). Read from the options, the same for training and
inference."""
from __future__ import annotations

import argparse

import torch

import data
from util.errors import UserError

AMP_DTYPES = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def weight_dtype(opt: argparse.Namespace) -> torch.dtype:
    """--dtype: float32, or float64 (the tests that compare processes exactly)."""
    return getattr(torch, opt.dtype)


def memory_format(opt: argparse.Namespace) -> torch.memory_format:
    """--channels_last: channels-last for pictures, channels-last 3-D for volumes (the same layout
    idea, one axis more); contiguous otherwise."""
    if not opt.channels_last:
        return torch.contiguous_format
    return torch.channels_last_3d if data.spatial_dims(opt) == 3 else torch.channels_last


def check_amp(opt: argparse.Namespace, device: torch.device) -> None:
    """A UserError for an --amp the device cannot run."""
    if opt.amp == "fp16" and device.type != "cuda":
        raise UserError("--amp fp16 needs a CUDA GPU (on the CPU, float16 arithmetic is slow and "
                        "unsupported by many kernels); use --amp bf16 on the CPU.")


def autocast(device: torch.device, amp: str) -> torch.autocast:
    """The context in which forward passes and losses run: bf16/fp16 autocast with --amp, else nothing."""
    amp_dtype = AMP_DTYPES[amp]
    return torch.autocast(device.type, dtype=amp_dtype or torch.bfloat16, enabled=amp_dtype is not None)
