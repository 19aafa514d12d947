"""DistributedDataParallel, for real: 2 processes and the gloo backend on the CPU.

The central promise: N processes x batch b train the same model as 1 process x batch N*b. The
one-process references are trained in this process through train.main (a process of their own
would prove nothing), on one thread as every torchrun worker; one run serves every check it can.
The 2-process runs that only have to be N processes are started as torchrun's workers would be,
without the launcher (conftest.ranks); torchrun itself runs where it is the point: two nodes meeting
at its rendezvous, and a failing rank that its agent must end the others for.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
from torch import nn

from conftest import FAST_FLAGS, ROOT, free_port, load_script, ranks, run_in_process, torchrun
from models import create_model
from processes import ScriptProcess
from util.distributed import DistContext
from util.frozen_options import FrozenOptions

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def train() -> ModuleType:
    return load_script("train.py")


def ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    # a worker killed by a signal prints where each thread was (faulthandler) before the module list: keep that part
    fatal = result.stderr.find("Fatal Python error")
    crash = f"\nCRASH:\n{result.stderr[fatal:fatal + 4000]}" if fatal >= 0 else ""
    assert result.returncode == 0, \
        f"exit {result.returncode}\nSTDOUT:\n{result.stdout[-3000:]}\nSTDERR:\n{result.stderr[-5000:]}{crash}"
    return result


def weights(run_dir: Path, epoch: str = "latest") -> dict[str, dict[str, torch.Tensor]]:
    return {path.name: torch.load(path, weights_only=True) for path in sorted(run_dir.glob(f"{epoch}_net_*.pth"))}


def assert_same_weights(a: dict, b: dict, rtol: float = 1e-6, atol: float = 1e-7, bounds: dict | None = None) -> None:
    """Every value of the checkpoints `a` and `b` (file -> state dict) within rtol/atol, but those that
    `bounds` (file -> {key: largest difference allowed}) bounds otherwise; integers equal."""
    assert a.keys() == b.keys() and a
    for net in a:
        assert a[net].keys() == b[net].keys(), net
        for key, value in a[net].items():
            if not value.is_floating_point():
                assert torch.equal(value, b[net][key]), f"{net} {key}"
                continue
            difference = (value - b[net][key]).abs().max().item()
            bound = (bounds or {}).get(net, {}).get(key)
            if bound is not None:
                assert value.isfinite().all() and difference <= bound, \
                    f"{net} {key}: differs by {difference:.3g} > {bound:.3g}"
            else:
                assert torch.allclose(value, b[net][key], rtol=rtol, atol=atol), \
                    f"{net} {key}: max diff {difference:.3g}"


# ----------------------------------------------------------------------------- runs whose arithmetic differs
# N processes and one, or micro-batches and one batch, compute the same sums in another order: in
# float64 (--dtype float64; unit roundoff 1.1e-16) their gradients differ by rounding, ~1e-16 of their
# size. Adam turns a gradient into a step of at most c * lr (adam_reach), a smooth function of the
# gradient where the gradient stands above its rounding, so such weights end alike in both runs: to
# 1e-12 and less in CycleGAN, pix2pix, CUT, BicycleGAN and the volumes, up to 2e-10 in the latent-code
# model of tests/test_latent_model.py (measured on a Zen 4 with AVX-512 and with AVX2 forced; a float32
# run would differ by ~1e-7). rtol 1e-6 / atol 1e-7 leave a margin of 500 over the worst, while a DDP that computed
# another gradient in even one step moves some weight by a sizeable fraction of lr (2e-4). But where the
# gradient is zero in exact arithmetic, rounding is all there is, and Adam, which divides by the
# gradient's own size, turns it into steps of up to c * lr in either run (measured: 1e-8 to 1.3e-7 apart
# on biases ~1e-7): a value the arithmetic does not determine, so it is bounded only by how far Adam can
# move it. A convolution's bias followed by an instance norm is such a value: the norm subtracts each
# channel's mean over the image, which removes any constant the bias adds, so the bias changes no output.
CONVOLUTIONS = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
INSTANCE_NORMS = (nn.InstanceNorm1d, nn.InstanceNorm2d, nn.InstanceNorm3d)


def biases_cancelled_by_instance_norm(net: nn.Module) -> set[str]:
    """The state-dict keys of `net`'s convolution biases whose output goes straight into an instance norm
    without running statistics: one after the other in an nn.Sequential, either of them possibly at the
    end or the start of a nested one (--upsample resize ends a block with its convolution), found in the
    built network, whatever the family. (A convolution whose output is also read before its norm, as
    CUT's NCE layers read model.4 and model.8 of its generator, is counted too: that only loosens the
    check of its bias.)"""
    def last(module: nn.Module) -> nn.Module:
        return last(module[-1]) if isinstance(module, nn.Sequential) and len(module) else module

    def first(module: nn.Module) -> nn.Module:
        return first(module[0]) if isinstance(module, nn.Sequential) and len(module) else module

    names = {module: name for name, module in net.named_modules()}
    found = set()
    for sequence in (module for module in net.modules() if isinstance(module, nn.Sequential)):
        for before, after in zip(sequence, list(sequence)[1:]):
            conv, norm = last(before), first(after)
            if isinstance(conv, CONVOLUTIONS) and conv.bias is not None and \
                    isinstance(norm, INSTANCE_NORMS) and not norm.track_running_stats:
                found.add(f"{names[conv]}.bias")
    return found


def adam_reach(run_dir: Path) -> float:
    """How far Adam can have moved any weight of the run in `run_dir` from where it started: its steps x
    its initial lr x c, c = max(1, (1 - beta1) / sqrt(1 - beta2)), the bound on one step's update of
    Kingma & Ba (2015, section 2.1); from the optimizers' states in its training state (the schedules
    only lower the lr)."""
    state = torch.load(run_dir / "latest_train_state.pth", weights_only=True)
    reach = 0.0
    for optimizer in state["model"]["optimizers"]:
        steps = max((float(param["step"]) for param in optimizer["state"].values()), default=0.0)
        for group in optimizer["param_groups"]:
            beta1, beta2 = group["betas"]
            one_step = group.get("initial_lr", group["lr"]) * max(1.0, (1 - beta1) / (1 - beta2) ** 0.5)
            reach = max(reach, steps * one_step)
    return reach


def assert_trained_alike(run_one: Path, run_two: Path, epoch: str = "latest") -> None:
    """The `epoch` checkpoints of two float64 runs of one model whose arithmetic differs only in the order
    of its sums (see above) hold the same weights: rtol 1e-6 / atol 1e-7, but the biases an instance
    norm cancels, which differ by no more than Adam can have moved them in both runs together."""
    opt = FrozenOptions(**json.loads((run_one / "train_opt.json").read_text())).freeze()
    assert opt.dtype == "float64", "the tolerances are float64's"
    networks = create_model(opt, DistContext()).named_networks()  # built, untrained, to see their layers
    reach = adam_reach(run_one) + adam_reach(run_two)
    a, b = weights(run_one, epoch), weights(run_two, epoch)
    # a network built only from the first batch (CUT's F) is not there yet: all its values are compared
    built = {file: networks.get(file.split("_net_")[-1].removesuffix(".pth")) for file in a}
    bounds = {file: dict.fromkeys(biases_cancelled_by_instance_norm(net) if net else (), reach)
              for file, net in built.items()}
    assert_same_weights(a, b, bounds=bounds)


# float64: the tolerances of assert_trained_alike are float64's.
EQUIVALENCE = ["--dtype", "float64", "--n_epochs", "1", "--n_epochs_decay", "1", "--load_size", "32",
               "--crop_size", "32", "--print_freq", "2", "--save_epoch_freq", "1"]
# Deterministic data order and no randomness in the losses: the plainest case.
PLAIN = ["--serial_batches", "--no_flip", "--pool_size", "0"]


def cycle_gan_args(root: Path, ckpt: Path, name: str, batch: int, *variant: str) -> list[str]:
    return ["--dataroot", str(root), "--name", name, "--checkpoints_dir", str(ckpt), "--model", "cycle_gan",
            "--batch_size", str(batch), *EQUIVALENCE, *(variant or PLAIN), *FAST_FLAGS]


def pix2pix_args(root: Path, ckpt: Path, name: str, batch: int, norm: str) -> list[str]:
    return ["--dataroot", str(root), "--name", name, "--checkpoints_dir", str(ckpt), "--model", "pix2pix",
            "--netG", "resnet_6blocks", "--no_dropout", "--norm", norm, "--batch_size", str(batch),
            *EQUIVALENCE, *PLAIN, *FAST_FLAGS]


@pytest.fixture(scope="module")
def one_process_cycle_gan(train, unpaired_root, tmp_path_factory) -> Path:
    """The one-process CycleGAN run (batch 2) that the two-node run below must equal (the plainest case:
    no randomness in the data or the losses; RANDOM_VARIANTS below add it, on one node)."""
    ckpt = tmp_path_factory.mktemp("one_process")
    assert train.main(cycle_gan_args(unpaired_root, ckpt, "one", 2)) == 0
    return ckpt / "one"


# Randomness that must not depend on how the global batch is split: the shuffle, flips and crops
# (drawn per sample), CycleGAN's image pool (one pool for all ranks, util/image_pool.py) and the
# interpolation weights of the WGAN-GP gradient penalty (rank 0's draws, shared).
# (flags, batch per process); with 2 images per process the ranks' images interleave in the global
# batch (rank 0 has its images 0 and 2), which the pool must follow.
RANDOM_VARIANTS = {
    "image_pool_and_shuffled_data": (["--pool_size", "3", "--load_size", "36"], 2),
    # The penalty is differentiated twice, which leaves the most rounding (see assert_trained_alike);
    # interpolation weights drawn per process would move the weights by ~2e-3.
    "wgangp_gradient_penalty": (["--gan_mode", "wgangp", *PLAIN], 1),
}


@pytest.mark.parametrize("variant", RANDOM_VARIANTS, ids=list(RANDOM_VARIANTS))
def test_two_processes_equal_one_with_double_batch_whatever_is_drawn_at_random(variant, train, unpaired_root,
                                                                              tmp_path):
    flags, batch = RANDOM_VARIANTS[variant]
    assert train.main(cycle_gan_args(unpaired_root, tmp_path, "one", 2 * batch, *flags)) == 0
    ok(ranks("train.py", *cycle_gan_args(unpaired_root, tmp_path, "two", batch, *flags)))
    assert_trained_alike(tmp_path / "one", tmp_path / "two")


@pytest.fixture(scope="module")
def pix2pix_runs(train, paired_root, tmp_path_factory) -> Path:
    """pix2pix with batch norm in one process with batch 2 (<folder>/one) and with synchronised
    batch norm in two processes with batch 1 each (<folder>/two)."""
    ckpt = tmp_path_factory.mktemp("pix2pix")
    assert train.main(pix2pix_args(paired_root, ckpt, "one", 2, "batch")) == 0
    ok(ranks("train.py", *pix2pix_args(paired_root, ckpt, "two", 1, "syncbatch")))
    return ckpt


def test_synchronised_batch_norm_on_cpu_matches_batch_norm_of_the_whole_batch(pix2pix_runs):
    # running statistics included: every rank saw the statistics of the whole global batch
    assert_trained_alike(pix2pix_runs / "one", pix2pix_runs / "two")


def test_logged_losses_are_averaged_over_all_ranks(pix2pix_runs):
    def loss_lines(name: str) -> list[str]:
        lines = (pix2pix_runs / name / "loss_log.txt").read_text().splitlines()
        return [line.split(")", 1)[1] for line in lines if line.startswith("(epoch")]

    assert loss_lines("one") == loss_lines("two")


# A rank left waiting for a peer that has stopped would wait --ddp_timeout seconds. The tests below
# set it far beyond the runs' own time limit, so a run that ends at all ended without waiting.
NEVER = ["--ddp_timeout", "3600"]


def test_batch_norm_under_ddp_is_refused_with_advice_on_every_rank(paired_root, tmp_path):
    # Under torchrun for real: the one copy of the message relies on the launcher ending the other ranks
    # as soon as rank 0 exits with it (util/distributed.report_user_error).
    result = torchrun("train.py", *pix2pix_args(paired_root, tmp_path, "bn", 1, "batch"), *NEVER)
    assert result.returncode != 0
    assert "--norm syncbatch" in result.stderr and "--norm instance" in result.stderr
    assert result.stderr.count("error: --norm batch") == 1
    assert "Traceback" not in result.stderr.split("error: --norm batch")[0]
    assert not list((tmp_path / "bn").glob("*.pth"))


def test_two_nodes_on_one_machine_train_the_same_model(one_process_cycle_gan, unpaired_root, tmp_path):
    port = free_port()
    rendezvous = ["--nnodes=2", "--nproc_per_node=1", "--rdzv_backend=c10d",
                  f"--rdzv_endpoint=127.0.0.1:{port}", "--rdzv_id=two_nodes_test"]
    command = [sys.executable, "-m", "torch.distributed.run", *rendezvous, str(ROOT / "train.py"),
               *cycle_gan_args(unpaired_root, tmp_path, "nodes", 1)]
    # One process per "node": torchrun leaves their thread count alone (it sets OMP_NUM_THREADS=1
    # only for several per node), and two 2-thread processes on 2 cores wait for each other's
    # cores at every parallel region (60 s instead of 15).
    one_thread = {**os.environ, "OMP_NUM_THREADS": "1"}
    agents = [ScriptProcess(command, ROOT, one_thread, merge_stderr=True) for _ in range(2)]
    try:
        outputs = [agent.communicate(timeout=240)[0] for agent in agents]
    finally:
        for agent in agents:
            agent.kill()
    assert all(agent.returncode == 0 for agent in agents), "\n".join(o[-3000:] for o in outputs)
    for epoch in ("1", "2", "latest"):
        assert_trained_alike(one_process_cycle_gan, tmp_path / "nodes", epoch)
    # one set of outputs, written once (by rank 0, whichever node it is on), and the log states the global batch
    assert sorted(p.name for p in (tmp_path / "nodes").glob("latest_net_*.pth")) == \
        ["latest_net_D_A.pth", "latest_net_D_B.pth", "latest_net_G_A.pth", "latest_net_G_B.pth"]
    log = (tmp_path / "nodes" / "loss_log.txt").read_text()
    assert log.count("================ Training Loss") == 1
    assert "global batch = 2 (1 per process x 2 processes)" in log
    assert "".join(outputs).count("saving the model at the end of epoch 2") == 1


def test_a_failing_rank_ends_every_rank_quickly_and_names_the_bad_file(unpaired_root, tmp_path):
    assert_a_failing_rank_ends_every_rank_quickly(unpaired_root, tmp_path)


def assert_a_failing_rank_ends_every_rank_quickly(unpaired_root: Path, tmp_path: Path, *flags: str) -> None:
    """2 processes (with `flags`) under a real torchrun, where only rank 1 meets a broken image: its
    agent ends all without waiting for --ddp_timeout (NEVER: beyond torchrun()'s limit), and the error
    names the file once."""
    root = tmp_path / "data"
    shutil.copytree(unpaired_root, root)
    # With --serial_batches rank 1 reads the odd indices: only it meets the broken image.
    victims = sorted((root / "trainA").glob("*.png"))
    # cut short: its header still reads, so only the rank that decodes it fails, mid-epoch
    data = victims[3].read_bytes()
    victims[3].write_bytes(data[: len(data) // 2])
    result = torchrun("train.py", *cycle_gan_args(root, tmp_path, "crash", 1), *NEVER, *flags)
    assert result.returncode != 0
    assert str(victims[3]) in result.stderr
    assert result.stderr.count(f"cannot read image {victims[3]}") == 1


def test_distributed_test_output_equals_single_process_output(pix2pix_runs, paired_root, tmp_path, capsys):
    # the model: the one-process pix2pix run with batch norm
    common = ["--dataroot", str(paired_root), "--name", "one", "--checkpoints_dir", str(pix2pix_runs),
              "--model", "pix2pix", "--netG", "resnet_6blocks", "--no_dropout", "--norm", "batch",
              "--load_size", "32", "--crop_size", "32", "--ngf", "8", "--ndf", "8"]
    ok(run_in_process("test.py", *common, "--results_dir", str(tmp_path / "one"), capsys=capsys))
    ok(ranks("test.py", *common, "--results_dir", str(tmp_path / "two")))
    one = tmp_path / "one" / "one" / "test_latest"
    two = tmp_path / "two" / "one" / "test_latest"
    names = sorted(p.name for p in (one / "images").iterdir())
    assert names == sorted(p.name for p in (two / "images").iterdir()) and len(names) == 4 * 3
    for name in names:
        assert (one / "images" / name).read_bytes() == (two / "images" / name).read_bytes(), name
    page_one, page_two = (one / "index.html").read_text(), (two / "index.html").read_text()
    assert page_one == page_two
    # the metrics gather the images of both processes (util.evaluation.metrics): the same numbers as one process
    metrics_one, metrics_two = (json.loads((run / "metrics.json").read_text()) for run in (one, two))
    assert metrics_one.keys() == metrics_two.keys() and metrics_one["images"] == 4
    assert all(abs(metrics_one[key] - metrics_two[key]) <= 1e-6 for key in metrics_one)
    for name in names:
        assert page_two.count(f'src="images/{name}"') == 1


def test_replicas_that_drift_apart_are_caught_at_the_next_checkpoint(tmp_path):
    script = tmp_path / "drift.py"
    script.write_text(f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
import torch
from util import distributed
ctx = distributed.init_distributed("cpu")
net = torch.nn.Linear(3, 2)
torch.nn.init.constant_(net.weight, 1.0)
torch.nn.init.constant_(net.bias, 0.5)
distributed.check_in_sync("same", net)  # identical replicas pass
with torch.no_grad():
    net.weight[0, 0] += 1e-3 * ctx.rank  # rank 1 drifts
try:
    distributed.check_in_sync("G", net)
except RuntimeError as err:
    print(f"rank {{ctx.rank}} caught: {{err}}")
distributed.shutdown()
""")
    result = ok(ranks(str(script)))
    assert result.stdout.count("caught: network G has different weights on different ranks") == 2
