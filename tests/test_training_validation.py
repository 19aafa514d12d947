"""Validation during training tells the user which epoch is best: metrics of held-out images per
epoch, the best checkpoint (raw and moving-average weights) that test.py applies, the same numbers
in 2 processes as in one, and all of it surviving a crash and --continue_train.

train.py and test.py run in this process (run_in_process, on one thread); processes of their own
only where the process is the point: 2 ranks (as torchrun's workers), and a run killed by SIGKILL."""
from __future__ import annotations

import json
import math
import signal
import subprocess
from pathlib import Path

import pytest
import torch

from conftest import FAST_FLAGS, demo_data, ranks, run_in_process

# one thread, as the killed run's process (OMP_NUM_THREADS=1): its weights are compared bit for bit
TINY = ["--load_size", "32", "--crop_size", "32", "--netG", "resnet_6blocks", "--no_html", "--no_progress"]


@pytest.fixture(scope="module")
def paired_data(tmp_path_factory) -> Path:
    """Aligned 32 px pairs: 6 for training, 5 held out in val/ (an odd count: uneven over 2 processes)."""
    return demo_data.make_pix2pix_demo(tmp_path_factory.mktemp("val_paired"), 32, 3, 6, 5, 2)


@pytest.fixture(scope="module")
def unpaired_data(tmp_path_factory) -> Path:
    """Unpaired 32 px images, 5 per test split (CycleGAN's validation falls back to test)."""
    return demo_data.make_cyclegan_demo(tmp_path_factory.mktemp("val_unpaired"), 32, 3, 6, 5)


# Validation every epoch, the best raw and moving-average weights kept, a checkpoint every 4 images: the run
# whose best checkpoint test.py reproduces, and the uninterrupted reference of the killed and continued one.
VALIDATED = ["--model", "pix2pix", "--n_epochs", "3", "--n_epochs_decay", "2", "--val_freq", "1", "--save_best", "L1",
             "--ema_decay", "0.9", "--print_freq", "1", "--save_latest_freq", "4"]


@pytest.fixture(scope="module")
def validated_run(paired_data, tmp_path_factory) -> Path:
    """The checkpoints folder of VALIDATED's run "p" on `paired_data`, trained once here for the tests that read it."""
    ckpt = tmp_path_factory.mktemp("validated")
    ok(run_in_process("train.py", *train_args(paired_data, ckpt, "p", *VALIDATED)))
    return ckpt


def metrics_rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def train_args(data: Path, ckpt: Path, name: str, *extra: str) -> list[str]:
    return ["--dataroot", str(data), "--checkpoints_dir", str(ckpt), "--name", name, *FAST_FLAGS, *TINY, *extra]


def train(capsys: pytest.CaptureFixture, data: Path, ckpt: Path, name: str, *extra: str) -> subprocess.CompletedProcess:
    """`python train.py` with the tiny settings, in this process."""
    return run_in_process("train.py", *train_args(data, ckpt, name, *extra), capsys=capsys)


def ok(result) -> None:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"


@pytest.mark.slow
def test_best_checkpoint_is_the_epoch_with_the_lowest_validation_l1_and_test_py_reproduces_it(paired_data,
                                                                                             validated_run, tmp_path,
                                                                                             capsys):
    run_dir = validated_run / "p"
    rows = metrics_rows(run_dir)
    assert [row["epoch"] for row in rows] == [1, 2, 3, 4, 5]  # one row per epoch
    val_lines = [line for line in (run_dir / "val_log.txt").read_text().splitlines() if line.startswith("(epoch")]
    assert len(val_lines) == 5 and all("% of the epoch" in line for line in val_lines)  # the cost, measured
    assert all(row["images"] == 5 and row["seconds"] > 0 for row in rows)
    best = json.loads((run_dir / "best.json").read_text())
    lowest = min(rows, key=lambda row: row["metrics"]["L1"])
    assert best["metric"] == "L1" and best["best"]["epoch"] == lowest["epoch"]
    assert best["best"]["metrics"]["L1"] == pytest.approx(lowest["metrics"]["L1"], abs=1e-12)
    lowest_ema = min(rows, key=lambda row: row["metrics"]["ema_L1"])
    assert best["best_ema"]["epoch"] == lowest_ema["epoch"]
    assert (run_dir / "metrics_plot.png").stat().st_size > 0

    for epoch, key, entry in (("best", "L1", best["best"]), ("best_ema", "ema_L1", best["best_ema"])):
        tested = run_in_process("test.py", "--dataroot", str(paired_data), "--checkpoints_dir", str(validated_run),
                                "--name", "p", "--model", "pix2pix", "--ngf", "8", "--netG", "resnet_6blocks",
                                "--load_size", "32", "--crop_size", "32", "--phase", "val", "--epoch", epoch, "--eval",
                                "--results_dir", str(tmp_path / "results"), capsys=capsys)
        ok(tested)
        scores = json.loads((tmp_path / "results" / "p" / f"val_{epoch}" / "metrics.json").read_text())
        assert scores["output_L1"] == pytest.approx(entry["metrics"][key], abs=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["pix2pix", "cycle_gan"])
def test_validation_under_torchrun_equals_one_process_with_an_uneven_split(model, paired_data, unpaired_data,
                                                                          inception_torch_home, tmp_path, capsys,
                                                                          monkeypatch):
    # A learning rate too small to move any weight: both runs validate the same (initial) weights,
    # so any difference is validation's own. So 2 training images do (a step of the 2 processes); the
    # held-out images are all validated whatever --max_dataset_size says (data/held_out.py).
    data, norm = (paired_data, ["--norm", "instance"]) if model == "pix2pix" else (unpaired_data, [])
    flags = ["--model", model, *norm, "--lr", "1e-20", "--n_epochs", "1", "--n_epochs_decay", "0", "--val_freq", "1",
             "--max_dataset_size", "2"]
    monkeypatch.setenv("TORCH_HOME", str(inception_torch_home))  # for this process and the ranks'
    monkeypatch.setenv("IMG2IMG_OFFLINE", "1")
    ok(train(capsys, data, tmp_path, "one", *flags))
    ok(ranks("train.py", *train_args(data, tmp_path, "two", *flags), timeout=300))
    one, two = metrics_rows(tmp_path / "one")[0], metrics_rows(tmp_path / "two")[0]
    expected = ["L1", "PSNR", "SSIM"] if model == "pix2pix" else ["FID_B", "KID_B", "FID_A", "KID_A"]
    assert set(expected) <= set(one["metrics"])
    assert one["metrics"].keys() == two["metrics"].keys() and one["images"] == two["images"] == 5
    for key, value in one["metrics"].items():
        assert two["metrics"][key] == pytest.approx(value, abs=1e-6), key


@pytest.mark.slow
def test_killed_run_with_validation_ema_and_best_resumes_to_the_same_files(paired_data, validated_run, tmp_path,
                                                                           capsys):
    from helpers import interrupt_when_logged, train_command

    # The uninterrupted run: VALIDATED's, trained once for this module (the same flags but the silent
    # --checkpoints_dir, which its training state does not record).
    common = train_args(paired_data, tmp_path, "cut", *VALIDATED)
    # Killed in the third epoch, after two validations and a mid-epoch save; continued.
    killed = interrupt_when_logged(train_command(common), tmp_path / "cut" / "loss_log.txt", "(epoch: 3, iters: 5,",
                                   sig=signal.SIGKILL)
    assert killed.returncode == -signal.SIGKILL
    ok(run_in_process("train.py", *common, "--continue_train", capsys=capsys))
    whole, cut = validated_run / "p", tmp_path / "cut"
    files = sorted(p.name for p in whole.glob("*.pth") if p.name.startswith(("latest_", "best_")) or "_ema_" in p.name)
    assert {"best_net_G.pth", "best_ema_net_G.pth", "latest_ema_net_G.pth", "latest_train_state.pth"} <= set(files)
    assert files == sorted(p.name for p in cut.glob("*.pth")
                           if p.name.startswith(("latest_", "best_")) or "_ema_" in p.name)
    for name in files:
        a, b = torch.load(whole / name, weights_only=True), torch.load(cut / name, weights_only=True)
        assert_same(a, b, name)
    assert json.loads((whole / "best.json").read_text()) == json.loads((cut / "best.json").read_text())


def assert_same(a, b, where: str) -> None:
    """Bit-for-bit equality of nested checkpoint contents."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_same(a[key], b[key], f"{where}/{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and math.isnan(a):
        assert isinstance(b, float) and math.isnan(b), where
    else:
        assert a == b, where


@pytest.mark.slow
def test_without_inception_weights_cyclegan_validation_warns_once_and_training_goes_on(unpaired_data, tmp_path,
                                                                                      capsys, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "empty_torch_home"))
    monkeypatch.setenv("IMG2IMG_OFFLINE", "1")
    monkeypatch.setenv("IMG2IMG_INCEPTION_WEIGHTS", "")
    # two epochs, two validations; 2 training images an epoch do (validation takes all the held-out ones)
    flags = ["--model", "cycle_gan", "--n_epochs", "2", "--n_epochs_decay", "0", "--val_freq", "1",
             "--max_dataset_size", "2"]
    result = train(capsys, unpaired_data, tmp_path, "offline", *flags)
    ok(result)
    assert (tmp_path / "offline" / "latest_net_G_A.pth").exists()
    warnings = [line for line in result.stderr.splitlines() if "weights-inception" in line]
    assert len(warnings) == 1, result.stderr  # once, naming the file and where to put it
    assert "hub" in warnings[0] and "checkpoints" in warnings[0]
    assert [row["metrics"] for row in metrics_rows(tmp_path / "offline")] == [{}, {}]

    refused = train(capsys, unpaired_data, tmp_path, "refused", *flags, "--save_best", "FID_B")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "--save_best FID_B" in refused.stderr and "weights-inception" in refused.stderr
    assert not (tmp_path / "refused" / "train_opt.txt").exists()  # refused before writing anything


def test_save_best_needs_a_metric_this_models_validation_reports(paired_data, tmp_path, capsys):
    result = train(capsys, paired_data, tmp_path, "wrong", "--model", "pix2pix", "--val_freq", "1", "--save_best",
                   "FID_B", "--n_epochs", "1", "--n_epochs_decay", "0")
    assert result.returncode == 2 and "--save_best FID_B" in result.stderr and "L1" in result.stderr


def test_validation_without_a_held_out_split_names_the_folders_and_the_flag(tmp_path, capsys):
    data = demo_data.make_pix2pix_demo(tmp_path / "data", 32, 0, 4, 0, 0)
    result = train(capsys, data, tmp_path, "nosplit", "--model", "pix2pix", "--val_freq", "1", "--n_epochs", "1",
                   "--n_epochs_decay", "0")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "--val_freq 1" in result.stderr and str(data / "val") in result.stderr and "--val_phase" in result.stderr


@pytest.mark.slow
def test_plateau_policy_watches_the_validation_metric_on_the_epochs_that_validate(paired_data, tmp_path, capsys):
    # --save_best PSNR: the schedule must see -PSNR (higher is better), and only at the two
    # validations (epoch 2 by --val_freq, epoch 3 as the last one), not the epoch's generator loss.
    # (2 training images an epoch: the schedule counts epochs and validations, not images)
    ok(train(capsys, paired_data, tmp_path, "plateau", "--model", "pix2pix", "--n_epochs", "3", "--n_epochs_decay",
             "0", "--val_freq", "2", "--save_best", "PSNR", "--lr_policy", "plateau", "--max_dataset_size", "2"))
    psnr = [row["metrics"]["PSNR"] for row in metrics_rows(tmp_path / "plateau")]
    assert [row["epoch"] for row in metrics_rows(tmp_path / "plateau")] == [2, 3]
    state = torch.load(tmp_path / "plateau" / "latest_train_state.pth", weights_only=False)
    for scheduler in state["model"]["schedulers"]:  # generator's and discriminator's
        assert scheduler["last_epoch"] == 2  # stepped once per validation
        assert scheduler["best"] == pytest.approx(-max(psnr), rel=1e-12)
