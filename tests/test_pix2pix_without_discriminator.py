"""pix2pix --lambda_GAN 0: no discriminator is built, the generator learns by L1 alone (the restoration
recipe of docs/volumes.md, whose test in tests/test_volumes.py shows what it learns), with the project's
guarantees: two processes train what one does, and a killed run continued ends bit-identical. (Its
refusals are in the bad-input corpus, tests/bad_flag_combinations.py.)"""
from __future__ import annotations

import signal

import pytest

from conftest import load_script, ranks
from helpers import interrupt_when_logged, ok, pix2pix, pix2pix_args, run_here, train_command
from helpers_weights import assert_identical, assert_trained_alike, final_weights

WITHOUT_D = ["--lambda_GAN", "0"]


@pytest.fixture(scope="module")
def train():
    return load_script("train.py")


def test_two_processes_without_a_discriminator_equal_one_with_double_batch_and_none_is_built_saved_or_logged(
        train, paired_root, tmp_path):
    assert train.main(pix2pix_args(paired_root, tmp_path, "one", 2, "instance") + WITHOUT_D) == 0
    ok(ranks("train.py", *pix2pix_args(paired_root, tmp_path, "two", 1, "instance"), *WITHOUT_D))
    for run in ("one", "two"):
        saved = {p.name.split("_net_")[1] for p in (tmp_path / run).glob("*_net_*.pth")}  # every epoch's
        assert saved == {"G.pth"}
        logged = [line for line in (tmp_path / run / "loss_log.txt").read_text().splitlines() if line.startswith("(")]
        assert logged and all("G_L1:" in line and "D_" not in line and "G_GAN" not in line for line in logged)
    assert_trained_alike(tmp_path / "one", tmp_path / "two")


@pytest.mark.slow
def test_a_killed_run_without_a_discriminator_continued_ends_bit_identical(paired_root, tmp_path):
    # dropout and batch norm in G: the randomness and state a continued run must restore
    run_here(pix2pix(paired_root, tmp_path, "whole") + WITHOUT_D)
    args = pix2pix(paired_root, tmp_path, "killed") + WITHOUT_D
    killed = interrupt_when_logged(train_command(args), tmp_path / "killed" / "loss_log.txt", "(epoch: 1, iters: 5,")
    assert killed.returncode == -signal.SIGKILL
    assert "resuming from" in run_here(args + ["--continue_train"]).stdout
    assert_identical(final_weights(tmp_path / "killed"), final_weights(tmp_path / "whole"))
