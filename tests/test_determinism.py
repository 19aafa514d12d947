"""--deterministic: deterministic kernels only, so that a GPU run gives the same bits every time
(tests/test_gpu.py checks that on a GPU). Here: the flag sets PyTorch up so, and its models, whose
reflection pads have no deterministic CUDA backward, pad with slices instead and still train."""
from __future__ import annotations

import math
import os

import pytest
import torch

from helpers import batches, first_losses, model
from util.seeding import enable_determinism


@pytest.fixture
def determinism():
    """Turn deterministic mode on for one test, and PyTorch's global settings back afterwards."""
    saved = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic,
             torch.backends.cudnn.benchmark, os.environ.get("CUBLAS_WORKSPACE_CONFIG"))
    enable_determinism()
    yield
    torch.use_deterministic_algorithms(saved[0])
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved[1], saved[2]
    if saved[3] is None:
        os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
    else:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = saved[3]


def test_deterministic_mode_allows_deterministic_kernels_only(determinism):
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"  # cuBLAS's deterministic workspace setting


def reflection_pads(m) -> list[torch.nn.Module]:
    return [layer for net in m.named_networks().values() for layer in net.modules()
            if isinstance(layer, torch.nn.ReflectionPad2d)]


@pytest.mark.parametrize("model_name", ["cycle_gan", "pix2pix"])
def test_deterministic_models_pad_with_slices_and_train(model_name, determinism):
    m = model("--deterministic", model_name=model_name)
    pads = reflection_pads(m)
    assert pads and all(pad.sliced for pad in pads)
    assert all(math.isfinite(loss) for step in first_losses(m, batches()) for loss in step)
    # the next run in the same process, without the flag, pads with the native kernel: the choice
    # is the run's options', built into its networks, not a setting of the process
    assert not any(pad.sliced for pad in reflection_pads(model(model_name=model_name)))
