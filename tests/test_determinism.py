"""--deterministic: deterministic kernels only, so that a GPU run gives the same bits every time
(tests/test_gpu.py checks that on a GPU). Here: the flag sets PyTorch up so, and its models, whose
reflection and replication pads have no deterministic CUDA backward, pad with slices instead and
still train."""
from __future__ import annotations

import math
import os

import pytest
import torch

from models import create_model
from models.networks import SlicedReflectionPad2d, SlicedReplicationPad2d
from options.train_options import TrainOptions
from test_fast_path import batches, first_losses, model
from util.distributed import DistContext
from util.seeding import enable_determinism, seed_everything


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


@pytest.mark.parametrize("model_name", ["cycle_gan", "pix2pix"])
def test_deterministic_models_pad_with_slices_and_train(model_name, determinism):
    m = model("--deterministic", model_name=model_name)
    pads = [type(layer) for net in m.named_networks().values() for layer in net.modules()
            if isinstance(layer, torch.nn.ReflectionPad2d)]
    assert pads and set(pads) == {SlicedReflectionPad2d}
    assert all(math.isfinite(loss) for step in first_losses(m, batches()) for loss in step)


def test_deterministic_cut_pads_its_antialiased_sampling_with_slices_and_trains(determinism):
    """CUT's generator blurs as it down- and upsamples, padding by reflection and by replication."""
    opt = TrainOptions().parse(["--dataroot", "unused", "--model", "cut", "--ngf", "8", "--ndf", "8", "--netF_nc", "8",
                                "--num_patches", "16", "--deterministic"])
    seed_everything(0)
    m = create_model(opt, DistContext())
    m.setup(opt, first_batch=batches()[0])
    pads = {type(layer) for net in m.named_networks().values() for layer in net.modules()
            if isinstance(layer, (torch.nn.ReflectionPad2d, torch.nn.ReplicationPad2d))}
    assert pads == {SlicedReflectionPad2d, SlicedReplicationPad2d}
    assert all(math.isfinite(loss) for step in first_losses(m, batches()) for loss in step)


@pytest.mark.parametrize("padding,size", [(1, (8, 9)), ((1, 2, 0, 3), (5, 6)), ((2, 0, 3, 1), (1, 4))])
def test_the_sliced_replication_pad_equals_replication_pad_in_output_and_gradient(padding, size):
    x = torch.randn(2, 3, *size, dtype=torch.float64, requires_grad=True)
    expected = torch.nn.ReplicationPad2d(padding)(x)
    got = SlicedReplicationPad2d(padding)(x)
    assert torch.equal(got, expected)
    upstream = torch.randn_like(expected)
    (expected_grad,) = torch.autograd.grad(expected, x, upstream)
    (got_grad,) = torch.autograd.grad(got, x, upstream)
    assert torch.allclose(got_grad, expected_grad, rtol=1e-12, atol=1e-12)
