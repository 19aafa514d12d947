"""End-to-end tests of train.py and test.py: the reference's documented commands, run as written
(plus flags that only make the networks and images small) against datasets in its layouts.

Each script runs once as a user types it, in a new Python: train.py in `cycle_run`, test.py in
`test_test_py_with_checkpoint_of_another_netG_exits_2_naming_file_and_netG` (exit status and a clean
stderr). Every other run calls the script's main(argv) in this process (`run_in_process`; the same
files, messages and exit status, without ~2 s of interpreter start-up each). Training runs shared by
several tests live in module-scoped fixtures so that each configuration is trained once.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import FAST_FLAGS, ROOT, run_in_process, run_script

# Training for a handful of iterations at 32x32 pixels.
SMALL = ["--load_size", "32", "--crop_size", "32", "--n_epochs", "1", "--n_epochs_decay", "0",
         "--max_dataset_size", "4"]
# test.py has no display flags (as in the reference), so it gets its own small flags.
TEST_SMALL = ["--ngf", "8", "--ndf", "8", "--num_threads", "0", "--load_size", "32", "--crop_size", "32"]
CYCLE_NETS = ("G_A", "G_B", "D_A", "D_B")


def ok(result) -> None:
    assert result.returncode == 0, (f"exit {result.returncode}\nstdout:\n{result.stdout[-4000:]}"
                                    f"\nstderr:\n{result.stderr[-4000:]}")


def load_weights(run_dir: Path, nets, epoch: str = "latest") -> dict[str, dict[str, torch.Tensor]]:
    return {net: torch.load(run_dir / f"{epoch}_net_{net}.pth", map_location="cpu", weights_only=True) for net in nets}


def same_weights(a: dict, b: dict) -> bool:
    return all(a[net].keys() == b[net].keys() and all(torch.equal(a[net][k], b[net][k]) for k in a[net]) for net in a)


def png(path: Path) -> np.ndarray:
    with Image.open(path) as img:
        return np.asarray(img.convert("RGB"))


def result_rows(page: Path) -> int:
    """Rows of result images on a test.py page: one <table> per test image."""
    return page.read_text().count("<table")


# ---------------------------------------------------------------------------------- CycleGAN
CYCLE_TRAIN = [*FAST_FLAGS, *SMALL, "--n_epochs_decay", "1", "--save_epoch_freq", "2",
               "--print_freq", "1", "--display_freq", "1"]


def cycle_gan_args(root: Path, ckpt: Path, *extra: str) -> list[str]:
    """train.py's flags for the CycleGAN run "n"."""
    return ["--dataroot", str(root), "--name", "n", "--model", "cycle_gan", *CYCLE_TRAIN,
            "--checkpoints_dir", str(ckpt), *extra]


@pytest.fixture(scope="module")
def cycle_run(unpaired_root, tmp_path_factory):
    """`python train.py --dataroot D --name n --model cycle_gan` for 2 epochs, save_epoch_freq 2, in a
    new Python as a user starts it (this file's train.py subprocess)."""
    ckpt = tmp_path_factory.mktemp("cycle_ckpt")
    result = run_script("train.py", *cycle_gan_args(unpaired_root, ckpt))
    ok(result)
    return ckpt, ckpt / "n", result


@pytest.mark.slow
def test_cycle_gan_training_writes_latest_checkpoints_of_all_four_networks(cycle_run):
    _, run_dir, _ = cycle_run
    for net in CYCLE_NETS:
        assert (run_dir / f"latest_net_{net}.pth").stat().st_size > 0


@pytest.mark.slow
def test_cycle_gan_training_writes_epoch_checkpoints_only_when_epoch_is_a_multiple_of_save_epoch_freq(cycle_run):
    _, run_dir, _ = cycle_run
    for net in CYCLE_NETS:
        assert (run_dir / f"2_net_{net}.pth").is_file()
        assert not (run_dir / f"1_net_{net}.pth").exists()


@pytest.mark.slow
def test_cycle_gan_training_writes_train_opt_txt_listing_the_options(cycle_run):
    _, run_dir, _ = cycle_run
    text = (run_dir / "train_opt.txt").read_text()
    assert "----------------- Options ---------------" in text
    assert re.search(r"^\s+model: cycle_gan\b", text, re.M)
    assert re.search(r"^\s+name: n\b", text, re.M)


@pytest.mark.slow
def test_cycle_gan_loss_log_has_reference_format_lines_for_each_epoch(cycle_run):
    _, run_dir, _ = cycle_run
    lines = (run_dir / "loss_log.txt").read_text().splitlines()
    pattern = re.compile(r"^\(epoch: (\d+), iters: \d+, time: [\d.]+, data: [\d.]+\) D_A: [\d.]+ G_A: [\d.]+ "
                         r"cycle_A: [\d.]+ idt_A: [\d.]+ D_B: [\d.]+ G_B: [\d.]+ cycle_B: [\d.]+ idt_B: [\d.]+")
    epochs = [int(m.group(1)) for m in map(pattern.match, lines) if m]
    assert sorted(set(epochs)) == [1, 2], lines
    assert lines[0].startswith("================ Training Loss (")


@pytest.mark.slow
def test_cycle_gan_training_writes_html_page_showing_saved_images(cycle_run):
    _, run_dir, _ = cycle_run
    page = (run_dir / "web" / "index.html").read_text()
    shown = re.findall(r'<img[^>]*src="(images/[^"]+)"', page)
    assert shown, page
    assert any("real_A" in s for s in shown) and any("fake_B" in s for s in shown)
    for src in shown:
        assert (run_dir / "web" / src).is_file(), src


@pytest.mark.slow
def test_test_model_with_suffix_A_translates_single_images_from_testA(cycle_run, unpaired_root, tmp_path, capsys):
    ckpt, _, _ = cycle_run
    result = run_in_process("test.py", "--dataroot", str(unpaired_root / "testA"), "--name", "n", "--model", "test",
                        "--model_suffix", "_A", "--no_dropout", *TEST_SMALL,
                        "--checkpoints_dir", str(ckpt), "--results_dir", str(tmp_path), capsys=capsys)
    ok(result)
    out = tmp_path / "n" / "test_latest"
    inputs = sorted(p.stem for p in (unpaired_root / "testA").glob("*.png"))
    assert sorted(p.name for p in (out / "images").glob("*_real.png")) == [f"{s}_real.png" for s in inputs]
    assert sorted(p.name for p in (out / "images").glob("*_fake.png")) == [f"{s}_fake.png" for s in inputs]
    assert png(out / "images" / f"{inputs[0]}_fake.png").shape == (32, 32, 3)
    assert "latest_net_G_A.pth" in result.stdout
    assert result_rows(out / "index.html") == len(inputs)


@pytest.mark.slow
def test_test_py_with_cycle_gan_model_writes_both_directions(cycle_run, unpaired_root, tmp_path, capsys):
    ckpt, _, _ = cycle_run
    result = run_in_process("test.py", "--dataroot", str(unpaired_root), "--name", "n", "--model", "cycle_gan",
                            *TEST_SMALL, "--checkpoints_dir", str(ckpt), "--results_dir", str(tmp_path),
                            capsys=capsys)
    ok(result)
    images = tmp_path / "n" / "test_latest" / "images"
    for label in ("real_A", "fake_B", "rec_A", "real_B", "fake_A", "rec_B"):
        assert len(list(images.glob(f"*_{label}.png"))) == 4, label
    assert (tmp_path / "n" / "test_latest" / "index.html").is_file()


@pytest.fixture(scope="module")
def cycle_test_options(cycle_run, unpaired_root, tmp_path_factory):
    """test.py --num_test 3 --aspect_ratio 2.0 on the CycleGAN run."""
    ckpt, _, _ = cycle_run
    results = tmp_path_factory.mktemp("cycle_results_opts")
    ok(run_in_process("test.py", "--dataroot", str(unpaired_root / "testA"), "--name", "n", "--model", "test",
                      "--model_suffix", "_A", "--no_dropout", *TEST_SMALL, "--num_test", "3", "--aspect_ratio", "2.0",
                      "--checkpoints_dir", str(ckpt), "--results_dir", str(results)))
    return results / "n" / "test_latest"


@pytest.mark.slow
def test_num_test_limits_results_to_that_many_images(cycle_test_options):
    assert len(list((cycle_test_options / "images").glob("*_fake.png"))) == 3  # testA holds 4
    assert result_rows(cycle_test_options / "index.html") == 3


@pytest.mark.slow
def test_aspect_ratio_2_doubles_the_width_of_saved_images(cycle_test_options):
    for path in (cycle_test_options / "images").glob("*.png"):
        assert png(path).shape[:2] == (32, 64), path


@pytest.mark.slow
def test_test_py_with_checkpoint_of_another_netG_exits_2_naming_file_and_netG(cycle_run, unpaired_root, tmp_path):
    # test.py as a user types it (this file's test.py subprocess): the real exit status and stderr
    ckpt, run_dir, _ = cycle_run
    result = run_script("test.py", "--dataroot", str(unpaired_root / "testA"), "--name", "n", "--model", "test",
                        "--model_suffix", "_A", "--no_dropout", "--netG", "resnet_6blocks", *TEST_SMALL,
                        "--checkpoints_dir", str(ckpt), "--results_dir", str(tmp_path))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert str(run_dir / "latest_net_G_A.pth") in result.stderr
    assert "--netG" in result.stderr and "resnet_9blocks" in result.stderr  # says what it was trained with


@pytest.mark.slow
def test_cycle_gan_same_seed_gives_identical_weights_and_other_seed_differs(cycle_run, unpaired_root, tmp_path,
                                                                            capsys):
    _, run_dir, _ = cycle_run
    first = load_weights(run_dir, CYCLE_NETS)  # trained in a subprocess, the reruns in this process
    ok(run_in_process("train.py", *cycle_gan_args(unpaired_root, tmp_path / "again"), capsys=capsys))
    ok(run_in_process("train.py", *cycle_gan_args(unpaired_root, tmp_path / "seed1", "--seed", "1"), capsys=capsys))
    assert same_weights(first, load_weights(tmp_path / "again" / "n", CYCLE_NETS))
    assert not same_weights(first, load_weights(tmp_path / "seed1" / "n", CYCLE_NETS))


# ---------------------------------------------------------------------------------- pix2pix
PIX_FLAGS = ["--model", "pix2pix", "--direction", "BtoA", "--netG", "resnet_6blocks"]


def pix2pix_args(root: Path, ckpt: Path, *extra: str) -> list[str]:
    """train.py's flags for pix2pix BtoA."""
    return ["--dataroot", str(root), "--name", "p", *PIX_FLAGS, *FAST_FLAGS, *SMALL, "--checkpoints_dir", str(ckpt),
            *extra]


def pix2pix_test_args(root: Path, ckpt: Path, results: Path, *extra: str) -> list[str]:
    """test.py's flags for the pix2pix BtoA run."""
    return ["--dataroot", str(root), "--name", "p", *PIX_FLAGS, *TEST_SMALL, "--checkpoints_dir", str(ckpt),
            "--results_dir", str(results), *extra]


@pytest.fixture(scope="module")
def pix_run(paired_root, tmp_path_factory):
    """`train.py --model pix2pix --direction BtoA`, then `test.py` with the same flags."""
    ckpt = tmp_path_factory.mktemp("pix_ckpt")
    ok(run_in_process("train.py", *pix2pix_args(paired_root, ckpt)))
    results = tmp_path_factory.mktemp("pix_results")
    ok(run_in_process("test.py", *pix2pix_test_args(paired_root, ckpt, results)))
    return ckpt, results / "p" / "test_latest"


@pytest.mark.slow
def test_pix2pix_test_writes_real_A_fake_B_real_B_for_each_test_image(pix_run, paired_root):
    _, out = pix_run
    for stem in sorted(p.stem for p in (paired_root / "test").glob("*.png")):
        for label in ("real_A", "fake_B", "real_B"):
            assert (out / "images" / f"{stem}_{label}.png").is_file(), (stem, label)
    assert (out / "index.html").is_file()


@pytest.mark.slow
def test_pix2pix_test_writes_metrics_json_with_output_and_identity_L1(pix_run):
    import json
    _, out = pix_run
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["images"] == 4
    assert metrics["output_L1"] >= 0 and metrics["identity_L1"] > 0


@pytest.mark.slow
def test_pix2pix_BtoA_takes_the_right_half_of_the_AB_image_as_input(pix_run, paired_root):
    _, out = pix_run
    ab = png(paired_root / "test" / "0000.png")
    left, right = ab[:, :32].astype(int), ab[:, 32:].astype(int)
    real_A = png(out / "images" / "0000_real_A.png").astype(int)
    real_B = png(out / "images" / "0000_real_B.png").astype(int)
    assert np.abs(real_A - right).max() <= 1
    assert np.abs(real_B - left).max() <= 1
    assert np.abs(real_A - left).mean() > 10  # the halves differ, so the check above means something


@pytest.mark.slow
def test_eval_flag_puts_every_module_in_eval_mode_and_outputs_the_eval_forward(pix_run, paired_root, tmp_path,
                                                                              monkeypatch):
    import test as test_script
    from models import networks
    from models.base_model import BaseModel
    from util.util import tensor2im

    training_modules = []  # per model.test(nets) call: the modules still in training mode

    def recording_test(model, nets):
        training_modules.append([f"{name}.{sub}" for name, net in nets.items()
                                 for sub, module in net.named_modules() if module.training])
        original_test(model, nets)

    original_test = BaseModel.test
    monkeypatch.setattr(BaseModel, "test", recording_test)
    ckpt, out = pix_run
    assert test_script.main(["--dataroot", str(paired_root), "--name", "p", *PIX_FLAGS, *TEST_SMALL, "--eval",
                             "--checkpoints_dir", str(ckpt), "--results_dir", str(tmp_path)]) == 0
    assert training_modules and all(found == [] for found in training_modules), training_modules

    # The same checkpoint run by hand in eval mode gives the saved output, pixel for pixel.
    images = tmp_path / "p" / "test_latest" / "images"
    netG = networks.define_G(3, 3, 8, "resnet_6blocks", "batch", use_dropout=True)  # pix2pix: dropout on
    netG.load_state_dict(torch.load(ckpt / "p" / "latest_net_G.pth", weights_only=True))
    netG.eval()
    real_A = torch.from_numpy(png(images / "0000_real_A.png").transpose(2, 0, 1).copy())[None]
    with torch.no_grad():
        expected = tensor2im(netG(real_A.float().div_(127.5).sub_(1.0)))
    eval_fake = png(images / "0000_fake_B.png")
    assert np.array_equal(eval_fake, expected)
    # batch norm and dropout make eval mode matter: the default (train-mode) output differs
    assert not np.array_equal(eval_fake, png(out / "images" / "0000_fake_B.png"))


@pytest.mark.slow
def test_pix2pix_same_seed_gives_identical_weights_and_other_seed_differs(pix_run, paired_root, tmp_path, capsys):
    ckpt, _ = pix_run
    first = load_weights(ckpt / "p", ("G", "D"))
    ok(run_in_process("train.py", *pix2pix_args(paired_root, tmp_path / "again"), capsys=capsys))
    ok(run_in_process("train.py", *pix2pix_args(paired_root, tmp_path / "seed1", "--seed", "1"), capsys=capsys))
    assert same_weights(first, load_weights(tmp_path / "again" / "p", ("G", "D")))
    assert not same_weights(first, load_weights(tmp_path / "seed1" / "p", ("G", "D")))


@pytest.mark.slow
def test_pix2pix_default_unet_256_generator_trains_and_tests_at_256_pixels(paired_root, tmp_path, capsys):
    size = ["--load_size", "256", "--crop_size", "256"]
    ok(run_in_process("train.py", "--dataroot", str(paired_root), "--name", "facades", "--model", "pix2pix",
                      "--direction", "BtoA", *FAST_FLAGS, *size, "--n_epochs", "1", "--n_epochs_decay", "0",
                      "--max_dataset_size", "1", "--checkpoints_dir", str(tmp_path / "ck"), capsys=capsys))
    assert (tmp_path / "ck" / "facades" / "latest_net_G.pth").is_file()
    result = run_in_process("test.py", "--dataroot", str(paired_root), "--name", "facades", "--model", "pix2pix",
                            "--direction", "BtoA", "--ngf", "8", "--num_threads", "0", *size, "--num_test", "1",
                            "--checkpoints_dir", str(tmp_path / "ck"), "--results_dir", str(tmp_path / "res"),
                            capsys=capsys)
    ok(result)
    assert png(tmp_path / "res" / "facades" / "test_latest" / "images" / "0000_fake_B.png").shape == (256, 256, 3)


# ---------------------------------------------------------------------------------- saving by iteration, resuming
@pytest.fixture(scope="module")
def iter_run(paired_root, tmp_path_factory):
    """pix2pix with --save_by_iter --save_latest_freq 2 over 4 images."""
    ckpt = tmp_path_factory.mktemp("iter_ckpt")
    ok(run_in_process("train.py", *pix2pix_args(paired_root, ckpt, "--save_by_iter", "--save_latest_freq",
                                                             "2")))
    return ckpt


@pytest.mark.slow
def test_save_by_iter_writes_iter_n_checkpoints_every_save_latest_freq_images(iter_run):
    names = sorted(p.name for p in (iter_run / "p").glob("iter_*.pth"))
    assert names == ["iter_2_net_D.pth", "iter_2_net_G.pth", "iter_2_train_state.pth",
                     "iter_4_net_D.pth", "iter_4_net_G.pth", "iter_4_train_state.pth"]
    assert (iter_run / "p" / "latest_net_G.pth").is_file()  # the end of the last epoch still saves latest


@pytest.mark.slow
def test_continue_train_loads_latest_and_continues_at_epoch_count(iter_run, paired_root, tmp_path, capsys):
    shutil.copytree(iter_run, tmp_path / "ck")
    run_dir = tmp_path / "ck" / "p"
    before = load_weights(run_dir, ("G", "D"))
    result = run_in_process("train.py", *pix2pix_args(paired_root, tmp_path / "ck", "--continue_train", "--epoch_count",
                                                      "2", "--n_epochs_decay", "1", "--print_freq", "1"),
                            capsys=capsys)
    ok(result)
    assert f"loaded the model from {run_dir / 'latest_net_G.pth'}" in result.stdout
    assert f"loaded the model from {run_dir / 'latest_net_D.pth'}" in result.stdout
    log = (run_dir / "loss_log.txt").read_text().split("================ Training Loss")[-1]
    assert "(epoch: 2, iters: 1," in log and "(epoch: 1," not in log
    # Linear policy: starting at epoch 2 of n_epochs 1 + n_epochs_decay 1, the rate is already halved.
    assert "End of epoch 2 / 2" in result.stdout and "learning rate 0.0001000 -> 0.0000000" in result.stdout
    assert not same_weights(before, load_weights(run_dir, ("G", "D")))


@pytest.mark.slow
def test_load_iter_makes_test_py_load_iter_checkpoints(iter_run, paired_root, tmp_path, capsys):
    result = run_in_process("test.py", *pix2pix_test_args(paired_root, iter_run, tmp_path, "--load_iter", "2"),
                            capsys=capsys)
    ok(result)
    assert f"loaded the model from {iter_run / 'p' / 'iter_2_net_G.pth'}" in result.stdout
    assert len(list((tmp_path / "p" / "test_latest_iter2" / "images").glob("*_fake_B.png"))) == 4


# ---------------------------------------------------------------------------------- colorization, template
@pytest.fixture(scope="module")
def color_root(unpaired_root, tmp_path_factory):
    """RGB images in D/train and D/test, as --model colorization expects."""
    root = tmp_path_factory.mktemp("color")
    shutil.copytree(unpaired_root / "trainA", root / "train")
    shutil.copytree(unpaired_root / "testA", root / "test")
    return root


@pytest.mark.slow
def test_colorization_model_trains_and_tests(color_root, tmp_path, capsys):
    ck = tmp_path / "ck"
    ok(run_in_process("train.py", "--dataroot", str(color_root), "--name", "color", "--model", "colorization",
                      "--netG", "resnet_6blocks", *FAST_FLAGS, *SMALL, "--checkpoints_dir", str(ck), capsys=capsys))
    assert (ck / "color" / "latest_net_G.pth").is_file() and (ck / "color" / "latest_net_D.pth").is_file()
    result = run_in_process("test.py", "--dataroot", str(color_root), "--name", "color", "--model", "colorization",
                            "--netG", "resnet_6blocks", *TEST_SMALL, "--checkpoints_dir", str(ck),
                            "--results_dir", str(tmp_path / "res"), capsys=capsys)
    ok(result)
    images = tmp_path / "res" / "color" / "test_latest" / "images"
    for label in ("real_A", "real_B_rgb", "fake_B_rgb"):
        found = sorted(images.glob(f"*_{label}.png"))
        assert len(found) == 4, label
        assert png(found[0]).shape == (32, 32, 3)


@pytest.mark.slow
def test_template_model_trains_on_aligned_data(paired_root, tmp_path, capsys):
    ok(run_in_process("train.py", "--dataroot", str(paired_root), "--name", "template", "--model", "template",
                      *FAST_FLAGS, *SMALL, "--print_freq", "1", "--checkpoints_dir", str(tmp_path), capsys=capsys))
    assert (tmp_path / "template" / "latest_net_G.pth").is_file()
    loss_log = (tmp_path / "template" / "loss_log.txt").read_text()
    assert re.search(r"^\(epoch: 1, iters: 4, .*\) G: [\d.]+", loss_log, re.M)


# ---------------------------------------------------------------------------------- deprecated flags
# (--display_id without a visdom server: tests/test_visualization.py, in a real train.py process)
@pytest.mark.slow
def test_gpu_ids_minus_one_runs_on_cpu_with_one_line_warning_about_device(paired_root, tmp_path, capsys):
    result = run_in_process("train.py", *pix2pix_args(paired_root, tmp_path, "--gpu_ids", "-1", "--max_dataset_size",
                                                      "1"), capsys=capsys)
    ok(result)
    warnings = [line for line in (result.stdout + result.stderr).splitlines()
                if "warning" in line.lower() and "--device" in line]
    assert len(warnings) == 1, result.stderr
    assert "--gpu_ids" in warnings[0]
    assert re.search(r"\) on cpu$", result.stdout, re.M)
    assert (tmp_path / "p" / "latest_net_G.pth").is_file()


@pytest.mark.parametrize("workers", ["0", "eight", ""])
def test_gpu_check_refuses_a_bad_workers_value_before_anything_runs(workers, tmp_path):
    result = subprocess.run(["bash", "scripts/gpu_check.sh", "--out", str(tmp_path / "out"), "--workers", workers,
                             "tests"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "--workers takes a whole number of pytest processes" in result.stderr
    assert not (tmp_path / "out").exists()  # refused before the check made its folder
