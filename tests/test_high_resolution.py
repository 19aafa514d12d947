"""High resolution (docs/high_resolution.md): gradient accumulation equals a larger batch, in one
process and under torchrun; the multi-scale discriminator and feature matching train, save, resume,
validate and count their FLOPs; activation checkpointing leaves the gradients unchanged.

Tiny networks (--ngf 4 --ndf 4) on the 32 px demo images, float64 where runs are compared (as in
tests/test_distributed.py), trained in this process through train.main and shared by the tests of
the module; one torchrun run, where DDP itself is what is proven.
"""
from __future__ import annotations

import copy
import re
import shutil
from pathlib import Path

import pytest
import torch

from conftest import load_script, torchrun
from test_distributed import assert_same_weights, ok, weights

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]

TINY = ["--ngf", "4", "--ndf", "4", "--display_id", "0", "--num_threads", "0", "--seed", "0", "--no_html",
        "--no_progress", "--load_size", "32", "--crop_size", "32", "--n_epochs", "1", "--n_epochs_decay", "1"]
# Deterministic order and arithmetic, as the DDP equivalence tests; the pool draws at random (seeded).
EQUIVALENCE = ["--dtype", "float64", "--serial_batches", "--no_flip", "--print_freq", "4"]
CYCLE_GAN = ["--model", "cycle_gan", "--pool_size", "3"]
PIX2PIX = ["--model", "pix2pix", "--netG", "resnet_6blocks", "--norm", "instance", "--no_dropout"]
# A training state after every optimizer step of 4 images, to continue from one between steps.
SAVES = ["--save_by_iter", "--save_latest_freq", "4"]


@pytest.fixture(scope="module")
def train():
    return load_script("train.py")


def args(root: Path, ckpt: Path, name: str, *extra: str) -> list[str]:
    return ["--dataroot", str(root), "--checkpoints_dir", str(ckpt), "--name", name, *TINY, *extra]


@pytest.fixture(scope="module")
def runs(train, paired_root, unpaired_root, tmp_path_factory) -> Path:
    """Each model with batch 4, and with 2 micro-batches of 2 (2 epochs of 8 images, float64);
    pix2pix also with --checkpoint_activations."""
    ckpt = tmp_path_factory.mktemp("hires")
    plans = {"cycle_gan_batch4": (unpaired_root, CYCLE_GAN, ["--batch_size", "4"]),
             "cycle_gan_accum": (unpaired_root, CYCLE_GAN, ["--batch_size", "2", "--accum_steps", "2", *SAVES]),
             "pix2pix_batch4": (paired_root, PIX2PIX, ["--batch_size", "4"]),
             "pix2pix_accum": (paired_root, PIX2PIX, ["--batch_size", "2", "--accum_steps", "2"]),
             "pix2pix_checkpointed": (paired_root, PIX2PIX, ["--batch_size", "4", "--checkpoint_activations"])}
    for name, (root, model, extra) in plans.items():
        assert train.main(args(root, ckpt, name, *model, *EQUIVALENCE, *extra)) == 0, name
    return ckpt


def logged(run_dir: Path) -> tuple[list[str], list[str]]:
    """(the losses of each logged step, the learning rate of each epoch) from the run's logs."""
    lines = (run_dir / "loss_log.txt").read_text().splitlines()
    losses = [line.split(")", 1)[1] for line in lines if line.startswith("(epoch")]
    return losses, re.findall(r"learning rate [\d.]+ -> [\d.]+", (run_dir / "loss_log.txt").read_text())


# ----------------------------------------------------------------------------- --accum_steps
@pytest.mark.parametrize("model", ["cycle_gan", "pix2pix"])
def test_two_micro_batches_of_two_train_the_weights_of_one_batch_of_four(runs, model):
    # cycle_gan: the image pool sees the fakes in the order of the batch of 4; pix2pix: D steps on
    # the gradients of both micro-batches before G's loss judges with it
    assert_same_weights(weights(runs / f"{model}_batch4"), weights(runs / f"{model}_accum"))
    losses, rates = logged(runs / f"{model}_accum")
    assert (losses, rates) == logged(runs / f"{model}_batch4")  # means over the micro-batches; one schedule
    assert len(losses) == 4 and rates and rates[-1] != rates[0]  # 2 steps per epoch logged; the rate decayed


def test_the_log_states_micro_batch_accumulation_processes_and_global_batch(runs):
    log = (runs / "cycle_gan_accum" / "loss_log.txt").read_text()
    assert "global batch = 4 (2 per micro-batch x 2 accumulation steps x 1 processes" in log
    assert "global batch = 4 (4 per process x 1 processes)" in (runs / "cycle_gan_batch4" / "loss_log.txt").read_text()


def test_an_accumulating_run_continued_between_optimizer_steps_ends_identical(train, runs, unpaired_root, tmp_path):
    """Checkpoints are written between optimizer steps only (never with half the micro-batches of a
    step applied): the state after the first step of 4 images continues to the same weights."""
    run_dir = tmp_path / "cycle_gan_accum"
    shutil.copytree(runs / "cycle_gan_accum", run_dir)
    for state in run_dir.glob("*_train_state.pth"):
        if state.name != "iter_4_train_state.pth":
            state.unlink()
    assert train.main(args(unpaired_root, tmp_path, "cycle_gan_accum", *CYCLE_GAN, *EQUIVALENCE, "--batch_size",
                           "2", "--accum_steps", "2", *SAVES, "--continue_train")) == 0
    resumed = (run_dir / "loss_log.txt").read_text().split("================ Training Loss")[-1]
    assert "(epoch: 1, iters: 8," in resumed and "(epoch: 1, iters: 4," not in resumed
    assert_same_weights(weights(runs / "cycle_gan_accum"), weights(run_dir), rtol=0, atol=0)


def test_two_processes_accumulating_two_micro_batches_equal_one_process_with_batch_four(runs, unpaired_root, tmp_path):
    """2 processes x 2 micro-batches of 1 (every micro-batch but the last in no_sync): the image
    pool, gathered over the ranks, sees the global batch in the same order."""
    ok(torchrun("train.py", *args(unpaired_root, tmp_path, "ddp", *CYCLE_GAN, *EQUIVALENCE, "--batch_size", "1",
                                  "--accum_steps", "2")))
    assert_same_weights(weights(runs / "cycle_gan_batch4"), weights(tmp_path / "ddp"))
    assert "global batch = 4 (1 per micro-batch x 2 accumulation steps x 2 processes" in \
        (tmp_path / "ddp" / "loss_log.txt").read_text()


def test_no_gradient_sync_keeps_ddp_gradients_local_until_the_block_ends(tmp_path):
    from util import distributed

    torch.distributed.init_process_group("gloo", store=torch.distributed.FileStore(str(tmp_path / "store"), 1),
                                         rank=0, world_size=1)
    try:
        wrapped = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2))
        plain = torch.nn.Linear(2, 2)
        with distributed.no_gradient_sync([wrapped, plain]):
            assert not wrapped.require_backward_grad_sync  # DDP's no_sync: no all-reduce in backward
        assert wrapped.require_backward_grad_sync
    finally:
        torch.distributed.destroy_process_group()


# ----------------------------------------------------------------------------- --checkpoint_activations
@pytest.mark.parametrize("netG, norm", [("resnet_6blocks", "instance"), ("unet_128", "batch")])
def test_checkpointed_generators_give_the_same_outputs_gradients_and_statistics(netG, norm):
    """Dropout on, batch norm in training mode: the recomputation replays the random draws and
    leaves the running statistics as one pass does. Tolerance: 1e-12 in float64 (found equal)."""
    from models import networks
    from models.activation_checkpointing import enable_activation_checkpointing

    torch.manual_seed(0)
    plain = networks.define_G(3, 3, 4, netG, norm, use_dropout=True).double()
    checkpointed = copy.deepcopy(plain)
    assert enable_activation_checkpointing(checkpointed) == 6  # 6 residual blocks; 6 levels below the outermost
    x = torch.randn(2, 3, 128, 128, dtype=torch.float64)
    results = []
    for net in (plain, checkpointed):
        torch.manual_seed(1)
        out = net(x)
        (out ** 2).mean().backward()
        results.append((out, [p.grad for p in net.parameters()], list(net.buffers())))
    (out_a, grads_a, buffers_a), (out_b, grads_b, buffers_b) = results
    assert torch.allclose(out_a, out_b, rtol=0, atol=1e-12)
    assert all(torch.allclose(a, b, rtol=0, atol=1e-12) for a, b in zip(grads_a, grads_b))
    assert all(torch.equal(a, b) for a, b in zip(buffers_a, buffers_b))
    assert plain.state_dict().keys() == checkpointed.state_dict().keys()


def test_a_run_with_checkpointed_activations_trains_the_same_weights(runs):
    assert_same_weights(weights(runs / "pix2pix_batch4"), weights(runs / "pix2pix_checkpointed"), rtol=0, atol=1e-12)
