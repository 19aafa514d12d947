"""A diverging run stops at the first non-finite loss, on every rank, without overwriting the last
good checkpoint with NaN weights."""
from __future__ import annotations

import pytest
import torch

from conftest import FAST_FLAGS, run_script

TINY = ["--netG", "resnet_6blocks", "--load_size", "32", "--crop_size", "32", "--no_html", "--no_progress",
        "--print_freq", "1000"]


def finite(path) -> bool:
    return all(torch.isfinite(t).all() for t in torch.load(path, weights_only=True).values() if t.is_floating_point())


@pytest.mark.slow
def test_diverging_run_stops_with_one_message_and_keeps_the_last_finite_checkpoint(unpaired_root, tmp_path):
    common = ["--dataroot", str(unpaired_root), "--name", "dv", "--checkpoints_dir", str(tmp_path), *FAST_FLAGS,
              *TINY, "--model", "cycle_gan", "--save_epoch_freq", "1"]
    good = run_script("train.py", *common, "--n_epochs", "1", "--n_epochs_decay", "0")
    assert good.returncode == 0, good.stderr[-3000:]
    run_dir = tmp_path / "dv"
    saved = {p.name: p.read_bytes() for p in run_dir.glob("latest_*.pth")}
    assert len(saved) == 5  # four networks and the training state

    # Continue from those weights (the reference's way: --epoch_count) with a learning rate that
    # blows the weights up at once: the losses of the second step are no longer finite.
    bad = run_script("train.py", *common, "--continue_train", "--epoch_count", "2", "--n_epochs", "3",
                     "--n_epochs_decay", "0", "--lr", "1e30")
    assert bad.returncode == 2, bad.stderr[-3000:]
    assert "Traceback" not in bad.stderr
    message = [line for line in bad.stderr.splitlines() if line.startswith("error: ")]
    assert len(message) == 1, bad.stderr
    assert "training diverged" in message[0] and "epoch 2, iteration 2 " in message[0], message[0]
    assert "G_A" in message[0] and "--lr" in message[0] and "1e+30" in message[0]
    assert {p.name: p.read_bytes() for p in run_dir.glob("latest_*.pth")} == saved
    assert all(finite(run_dir / name) for name in saved if "_net_" in name)
    assert not (run_dir / "2_net_G_A.pth").exists()
