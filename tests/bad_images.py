"""Corpus cases of tests/test_bad_input.py for image inputs: dataset folders, files that are not readable
images (refused before training, naming the file), damage behind an intact header (found during training),
sizes, channel counts and bit depths (converted, not refused), flags, checkpoints for test.py, and a second
run on the same folder."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from bad_input_kit import (
    CYCLE,
    NAME,
    PIX,
    Case,
    Setup,
    aligned,
    eval_args,
    mode_of,
    random_pixels,
    run_args,
    train_in_process,
)
from conftest import ROOT


def with_bad_file(work: Path, content: bytes, index: int = 0, count: int = 3) -> Path:
    paths = aligned(work / "data" / "train", count)
    paths[index].write_bytes(content)
    return paths[index]


def truncated_jpeg(work: Path) -> Path:
    # The header is intact, so nothing is noticed before training; the first image is read
    # before the loop starts, so the broken one is the last and is met inside the epoch.
    paths = aligned(work / "data" / "train", 4, ext=".jpg")
    data = paths[-1].read_bytes()
    paths[-1].write_bytes(data[: len(data) // 2])
    return paths[-1]


def b_empty_dataroot(work):
    (work / "data").mkdir()
    return Setup(run_args(work, *CYCLE), stderr_has=(work / "data",))


def b_missing_trainB(work):
    for i in range(2):
        (work / "data" / "trainA").mkdir(parents=True, exist_ok=True)
        Image.fromarray(random_pixels(i, 32, 32)).save(work / "data" / "trainA" / f"{i}.png")
    return Setup(run_args(work, *CYCLE), stderr_has=(work / "data" / "trainB", "--dataroot"))


def b_zero_byte(work):
    bad = with_bad_file(work, b"")
    return Setup(run_args(work, *PIX), stderr_has=(bad, "empty (0 bytes)", "remove or replace"))


def b_text_named_png(work):
    bad = with_bad_file(work, b"this is not an image\n", index=1)
    return Setup(run_args(work, *PIX), stderr_has=(bad, "not an image", "this is not an image"))


def b_git_lfs_pointer(work):
    bad = with_bad_file(work, b"version https://git-lfs.github.com/spec/v1\noid sha256:0123\nsize 4711\n", index=2)
    return Setup(run_args(work, *PIX), stderr_has=(bad, "git lfs pull"))


def b_unreadable_header(work):
    png = (work / "probe.png")
    Image.fromarray(random_pixels(0)).save(png)
    bad = with_bad_file(work, png.read_bytes()[:40], index=1)  # signature and part of the IHDR chunk
    return Setup(run_args(work, *PIX), stderr_has=(bad, "cannot read image"))


def b_zero_byte_skipped(work):
    bad = with_bad_file(work, b"", index=2)
    return Setup(run_args(work, *PIX, "--skip_bad_images"), stderr_has=("warning", bad, "--skip_bad_images"))


def b_truncated_jpeg(work):
    bad = truncated_jpeg(work)
    return Setup(run_args(work, *PIX), stderr_has=(bad, "truncated"),
                 stdout_has=("The number of training images = 4",))


def b_truncated_jpeg_skipped(work):
    bad = truncated_jpeg(work)
    return Setup(run_args(work, *PIX, "--skip_bad_images"), stderr_has=("warning", bad, "truncated"),
                 stdout_has=("The number of training images = 4",))


def tiny_pair(work: Path) -> Path:
    """A 2x1 A|B image: A and B are one pixel each."""
    paths = aligned(work / "data" / "train", 3)
    Image.new("RGB", (2, 1), (200, 30, 30)).save(paths[1])
    return paths[1]


def b_one_pixel_resized(work):
    tiny = tiny_pair(work)
    return Setup(run_args(work, *PIX), stderr_lacks=(tiny,))  # resize_and_crop scales it to 32x32


def b_one_pixel_preprocess_none(work):
    tiny = tiny_pair(work)
    return Setup(run_args(work, *PIX, "--preprocess", "none"),
                 stderr_has=(tiny, "1x1", "--preprocess none", "--netG resnet_6blocks", "resize_and_crop"))


def b_mixed_sizes_in_a_batch(work):
    paths = aligned(work / "data" / "train", 3)
    Image.fromarray(random_pixels(9, 48, 96)).save(paths[2])  # A and B 48x48 instead of 32x32
    return Setup(run_args(work, *PIX, "--preprocess", "none", "--batch_size", "2"),
                 stderr_has=(paths[0], paths[2], "--batch_size 2", "32x32", "48x48"))


def b_scale_width_heights_unfit_for_the_decay_epochs(work):
    """CUT's decay epochs scale each image to the width --crop_size 40: a 48x64 half then reaches the generator
    as 40x53, which its multiples of 4 do not take (at --load_size 48 it is 48x64, which they do)."""
    paths = aligned(work / "data" / "train", 2, make=lambda i: Image.fromarray(random_pixels(i, 64, 96)))
    return Setup(run_args(work, "--model", "cut", "--dataset_mode", "aligned", "--preprocess", "scale_width",
                          "--load_size", "48", "--crop_size", "40", "--n_epochs_decay", "1"),
                 stderr_has=(paths[0], "decay epochs", "--crop_size 40", "40x53"), stdout_lacks=("model [",))


def b_odd_width(work):
    paths = aligned(work / "data" / "train", 3)
    Image.fromarray(random_pixels(5, 32, 63)).save(paths[1])
    return Setup(run_args(work, *PIX), stderr_has=(paths[1], "63x32", "even width", f"re-save {paths[1]} as A|B"))


def b_rgba(work):
    def make(i):
        px = random_pixels(i, channels=4)
        px[:8, :, 3] = 0  # a fully transparent band
        return Image.fromarray(px)
    paths = aligned(work / "data" / "train", 2, make)
    assert mode_of(paths[0]) == "RGBA"
    return Setup(run_args(work, *PIX), stderr_lacks=(paths[0],))


def b_16bit(work):
    def make(i):
        return Image.fromarray(np.random.default_rng(i).integers(0, 65536, (32, 64), dtype=np.uint16))
    paths = aligned(work / "data" / "train", 2, make)
    assert mode_of(paths[0]).startswith("I")  # I;16 (or I in older Pillow)
    return Setup(run_args(work, *PIX), stderr_lacks=(paths[0],))


def b_gray_with_input_nc_3(work):
    paths = aligned(work / "data" / "train", 2, lambda i: Image.fromarray(random_pixels(i)).convert("L"))
    return Setup(run_args(work, *PIX, "--input_nc", "3", "--output_nc", "3"), stderr_lacks=(paths[0],))


def b_other_modes(work):
    makers = [lambda i: Image.fromarray(random_pixels(i)).convert("P"),     # palette
              lambda i: Image.fromarray(random_pixels(i, channels=4)).convert("LA"),  # gray + alpha
              lambda i: Image.fromarray(random_pixels(i)).convert("1")]     # 1 bit
    paths = aligned(work / "data" / "train", 3, lambda i: makers[i](i))
    cmyk = work / "data" / "train" / "0003.jpg"
    Image.fromarray(random_pixels(3)).convert("CMYK").save(cmyk)
    return Setup(run_args(work, *PIX, "--input_nc", "1"), stderr_lacks=(*paths, cmyk))


def b_wrong_direction(work):
    aligned(work / "data" / "train", 2)
    return Setup(run_args(work, *PIX, "--direction", "AB"),
                 stderr_has=("--direction", "invalid choice", "AtoB", "BtoA"))


def b_unet_256_crop_100(work):
    aligned(work / "data" / "train", 2)
    return Setup(run_args(work, "--model", "pix2pix", "--netG", "unet_256", "--load_size", "100", "--crop_size", "100"),
                 stderr_has=("--netG unet_256", "--crop_size", "100"))


def b_checkpoint_not_weights(work):
    aligned(work / "data" / "test", 1)
    ckpt = work / "ck" / NAME / "latest_net_G.pth"
    ckpt.parent.mkdir(parents=True)
    torch.save({"epoch": 3, "lr": 0.0002, "note": "a training log, not network weights"}, ckpt)
    return Setup(eval_args(work), stderr_has=(ckpt, "network weights"))


def b_checkpoint_of_other_netG(work):
    aligned(work / "data" / "train", 2)
    aligned(work / "data" / "test", 1)
    train_in_process(run_args(work, *PIX))  # a real run writes weights + architecture.json
    ckpt = work / "ck" / NAME / "latest_net_G.pth"
    return Setup(eval_args(work, "--netG", "resnet_9blocks"),
                 stderr_has=(ckpt, "--netG resnet_6blocks", "--netG resnet_9blocks"))


LOSS_LINE = re.compile(r"\(epoch: \d+, iters: \d+")


def b_second_concurrent_run(work):
    """A first run that trains "forever" holds the run folder; the second must leave it alone."""
    aligned(work / "data" / "train", 2)
    run_dir = work / "ck" / NAME
    out = work / "first.out"
    never = ["--n_epochs", "100000", "--print_freq", "1", "--save_epoch_freq", "100000",
             "--save_latest_freq", "100000000", "--display_freq", "100000000", "--update_html_freq", "100000000"]
    with open(out, "w") as log:
        first = subprocess.Popen([sys.executable, str(ROOT / "train.py"), *run_args(work, *PIX), *never],
                                 cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                 env={**os.environ, "OMP_NUM_THREADS": "1"})

    def stop_first():
        if first.poll() is None:
            first.send_signal(signal.SIGKILL)  # not SIGTERM: that would make it save a checkpoint
        first.wait(timeout=60)

    deadline = time.monotonic() + 150
    while not ((run_dir / ".run.lock").exists() and LOSS_LINE.search(out.read_text())):
        if first.poll() is not None or time.monotonic() > deadline:
            stop_first()
            raise AssertionError(f"the first run did not start training:\n{out.read_text()[-3000:]}")
        time.sleep(0.1)
    lock_text = (run_dir / ".run.lock").read_text()
    options = (run_dir / "train_opt.txt").read_bytes()
    assert f"pid {first.pid}" in lock_text

    def after():
        assert first.poll() is None, "the second run disturbed the first one"
        assert (run_dir / ".run.lock").read_text() == lock_text
        assert (run_dir / "train_opt.txt").read_bytes() == options  # the second run's options differ

    return Setup(run_args(work, *PIX, "--lr", "0.001"),
                 stderr_has=(run_dir, "another training run", f"pid {first.pid}"), after=after, cleanup=[stop_first])


IMAGE_CASES = [
    # dataset folders
    Case("empty dataroot folder is refused naming it", b_empty_dataroot, 2),
    Case("unaligned data without trainB is refused naming trainB", b_missing_trainB, 2),
    # files that are not readable images: refused before training, naming the file
    Case("zero-byte png is refused naming the file", b_zero_byte, 2),
    Case("text file named png is refused naming the file and showing its text", b_text_named_png, 2),
    Case("git-lfs pointer named png is refused suggesting git lfs pull", b_git_lfs_pointer, 2),
    Case("png cut off inside its header is refused naming the file", b_unreadable_header, 2),
    Case("zero-byte file with --skip_bad_images proceeds with a warning naming it", b_zero_byte_skipped, 0),
    # damage behind an intact header: found during training
    Case("truncated jpeg found during training is refused naming it", b_truncated_jpeg, 2),
    Case("truncated jpeg with --skip_bad_images proceeds with a warning naming it", b_truncated_jpeg_skipped, 0,
         own_process=True),  # the representative of a run that proceeds with a warning
    # sizes
    Case("1-px image is resized by resize_and_crop and proceeds", b_one_pixel_resized, 0),
    Case("1-px image with --preprocess none is refused naming its size and the flag", b_one_pixel_preprocess_none, 2),
    Case("differently sized images with --preprocess none and --batch_size 2 are refused naming both",
         b_mixed_sizes_in_a_batch, 2),
    Case("odd-width aligned image is refused naming it and how to re-save it", b_odd_width, 2),
    Case("scale_width to --crop_size in cut's decay epochs is refused before training where an image would not fit",
         b_scale_width_heights_unfit_for_the_decay_epochs, 2),
    # channel counts and bit depths are converted, not refused
    Case("rgba png proceeds", b_rgba, 0),
    Case("16-bit png proceeds", b_16bit, 0),
    Case("grayscale images with --input_nc 3 proceed", b_gray_with_input_nc_3, 0),
    Case("palette, gray+alpha, 1-bit and cmyk images with --input_nc 1 proceed", b_other_modes, 0),
    # flags
    Case("wrong --direction value is refused listing AtoB and BtoA", b_wrong_direction, 2),
    Case("unet_256 with --crop_size 100 is refused naming --crop_size", b_unet_256_crop_100, 2),
    # checkpoints for test.py
    Case("non-weights pickle as checkpoint is refused by test.py naming it", b_checkpoint_not_weights, 2,
         script="test.py", own_process=True),  # the representative of test.py's refusals
    Case("checkpoint of another --netG is refused by test.py naming the file and the --netG to use",
         b_checkpoint_of_other_netG, 2, script="test.py"),
    # the run folder
    Case("second concurrent run on the same --name is refused by the run lock naming the folder",
         b_second_concurrent_run, 2, own_process=True),  # two processes on one folder, as two terminals
]
