"""Bad input makes train.py/test.py exit with status 2 and one clear paragraph on stderr that
names the offending path or flag -- never a traceback -- and leaves existing checkpoints alone."""
from __future__ import annotations

import pathlib
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import FAST_FLAGS, run_script

SMALL = ["--load_size", "32", "--crop_size", "32", "--n_epochs", "1", "--n_epochs_decay", "0"]
PIX = ["--model", "pix2pix", "--netG", "resnet_6blocks"]


def assert_user_error(result, *must_name: str) -> str:
    """Exit 2, no traceback, a single paragraph on stderr naming everything in `must_name`."""
    err = result.stderr
    assert result.returncode == 2, f"exit {result.returncode}\nstdout:\n{result.stdout[-3000:]}\nstderr:\n{err[-3000:]}"
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err  # one paragraph, nothing else
    assert lines[0].startswith("error: "), err
    for text in must_name:
        assert str(text) in lines[0], (text, err)
    return lines[0]


def train(root: Path, ckpt: Path, *extra: str, name: str = "bad"):
    return run_script("train.py", "--dataroot", str(root), "--name", name, *FAST_FLAGS, *SMALL,
                      "--checkpoints_dir", str(ckpt), *extra)


def write_aligned(folder: Path, count: int, ext: str = ".png") -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    paths = []
    for i in range(count):
        path = folder / f"{i:04d}{ext}"
        Image.fromarray(rng.integers(0, 256, (32, 64, 3), dtype=np.uint8)).save(path)
        paths.append(path)
    return paths


def preexisting_checkpoint(ckpt: Path, name: str = "bad", net: str = "G") -> tuple[Path, bytes]:
    """A checkpoint from an earlier run in the run folder, which a failing run must not touch."""
    path = ckpt / name / f"latest_net_{net}.pth"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"weight": torch.arange(6.0)}, path)
    return path, path.read_bytes()


# ---------------------------------------------------------------------------------- dataset folders
def test_missing_dataroot_exits_2_naming_the_path(tmp_path):
    missing = tmp_path / "no_such_dataset"
    result = run_script("train.py", "--dataroot", str(missing), "--name", "bad", "--checkpoints_dir", str(tmp_path),
                        "--num_threads", "0")
    assert_user_error(result, missing, "--dataroot")


@pytest.mark.parametrize("script", ["train.py", "test.py"])  # unaligned and single layouts
def test_empty_dataroot_exits_2_naming_the_path(script, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run_script(script, "--dataroot", str(empty), "--name", "bad", "--checkpoints_dir", str(tmp_path),
                        "--num_threads", "0")
    assert_user_error(result, empty)


def test_unaligned_dataset_without_trainB_exits_2_naming_trainB(unpaired_root, tmp_path):
    root = tmp_path / "horse2zebra"
    shutil.copytree(unpaired_root / "trainA", root / "trainA")
    result = train(root, tmp_path / "ck", "--model", "cycle_gan")
    assert_user_error(result, root / "trainB")


# ---------------------------------------------------------------------------------- unreadable images
def test_zero_byte_png_exits_2_naming_the_file(tmp_path):
    bad = tmp_path / "facades" / "train" / "0000.png"
    write_aligned(bad.parent, 2)
    bad.write_bytes(b"")
    assert_user_error(train(tmp_path / "facades", tmp_path / "ck", *PIX), bad)


def test_text_file_named_png_exits_2_naming_the_file(tmp_path):
    bad = tmp_path / "facades" / "train" / "0000.png"
    write_aligned(bad.parent, 2)
    bad.write_text("this is not an image\n")
    assert_user_error(train(tmp_path / "facades", tmp_path / "ck", *PIX), bad)


@pytest.mark.slow
@pytest.mark.parametrize("num_threads", ["0", "2"])
def test_truncated_jpeg_found_during_training_exits_2_naming_it_and_keeps_checkpoints(num_threads, tmp_path):
    # The first image is read before training starts; the truncated one is the last, so it is
    # only met inside the epoch loop -- in a DataLoader worker process when num_threads > 0.
    paths = write_aligned(tmp_path / "facades" / "train", 4, ".jpg")
    data = paths[-1].read_bytes()
    paths[-1].write_bytes(data[: len(data) // 2])
    ckpt = tmp_path / "ck"
    old, old_bytes = preexisting_checkpoint(ckpt)
    result = train(tmp_path / "facades", ckpt, *PIX, "--num_threads", num_threads)
    assert "The number of training images = 4" in result.stdout  # training had started
    assert_user_error(result, paths[-1])
    assert old.read_bytes() == old_bytes


# ---------------------------------------------------------------------------------- flags that do not fit the network
def test_unet_256_with_crop_size_100_exits_2_naming_netG_and_crop_size(paired_root, tmp_path):
    ckpt = tmp_path / "ck"
    old, old_bytes = preexisting_checkpoint(ckpt)
    result = train(paired_root, ckpt, "--model", "pix2pix", "--netG", "unet_256",
                   "--load_size", "100", "--crop_size", "100")
    assert_user_error(result, "--netG unet_256", "--crop_size", "100")
    assert old.read_bytes() == old_bytes


# ---------------------------------------------------------------------------------- checkpoints for test.py
class Payload:
    """Unpickling this runs code (touches a marker file); a weights file must never do that."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return pathlib.Path.touch, (pathlib.Path(self.marker),)


@pytest.mark.parametrize("writer", ["torch.save", "pickle.dump"])
def test_checkpoint_that_is_not_plain_weights_is_refused_without_running_it(writer, paired_root, tmp_path):
    marker = tmp_path / "code_was_run"
    ckpt_file = tmp_path / "ck" / "bad" / "latest_net_G.pth"
    ckpt_file.parent.mkdir(parents=True)
    with open(ckpt_file, "wb") as f:
        if writer == "torch.save":
            torch.save({"weight": Payload(marker)}, f)
        else:
            pickle.dump(Payload(marker), f)
    before = ckpt_file.read_bytes()
    result = run_script("test.py", "--dataroot", str(paired_root), "--name", "bad", *PIX, "--ngf", "8",
                        "--num_threads", "0", "--load_size", "32", "--crop_size", "32",
                        "--checkpoints_dir", str(tmp_path / "ck"), "--results_dir", str(tmp_path / "res"))
    assert_user_error(result, ckpt_file)
    assert not marker.exists()
    assert ckpt_file.read_bytes() == before


def test_missing_checkpoint_for_test_py_names_the_file_and_epoch_flag(paired_root, tmp_path):
    run_dir = tmp_path / "ck" / "facades"
    run_dir.mkdir(parents=True)
    (run_dir / "latest_net_G.pth").write_bytes(b"placeholder")
    result = run_script("test.py", "--dataroot", str(paired_root), "--name", "facades", *PIX, "--ngf", "8",
                        "--num_threads", "0", "--load_size", "32", "--crop_size", "32", "--epoch", "7",
                        "--checkpoints_dir", str(tmp_path / "ck"), "--results_dir", str(tmp_path / "res"))
    message = assert_user_error(result, run_dir / "7_net_G.pth", "--epoch")
    assert "latest_net_G.pth" in message  # and says which checkpoints do exist
