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
import sys
from pathlib import Path
from types import ModuleType

import pytest

from conftest import ROOT, free_port, load_script, ranks, run_in_process, torchrun
from helpers import NEVER, PLAIN, assert_a_failing_rank_ends_every_rank_quickly, cycle_gan_args, ok, pix2pix_args
from helpers_weights import assert_trained_alike
from processes import ScriptProcess

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def train() -> ModuleType:
    return load_script("train.py")


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


def test_distributed_test_output_equals_single_process_output(pix2pix_runs, paired_root, tmp_path, capsys):
    # the model: the one-process pix2pix run with batch norm
    common = ["--dataroot", str(paired_root), "--name", "one", "--checkpoints_dir", str(pix2pix_runs),
              "--model", "pix2pix", "--netG", "resnet_6blocks", "--no_dropout", "--norm", "batch",
              "--load_size", "32", "--crop_size", "32", "--ngf", "8", "--ndf", "8",
              "--results_layout", "original"]  # also images/<visual>/<image>.png: folders both ranks write into
    ok(run_in_process("test.py", *common, "--results_dir", str(tmp_path / "one"), capsys=capsys))
    ok(ranks("test.py", *common, "--results_dir", str(tmp_path / "two")))
    one = tmp_path / "one" / "one" / "test_latest"
    two = tmp_path / "two" / "one" / "test_latest"
    names = sorted(p.relative_to(one / "images").as_posix() for p in (one / "images").rglob("*.png"))
    assert names == sorted(p.relative_to(two / "images").as_posix() for p in (two / "images").rglob("*.png"))
    assert len(names) == 2 * 4 * 3  # ours and the originals' layout, 3 visuals of 4 images each
    for name in names:
        assert (one / "images" / name).read_bytes() == (two / "images" / name).read_bytes(), name
    page_one, page_two = (one / "index.html").read_text(), (two / "index.html").read_text()
    assert page_one == page_two
    # the metrics gather the images of both processes (util.evaluation.metrics): the same numbers as one process
    metrics_one, metrics_two = (json.loads((run / "metrics.json").read_text()) for run in (one, two))
    assert metrics_one.keys() == metrics_two.keys() and metrics_one["images"] == 4
    assert all(abs(metrics_one[key] - metrics_two[key]) <= 1e-6 for key in metrics_one)
    for name in names:  # the page shows our files
        assert page_two.count(f'src="images/{name}"') == ("/" not in name)


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
