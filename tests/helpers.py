"""What the tests share (STYLE 18: through this module, tests/helpers_weights.py, tests/helpers_volumes.py or
conftest's fixtures, never by importing another test module): small runs' command lines, those runs in a
process of their own, as ranks or here, runs killed when their log reaches a step, a few models trained
step by step in the test process, and the inputs several test files build (images, served runs, weights files
that would run code, benchmark rows)."""
from __future__ import annotations

import io
import math
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from conftest import FAST_FLAGS, ROOT, free_port, run_in_process, run_script, torchrun, torchrun_command, train_on
from models import create_model
from options.base_options import save_options
from options.train_options import TrainOptions
from processes import ScriptProcess, run_ranks, run_script_process
from util.distributed import DistContext
from util.seeding import seed_everything

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}  # the same arithmetic in every run


# ----------------------------------------------------------------------------- finished processes
def ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    """`result`, which must have exited 0 (else its output's ends, and a crashed worker's thread dump)."""
    # a worker killed by a signal prints where each thread was (faulthandler) before the module list: keep that part
    fatal = result.stderr.find("Fatal Python error")
    crash = f"\nCRASH:\n{result.stderr[fatal:fatal + 4000]}" if fatal >= 0 else ""
    assert result.returncode == 0, \
        f"exit {result.returncode}\nSTDOUT:\n{result.stdout[-3000:]}\nSTDERR:\n{result.stderr[-5000:]}{crash}"
    return result


def succeeded(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    """`result`, which must have exited 0 (else its output's ends)."""
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    return result


# ----------------------------------------------------------------------------- training runs
def train_command(args: list[str], nproc: int = 0, extra: tuple[str, ...] = ()) -> list[str]:
    """`python train.py args`, or with `nproc` `torchrun --nproc_per_node=nproc [extra] train.py args`."""
    if nproc:
        return torchrun_command("train.py", *args, nproc=nproc, extra=extra)
    return [sys.executable, str(ROOT / "train.py"), *args]


def run(command: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    """`command` (train_command's) run to its end in a process of its own; it must succeed."""
    return succeeded(run_script_process(command, ROOT, {**ENV, **(env or {})}, timeout=300))


def run_two_ranks(args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    """train.py with `args` as the 2 workers of a one-node torchrun, started without the launcher
    (conftest.ranks): a 2-process reference or continuation whose launcher proves nothing."""
    return succeeded(run_ranks(ROOT / "train.py", args, {**ENV, **(env or {})}, ROOT, timeout=300, port=free_port()))


def run_here(args: list[str]) -> subprocess.CompletedProcess:
    """train.py with `args` in this process: uninterrupted and continued runs need no process of their
    own (the killed ones do), and this one computes on one thread as they do, so the arithmetic is the same."""
    return succeeded(run_in_process("train.py", *args))


def interrupt_when_logged(command: list[str], log: Path, marker: str, sig: int = signal.SIGKILL,
                          victim: str = "process", env: dict | None = None) -> ScriptProcess:
    """Start `command`, wait until `marker` appears in `log`, then send `sig` to the process
    (or, with victim="worker", to the last worker of the torchrun agent `command` starts). Returns the
    finished process."""
    proc = ScriptProcess(command, ROOT, {**ENV, **(env or {})}, merge_stderr=True)
    try:
        deadline = time.time() + 240
        while not (log.exists() and marker in log.read_text()):
            assert proc.poll() is None, f"finished before {marker!r}:\n{proc.output_so_far()[0][-3000:]}"
            assert time.time() < deadline, f"{marker!r} never logged"
            time.sleep(0.01)
        workers = proc.children() if victim == "worker" else []
        assert victim != "worker" or workers, "the torchrun agent has no workers"
        os.kill(workers[-1] if victim == "worker" else proc.pid, sig)
        proc.output = proc.communicate(timeout=240)[0]
    finally:
        proc.kill()  # a test that failed leaves nothing running
    return proc


# ----------------------------------------------------------------------------- command lines: resumed runs
# 8 images per epoch, 2 epochs, a checkpoint every 3 images; crops, flips, a small image pool and
# (pix2pix) dropout and batch norm, so that every source of randomness and state is exercised.
COMMON = ["--load_size", "36", "--crop_size", "32", "--n_epochs", "1", "--n_epochs_decay", "1",
          "--print_freq", "1", "--save_latest_freq", "3", "--ngf", "8", "--ndf", "8", "--display_id", "0",
          "--num_threads", "0", "--seed", "7", "--no_html", "--no_progress"]


def cycle_gan(root: Path, ckpt: Path, name: str) -> list[str]:
    """CycleGAN on the unpaired images in `root` with COMMON's flags, as run `name` in `ckpt`."""
    return ["--dataroot", str(root), "--checkpoints_dir", str(ckpt), "--name", name, "--model", "cycle_gan",
            "--pool_size", "4", *COMMON]


def pix2pix(root: Path, ckpt: Path, name: str) -> list[str]:
    """pix2pix (resnet_6blocks) on the paired images in `root` with COMMON's flags, as run `name` in `ckpt`."""
    return ["--dataroot", str(root), "--checkpoints_dir", str(ckpt), "--name", name, "--model", "pix2pix",
            "--netG", "resnet_6blocks", *COMMON]


# ----------------------------------------------------------------------------- command lines: N processes vs one
# float64: the tolerances of helpers_weights.assert_trained_alike are float64's.
EQUIVALENCE = ["--dtype", "float64", "--n_epochs", "1", "--n_epochs_decay", "1", "--load_size", "32",
               "--crop_size", "32", "--print_freq", "2", "--save_epoch_freq", "1"]
# Deterministic data order and no randomness in the losses: the plainest case.
PLAIN = ["--serial_batches", "--no_flip", "--pool_size", "0"]
# A rank left waiting for a peer that has stopped would wait --ddp_timeout seconds. Runs given this flag
# set it far beyond their own time limit, so a run that ends at all ended without waiting.
NEVER = ["--ddp_timeout", "3600"]


def cycle_gan_args(root: Path, ckpt: Path, name: str, batch: int, *variant: str) -> list[str]:
    """CycleGAN with `batch` images per process, EQUIVALENCE's flags and `variant` (default PLAIN)."""
    return ["--dataroot", str(root), "--name", name, "--checkpoints_dir", str(ckpt), "--model", "cycle_gan",
            "--batch_size", str(batch), *EQUIVALENCE, *(variant or PLAIN), *FAST_FLAGS]


def pix2pix_args(root: Path, ckpt: Path, name: str, batch: int, norm: str) -> list[str]:
    """pix2pix (resnet_6blocks, no dropout, --norm `norm`) with `batch` images per process, EQUIVALENCE, PLAIN."""
    return ["--dataroot", str(root), "--name", name, "--checkpoints_dir", str(ckpt), "--model", "pix2pix",
            "--netG", "resnet_6blocks", "--no_dropout", "--norm", norm, "--batch_size", str(batch),
            *EQUIVALENCE, *PLAIN, *FAST_FLAGS]


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


# ----------------------------------------------------------------------------- command lines: the newer families
# BicycleGAN's 128 px networks, 4 filters wide
BICYCLE_GAN_TINY = ["--model", "bicycle_gan", "--netG", "unet_128", "--netE", "resnet_128", "--netD",
                    "basic_128_multi", "--netD2", "basic_128_multi", "--ngf", "4", "--nef", "4", "--ndf", "4",
                    "--nz", "3", "--load_size", "128", "--crop_size", "128", "--num_threads", "0"]
BICYCLE_GAN_TRAINING = ["--display_id", "0", "--seed", "9", "--no_html", "--no_progress"]
CUT_TINY = ["--model", "cut", "--ngf", "4", "--ndf", "4", "--netF_nc", "8", "--num_patches", "16", "--load_size",
            "32", "--crop_size", "32", "--num_threads", "0", "--display_id", "0", "--seed", "3", "--no_html",
            "--no_progress"]
SB_TINY = ["--model", "sb", "--ngf", "4", "--ndf", "4", "--netF_nc", "8", "--num_patches", "16", "--load_size", "32",
           "--crop_size", "32", "--num_threads", "0", "--display_id", "0", "--seed", "3", "--no_html", "--no_progress",
           "--num_timesteps", "3", "--lambda_SB", "1.0"]


def bicycle_gan_args(root: Path, ckpt: Path, name: str, *extra: str) -> list[str]:
    """A tiny BicycleGAN run `name` in `ckpt` on the paired images in `root`, with `extra`."""
    return ["--dataroot", str(root), "--checkpoints_dir", str(ckpt), "--name", name, *BICYCLE_GAN_TINY,
            *BICYCLE_GAN_TRAINING, *extra]


def cut_args(root: Path, ckpt: Path, name: str, *extra: str) -> list[str]:
    """A tiny CUT run `name` in `ckpt` on the unpaired images in `root`, with `extra`."""
    return ["--dataroot", str(root), "--checkpoints_dir", str(ckpt), "--name", name, *CUT_TINY, *extra]


def sb_args(root: Path, ckpt: Path, name: str, *extra: str) -> list[str]:
    """A tiny UNSB run (3 steps) `name` in `ckpt` on the unpaired images in `root`, with `extra`."""
    return ["--dataroot", str(root), "--checkpoints_dir", str(ckpt), "--name", name, *SB_TINY, *extra]


# ----------------------------------------------------------------------------- how the loader gave a run its images
# 64 px images loaded at --load_size 64 and cropped to 32, or (CUT's and UNSB's decay epochs) resized whole to 32;
# each epoch's first input shown on the training page (HTML on, a display every step)
CROP_OR_WHOLE = ["--load_size", "64", "--crop_size", "32", "--serial_batches", "--no_flip", "--n_epochs", "2",
                 "--n_epochs_decay", "1", "--display_freq", "1"]


def ramps(root: Path, count: int) -> list[np.ndarray]:
    """`count` 64 x 64 images in each of root/trainA and root/trainB: red and green ramps (4 levels a pixel) and a
    blue level of their own, so a 32 x 32 crop of one (slope 4) and one resized whole to 32 px (slope 8) never
    look alike; returns the trainA images."""
    y, x = np.mgrid[0:64, 0:64]
    images = [np.stack([4 * x, 4 * y, np.full_like(x, 20 + 40 * k)], -1).astype(np.uint8) for k in range(count)]
    for side in ("trainA", "trainB"):
        (root / side).mkdir(parents=True)
        for k, image in enumerate(images):
            Image.fromarray(image).save(root / side / f"{k}.png")
    return images


def how_loaded(run_dir: Path, epoch: int, sources: list[np.ndarray]) -> str:
    """How the input (real_A) of `epoch`'s first step, as the run's training page shows it, was made from one of
    `sources`: "whole" (resized whole to its size), "crop" (cut out of it at its own size) or "neither"."""
    shown = np.asarray(Image.open(run_dir / "web" / "images" / f"epoch{epoch:03d}_real_A.png").convert("RGB"), int)
    size = shown.shape[0]
    if any(np.abs(np.asarray(Image.fromarray(source).resize((size, size), Image.Resampling.BICUBIC), int)
                  - shown).max() <= 1 for source in sources):
        return "whole"
    crops = (source[top:top + size, left:left + size] for source in sources
             for top in range(source.shape[0] - size + 1) for left in range(source.shape[1] - size + 1))
    return "crop" if any(np.abs(crop.astype(int) - shown).max() <= 1 for crop in crops) else "neither"


# ----------------------------------------------------------------------------- models trained step by step here
# The flags of the fast path: each must train what the plain path trains (tests/test_fast_path.py).
EVERY_SPEED_FLAG = ["--amp", "bf16", "--channels_last", "--compile", "--fused_adam"]


def model(*flags: str, model_name: str = "cycle_gan"):
    """A set-up `model_name` (resnet_6blocks, 8 filters, no pool, no dropout) with `flags`, seeded 0."""
    opt = TrainOptions().parse(["--dataroot", "unused", "--model", model_name, "--ngf", "8", "--ndf", "8",
                                "--pool_size", "0", "--no_dropout", "--netG", "resnet_6blocks", *flags])
    seed_everything(0)
    m = create_model(opt, DistContext())
    m.setup(opt)
    return m


def first_losses(m, batches: list[dict], steps: int = 3) -> list[list[float]]:
    """The losses `m` reports after each of its first `steps` training steps on `batches`."""
    history = []
    for batch in batches[:steps]:
        train_on(m, batch)
        history.append(list(m.get_current_losses().values()))
    return history


def batches(n: int = 3, size: int = 32) -> list[dict]:
    """`n` batches of one random A/B pair of `size` x `size` pixels in [-1, 1], the same every call."""
    generator = torch.Generator().manual_seed(1)
    return [{"A": torch.rand(1, 3, size, size, generator=generator) * 2 - 1,
             "B": torch.rand(1, 3, size, size, generator=generator) * 2 - 1,
             "A_paths": ["a.png"], "B_paths": ["b.png"]} for _ in range(n)]


# ----------------------------------------------------------------------------- images and test.py
def smooth_image(height: int = 768, width: int = 1024) -> torch.Tensor:
    """A 1x3xHxW image in [-1, 1] with large-scale structure, so that tiles differ in content."""
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, height), torch.linspace(-1, 1, width), indexing="ij")
    return torch.stack([torch.sin(3 * xx + yy), torch.cos(2 * yy * xx),
                        torch.tanh(8 * (xx - 0.2)) * 0.6 + 0.2 * torch.sin(9 * yy)])[None]


def run_test_py(images, ckpt, results, *extra, env: dict | None = None) -> subprocess.CompletedProcess:
    """test.py on the images in `images` with run "r" of `ckpt` (conftest's `resnet_checkpoint`), --eval."""
    return run_script("test.py", "--dataroot", str(images), "--name", "r", "--model", "test", "--netG",
                      "resnet_6blocks", "--norm", "batch", "--ngf", "8", "--no_dropout", "--num_threads", "0", "--eval",
                      "--checkpoints_dir", str(ckpt), "--results_dir", str(results), *extra, env=env)


def png_bytes(array: np.ndarray) -> bytes:
    """`array` (H x W x 3, uint8) as the bytes of a PNG file."""
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


def photo(seed: int, height: int = 36, width: int = 52) -> np.ndarray:
    """A random 8-bit RGB picture (H x W x 3), the same for a seed."""
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


# ----------------------------------------------------------------------------- runs served (scripts/serve.py)
# Weights far from the usual N(0, 0.02) start, so that a wrong network or direction shows in every pixel.
SERVED_INIT = ["--init_type", "xavier", "--init_gain", "1.0", "--ndf", "4"]
SERVED_FAMILIES = {
    "cycle_gan": ["--model", "cycle_gan", "--ngf", "4"],
    "pix2pix": ["--model", "pix2pix", "--ngf", "4", "--netG", "resnet_6blocks", "--direction", "BtoA"],
    "cut": ["--model", "cut", "--ngf", "4", "--netF_nc", "8"],
    "bicycle_gan": ["--model", "bicycle_gan", "--netG", "unet_128", "--netE", "resnet_128", "--netD",
                    "basic_128_multi", "--netD2", "basic_128_multi", "--ngf", "4", "--nef", "4", "--nz", "3"],
    "sb": ["--model", "sb", "--ngf", "4", "--netF_nc", "8", "--num_timesteps", "3"],
    "volume": ["--model", "pix2pix", "--dataset_mode", "aligned_volume", "--netG", "resnet_6blocks_3d", "--ngf", "4",
               "--netD", "n_layers_3d", "--input_nc", "1", "--output_nc", "1", "--patch_size", "8,8,8",
               "--data_range", "0", "1000"],
    "gray16": ["--model", "pix2pix", "--ngf", "4", "--netG", "resnet_6blocks", "--input_nc", "1", "--output_nc", "1"],
}


def save_run(checkpoints: Path, name: str, flags: list[str]) -> Path:
    """A run folder as train.py writes it (weights, architecture.json, train_opt.json), untrained."""
    opt = TrainOptions().parse(["--dataroot", "unused", "--name", name, "--checkpoints_dir", str(checkpoints),
                                "--display_id", "0", *SERVED_INIT, *flags])
    save_options(opt)
    torch.manual_seed(0)
    create_model(opt, DistContext()).save_networks("latest")
    return checkpoints / name


# ----------------------------------------------------------------------------- weights files that hold code
class Payload:
    """Unpickling this runs code (touches a marker file); a weights file must never do that."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return pathlib.Path.touch, (pathlib.Path(self.marker),)


# ----------------------------------------------------------------------------- the benchmark's rows and FLOPs
def positive(value) -> bool:
    """A finite number above 0."""
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def check_timing(row: dict) -> None:
    """A timed row of dev/benchmark.py's report: no error; median step time, quartiles and peak memory
    positive and ordered; at least 3 steps, each timed."""
    assert "error" not in row, row.get("error")
    for key in ("median_s", "q1_s", "q3_s", "min_s", "max_s", "peak_mem_mb"):
        assert positive(row[key]), (key, row)
    assert row["min_s"] <= row["q1_s"] <= row["median_s"] <= row["q3_s"] <= row["max_s"]
    assert row["steps"] >= 3 and len(row["times_s"]) == row["steps"]


def conv_layer_flops(net: nn.Module, shape: tuple[int, ...]) -> list[int]:
    """Forward FLOPs of each convolution (2-D or 3-D, plain or transposed) of `net`, in the order they
    run on an input of `shape`: 2 x multiplies, from the layer's weight shape and the tensor shapes a
    hook sees."""
    flops = []

    def hook(module, inputs, output):
        k = math.prod(module.kernel_size)
        per_pixel = 2 * (module.in_channels // module.groups) * module.out_channels * k
        # A conv computes every output pixel (voxel) from a kernel window; a transposed conv scatters
        # a kernel from every input pixel.
        pixels = inputs[0] if isinstance(module, (nn.ConvTranspose2d, nn.ConvTranspose3d)) else output
        flops.append(per_pixel * pixels.shape[0] * math.prod(pixels.shape[2:]))

    convolutions = (nn.Conv2d, nn.ConvTranspose2d, nn.Conv3d, nn.ConvTranspose3d)
    handles = [m.register_forward_hook(hook) for m in net.modules() if isinstance(m, convolutions)]
    with torch.no_grad():
        net.eval()(torch.zeros(shape))
    for handle in handles:
        handle.remove()
    return flops


def assert_flops_match(row: dict, expected: dict[str, dict[str, int]]) -> None:
    """The FLOPs the benchmark counted per network and phase in `row` are `expected`'s (per image) x its
    batch, to 1%, and add up to its FLOPs per step: every FLOP belongs to a network."""
    counted = row["flops_by_network"]
    assert set(counted) == set(expected), counted  # every FLOP belongs to a network: no "other"
    for net, phases in expected.items():
        for phase, flops in phases.items():
            assert counted[net][phase] == pytest.approx(flops * row["batch"], rel=0.01), (net, phase)
    assert sum(sum(p.values()) for p in counted.values()) == row["flops_per_step"]
