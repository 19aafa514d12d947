"""A resumed run is the run that was interrupted: same final weights, bit for bit.

Runs are killed for real (SIGKILL, SIGTERM) at iterations chosen by watching loss_log.txt, and
resumed with `--continue_train` (or restarted by torchrun on its own); their final weights are
compared with torch.equal against a run that was never interrupted.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import ROOT, torchrun_command

pytestmark = pytest.mark.slow

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}  # the same arithmetic in every run

# 8 images per epoch, 2 epochs, a checkpoint every 3 images; crops, flips, a small image pool and
# (pix2pix) dropout and batch norm, so that every source of randomness and state is exercised.
COMMON = ["--load_size", "36", "--crop_size", "32", "--n_epochs", "1", "--n_epochs_decay", "1",
          "--print_freq", "1", "--save_latest_freq", "3", "--ngf", "8", "--ndf", "8", "--display_id", "0",
          "--num_threads", "0", "--seed", "7", "--no_html", "--no_progress"]


def cycle_gan(root: Path, ckpt: Path, name: str) -> list[str]:
    return ["--dataroot", str(root), "--checkpoints_dir", str(ckpt), "--name", name, "--model", "cycle_gan",
            "--pool_size", "4", *COMMON]


def pix2pix(root: Path, ckpt: Path, name: str) -> list[str]:
    return ["--dataroot", str(root), "--checkpoints_dir", str(ckpt), "--name", name, "--model", "pix2pix",
            "--netG", "resnet_6blocks", *COMMON]


def train_command(args: list[str], nproc: int = 0, extra: tuple[str, ...] = ()) -> list[str]:
    if nproc:
        return torchrun_command("train.py", *args, nproc=nproc, extra=extra)
    return [sys.executable, str(ROOT / "train.py"), *args]


def run(command: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(command, cwd=ROOT, env={**ENV, **(env or {})}, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    return result


def children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def interrupt_when_logged(command: list[str], log: Path, marker: str, sig: int = signal.SIGKILL,
                          victim: str = "process", env: dict | None = None) -> subprocess.Popen:
    """Start `command`, wait until `marker` appears in `log`, then send `sig` to the process
    (or, with victim="worker", to the last torchrun worker). Returns the finished process."""
    proc = subprocess.Popen(command, cwd=ROOT, env={**ENV, **(env or {})}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 240
    while not (log.exists() and marker in log.read_text()):
        assert proc.poll() is None, f"finished before {marker!r}:\n{proc.stdout.read()[-3000:]}"
        assert time.time() < deadline, f"{marker!r} never logged"
        time.sleep(0.01)
    os.kill(children(proc.pid)[-1] if victim == "worker" else proc.pid, sig)
    proc.output = proc.communicate(timeout=240)[0]
    return proc


def final_weights(run_dir: Path) -> dict[str, dict[str, torch.Tensor]]:
    found = {p.name: torch.load(p, weights_only=True) for p in sorted(run_dir.glob("latest_net_*.pth"))}
    assert found, f"no checkpoints in {run_dir}"
    return found


def assert_identical(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for net in a:
        assert a[net].keys() == b[net].keys()
        for key in a[net]:
            assert torch.equal(a[net][key], b[net][key]), f"{net} {key} differs"


@pytest.fixture(scope="module")
def uninterrupted(unpaired_root, paired_root, tmp_path_factory) -> dict[str, dict]:
    ckpt = tmp_path_factory.mktemp("uninterrupted")
    run(train_command(cycle_gan(unpaired_root, ckpt, "cycle_gan")))
    run(train_command(pix2pix(paired_root, ckpt, "pix2pix")))
    return {name: final_weights(ckpt / name) for name in ("cycle_gan", "pix2pix")}


# "(epoch: E, iters: I," is logged after the step that completes image I of epoch E.
KILL_POINTS = ["(epoch: 1, iters: 4,", "(epoch: 2, iters: 1,", "(epoch: 2, iters: 7,"]


@pytest.mark.parametrize("kill_at", KILL_POINTS)
@pytest.mark.parametrize("model", ["cycle_gan", "pix2pix"])
def test_run_killed_and_continued_ends_with_bit_identical_weights(model, kill_at, uninterrupted, unpaired_root,
                                                                   paired_root, tmp_path):
    args = cycle_gan(unpaired_root, tmp_path, model) if model == "cycle_gan" else pix2pix(paired_root, tmp_path, model)
    killed = interrupt_when_logged(train_command(args), tmp_path / model / "loss_log.txt", kill_at)
    assert killed.returncode == -signal.SIGKILL
    resumed = run(train_command(args + ["--continue_train"]))
    assert "resuming from" in resumed.stdout
    assert_identical(final_weights(tmp_path / model), uninterrupted[model])


def test_resume_continues_mid_epoch_instead_of_restarting_it(unpaired_root, tmp_path):
    args = cycle_gan(unpaired_root, tmp_path, "mid")
    interrupt_when_logged(train_command(args), tmp_path / "mid" / "loss_log.txt", "(epoch: 1, iters: 5,")
    run(train_command(args + ["--continue_train"]))
    sections = (tmp_path / "mid" / "loss_log.txt").read_text().split("================ Training Loss")
    first_resumed_step = next(line for line in sections[-1].splitlines() if line.startswith("(epoch"))
    # checkpoints are saved after images 3 and 6: the resumed run goes on with the image after one
    assert first_resumed_step.startswith(("(epoch: 1, iters: 4,", "(epoch: 1, iters: 7,")), first_resumed_step


def test_sigterm_saves_a_checkpoint_that_resumes_exactly_where_it_stopped(uninterrupted, unpaired_root, tmp_path):
    args = cycle_gan(unpaired_root, tmp_path, "cycle_gan")
    log = tmp_path / "cycle_gan" / "loss_log.txt"
    stopped = interrupt_when_logged(train_command(args), log, "(epoch: 1, iters: 5,", sig=signal.SIGTERM)
    assert stopped.returncode == 128 + signal.SIGTERM
    where = re.search(r"stopped by a signal at epoch (\d+), (\d+) images into it; saved", stopped.output)
    assert where and "--continue_train" in stopped.output, stopped.output[-3000:]
    epoch, images_done = int(where[1]), int(where[2])
    resumed = run(train_command(args + ["--continue_train"]))
    # The checkpoint written at the signal, not an older periodic one (after images 3 and 6), is
    # where the run goes on: the next image is the first one trained.
    assert f"latest_train_state.pth: epoch {epoch}, {images_done} images into it" in resumed.stdout
    first_resumed_step = next(line for line in log.read_text().split("================ Training Loss")[-1].splitlines()
                              if line.startswith("(epoch"))
    expected = f"(epoch: {epoch}, iters: {images_done + 1}," if images_done < 8 else f"(epoch: {epoch + 1}, iters: 1,"
    assert first_resumed_step.startswith(expected), first_resumed_step
    assert_identical(final_weights(tmp_path / "cycle_gan"), uninterrupted["cycle_gan"])


def test_corrupt_newest_checkpoint_falls_back_to_the_previous_one(unpaired_root, tmp_path):
    args = cycle_gan(unpaired_root, tmp_path, "corrupt") + ["--save_by_iter"]
    interrupt_when_logged(train_command(args), tmp_path / "corrupt" / "loss_log.txt", "(epoch: 1, iters: 8,")
    states = sorted((tmp_path / "corrupt").glob("iter_*_train_state.pth"), key=os.path.getmtime)
    assert len(states) >= 2
    states[-1].write_bytes(states[-1].read_bytes()[:1000])  # a half-written file
    resumed = run(train_command(args + ["--continue_train"]))
    assert f"cannot resume from {states[-1]}" in resumed.stderr
    assert f"resuming from {states[-2]}" in resumed.stdout


def test_a_second_run_on_the_same_folder_is_refused_while_the_first_is_alive(unpaired_root, tmp_path):
    args = cycle_gan(unpaired_root, tmp_path, "busy")
    args[args.index("--n_epochs") + 1] = "50"
    first = subprocess.Popen(train_command(args), cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        log = tmp_path / "busy" / "loss_log.txt"
        while not (log.exists() and "(epoch: 1, iters: 1," in log.read_text()):
            assert first.poll() is None
            time.sleep(0.05)
        second = subprocess.run(train_command(args), cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
        assert second.returncode == 2
        assert "another training run is using" in second.stderr and str(tmp_path / "busy") in second.stderr
        assert "Traceback" not in second.stderr
        assert first.poll() is None  # the first run goes on undisturbed
    finally:
        first.kill()
        first.wait()
    # once the first run is gone (killed, even), the folder is free again: --continue_train works
    args[args.index("--n_epochs") + 1] = "1"
    run(train_command(args + ["--continue_train"]))


def test_checkpoint_killed_while_being_written_leaves_the_previous_one_intact(tmp_path):
    target = tmp_path / "latest_net_G.pth"
    torch.save({"w": torch.ones(3)}, target)
    before = target.read_bytes()
    writer = subprocess.Popen([sys.executable, "-c", (
        "import sys, torch; sys.path.insert(0, sys.argv[1]);"
        "from util.training.checkpoint_io import atomic_torch_save;"
        "atomic_torch_save({'w': torch.zeros(400_000_000 // 4)}, sys.argv[2])"), str(ROOT), str(target)], env=ENV)
    deadline = time.time() + 60
    while not list(tmp_path.glob(".latest_net_G.pth.*.tmp")) or \
            list(tmp_path.glob(".latest_net_G.pth.*.tmp"))[0].stat().st_size == 0:
        assert writer.poll() is None and time.time() < deadline, "the write finished before it could be killed"
        time.sleep(0.001)
    writer.kill()
    writer.wait()
    assert target.read_bytes() == before
    assert torch.equal(torch.load(target, weights_only=True)["w"], torch.ones(3))


def test_two_process_run_killed_and_continued_matches_the_uninterrupted_two_process_run(unpaired_root, tmp_path):
    run(train_command(cycle_gan(unpaired_root, tmp_path, "whole"), nproc=2))
    args = cycle_gan(unpaired_root, tmp_path, "cut")
    killed = interrupt_when_logged(train_command(args, nproc=2), tmp_path / "cut" / "loss_log.txt",
                                   "(epoch: 2, iters: 2,", victim="worker")
    assert killed.returncode != 0
    run(train_command(args + ["--continue_train"], nproc=2))
    assert_identical(final_weights(tmp_path / "cut"), final_weights(tmp_path / "whole"))

    # with --max-restarts, torchrun restarts the workers and they continue on their own
    args = cycle_gan(unpaired_root, tmp_path, "elastic")
    restarted = interrupt_when_logged(train_command(args, nproc=2, extra=("--max-restarts=1",)),
                                      tmp_path / "elastic" / "loss_log.txt", "(epoch: 2, iters: 2,", victim="worker")
    assert restarted.returncode == 0, restarted.output[-4000:]
    assert "resuming from" in restarted.output
    assert_identical(final_weights(tmp_path / "elastic"), final_weights(tmp_path / "whole"))
