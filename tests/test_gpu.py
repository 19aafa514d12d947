"""The CUDA path, proved on a real GPU: `bash scripts/gpu_check.sh` runs this file (`pytest -m gpu`).

Every test needs PyTorch to see a CUDA GPU and is skipped, with that reason, where it does not.
The runs are the CPU suite's (tests/test_resume.py, tests/test_distributed.py, tests/test_tiling.py:
tiny networks, 32 px images, 8 of them) with --device cuda, so a failure here and not there
belongs to the GPU path. Tolerances, where results may differ from the CPU or between runs:

- test.py on the GPU vs on the CPU (fp32, TF32 off): every output pixel within 1 of 255 levels;
- 2 processes x batch 1 vs 1 process x batch 2 (float64): rtol 1e-6, atol 1e-7, as on the CPU;
- resume without --deterministic: the resumed run no further from the uninterrupted one than
  4 x the distance between two uninterrupted runs (at least 1e-3, relative L2 per network);
  with --deterministic: bit for bit.

IMG2IMG_GPU_TESTS_ON_CPU=1 runs the tests that can run on the CPU there instead (fp16 and NCCL
are skipped): a check of this file on a machine without a GPU, which proves nothing about CUDA.
"""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import ROOT, run_script
from test_benchmark import _check_timing
from test_distributed import (assert_a_failing_rank_ends_every_rank_quickly, assert_same_weights, cycle_gan_args, ok,
                              pix2pix_args, single, torchrun, weights)
from test_fast_path import EVERY_SPEED_FLAG
from test_resume import ENV, assert_identical, cycle_gan, final_weights, interrupt_when_logged, pix2pix, run, train_command
from test_tiling import resnet_checkpoint, run_test_py, smooth_image  # noqa: F401 (resnet_checkpoint: a fixture)
from util.display.loss_log import parse_loss_log

ON_CPU = os.environ.get("IMG2IMG_GPU_TESTS_ON_CPU") == "1"
DEVICE = "cuda" if torch.cuda.is_available() else ("cpu" if ON_CPU else None)
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(DEVICE is None, reason=(
    "no CUDA GPU: torch.cuda.is_available() is False (scripts/gpu_check.sh runs these on a GPU machine)"))]
cuda_only = pytest.mark.skipif(DEVICE != "cuda", reason="needs CUDA (skipped in the IMG2IMG_GPU_TESTS_ON_CPU dry run)")
two_gpus = pytest.mark.skipif(DEVICE != "cuda" or torch.cuda.device_count() < 2,
                              reason=f"NCCL needs a GPU per process: PyTorch sees {torch.cuda.device_count()} GPU(s)")
ON_DEVICE = ["--device", DEVICE or "cuda"]
CPU_ONLY = {**ENV, "CUDA_VISIBLE_DEVICES": ""}  # a process that sees no GPU, like a CPU-only machine
EXACT_FP32 = {**ENV, "NVIDIA_TF32_OVERRIDE": "0"}  # fp32 convolutions in fp32, not TF32


def run_args(model: str, unpaired_root: Path, paired_root: Path, ckpt: Path, name: str) -> list[str]:
    """test_resume's small run (8 images, 2 epochs) of `model`, on the device under test."""
    builder = cycle_gan if model == "cycle_gan" else pix2pix
    return builder(unpaired_root if model == "cycle_gan" else paired_root, ckpt, name) + ON_DEVICE


def args_for_test_py(model: str, unpaired_root: Path, paired_root: Path, ckpt: Path, name: str) -> list[str]:
    """test.py's flags for the checkpoints of `run_args(model, ...)`."""
    common = ["--checkpoints_dir", str(ckpt), "--name", name, "--ngf", "8", "--ndf", "8", "--load_size", "32",
              "--crop_size", "32", "--num_threads", "0"]
    if model == "cycle_gan":
        return ["--dataroot", str(unpaired_root), "--model", "cycle_gan", *common]
    return ["--dataroot", str(paired_root), "--model", "pix2pix", "--netG", "resnet_6blocks", *common]


# ----------------------------------------------------------------------------- every setting, train and test

SETTINGS = {"fp32": [], "bf16": ["--amp", "bf16"], "fp16": ["--amp", "fp16"], "channels_last": ["--channels_last"],
            "compile": ["--compile"], "every_speed_flag": EVERY_SPEED_FLAG,
            "every_speed_flag_fp16": ["--amp", "fp16", "--channels_last", "--compile", "--fused_adam"]}
TRAINING_ONLY = {"--fused_adam"}


@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("model", ["cycle_gan", "pix2pix"])
def test_trains_and_tests_on_the_gpu_and_its_checkpoints_load_on_a_cpu(model, setting, unpaired_root, paired_root,
                                                                       tmp_path):
    flags = SETTINGS[setting]
    if "fp16" in flags and DEVICE != "cuda":
        pytest.skip("--amp fp16 needs CUDA (skipped in the IMG2IMG_GPU_TESTS_ON_CPU dry run)")
    trained = run(train_command(run_args(model, unpaired_root, paired_root, tmp_path, "run") + flags))
    assert "runs uncompiled" not in trained.stderr  # --compile did compile (it needs a C compiler)
    log = tmp_path / "run" / "loss_log.txt"
    assert f"processes) on {DEVICE}" in log.read_text()
    records = [r for section in parse_loss_log(str(log)) for r in section.records]
    assert len(records) == 16 and all(math.isfinite(v) for r in records for v in r.losses.values())
    for path in sorted((tmp_path / "run").glob("latest_net_*.pth")):  # the reference's format, on the CPU
        state = torch.load(path, weights_only=True)
        assert all(t.device.type == "cpu" for t in state.values()), path
        assert not any(k.startswith(("module.", "_orig_mod.")) for k in state), path

    testing = args_for_test_py(model, unpaired_root, paired_root, tmp_path, "run")
    on_gpu = [*ON_DEVICE, *(f for f in flags if f not in TRAINING_ONLY)]  # test.py with the same settings
    for where, env, results in ((on_gpu, ENV, "gpu"), (["--device", "cpu"], CPU_ONLY, "cpu")):
        result = run_script("test.py", *testing, *where, "--results_dir", str(tmp_path / results), env=env)
        assert result.returncode == 0, result.stderr[-3000:]
        assert len(list((tmp_path / results / "run" / "test_latest" / "images").glob("*_fake_*.png"))) >= 4


# ----------------------------------------------------------------------------- test.py: GPU equals CPU, tiles


@pytest.mark.parametrize("tiling", [[], ["--tile", "64", "--tile_overlap", "32"]], ids=["whole", "tiled"])
def test_test_py_on_the_gpu_equals_test_py_on_the_cpu(tiling, resnet_checkpoint, tmp_path):  # noqa: F811
    images = tmp_path / "in"
    images.mkdir()
    picture = ((smooth_image(150, 230)[0].permute(1, 2, 0).numpy() + 1) * 127.5).round().astype(np.uint8)
    Image.fromarray(picture).save(images / "big.png")
    for device in (DEVICE, "cpu"):
        result = run_test_py(images, resnet_checkpoint, tmp_path / device, "--preprocess", "none", "--device", device,
                             *tiling, env=EXACT_FP32)
        assert result.returncode == 0, result.stderr[-3000:]
    on_device, on_cpu = (np.asarray(Image.open(tmp_path / d / "r" / "test_latest" / "images" / "big_fake.png"),
                                    dtype=int) for d in (DEVICE, "cpu"))
    assert on_device.shape == (150, 230, 3)
    assert np.abs(on_device - on_cpu).max() <= 1  # fp32 rounding may flip a pixel by one level


# ----------------------------------------------------------------------------- resuming exactly


def relative_distance(a: dict, b: dict) -> float:
    """The largest relative L2 distance between the same network's weights in `a` and `b`."""
    def flat(state: dict) -> torch.Tensor:
        return torch.cat([t.double().flatten() for t in state.values() if t.is_floating_point()])
    return max(((flat(a[n]) - flat(b[n])).norm() / flat(b[n]).norm()).item() for n in a)


def long_run(model: str, unpaired_root: Path, paired_root: Path, ckpt: Path, name: str, *flags: str) -> list[str]:
    """20 epochs of 8 images: long enough on a GPU to be killed well before its end."""
    args = run_args(model, unpaired_root, paired_root, ckpt, name) + list(flags)
    args[args.index("--n_epochs") + 1] = args[args.index("--n_epochs_decay") + 1] = "10"
    return args


def killed_and_resumed(args: list[str], run_dir: Path) -> dict:
    killed = interrupt_when_logged(train_command(args), run_dir / "loss_log.txt", "(epoch: 2, iters: 4,")
    assert killed.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    assert "resuming from" in run(train_command(args + ["--continue_train"])).stdout
    return final_weights(run_dir)


@pytest.mark.parametrize("model", ["cycle_gan", "pix2pix"])
def test_a_deterministic_gpu_run_killed_and_resumed_is_bit_identical(model, unpaired_root, paired_root, tmp_path):
    whole = long_run(model, unpaired_root, paired_root, tmp_path, "whole", "--deterministic")
    run(train_command(whole))
    cut = long_run(model, unpaired_root, paired_root, tmp_path, "cut", "--deterministic")
    assert_identical(killed_and_resumed(cut, tmp_path / "cut"), final_weights(tmp_path / "whole"))


@pytest.mark.parametrize("model", ["cycle_gan", "pix2pix"])
def test_a_gpu_run_killed_and_resumed_is_as_close_as_two_uninterrupted_runs(model, unpaired_root, paired_root,
                                                                             tmp_path):
    for name in ("whole", "again"):
        run(train_command(long_run(model, unpaired_root, paired_root, tmp_path, name)))
    whole, again = final_weights(tmp_path / "whole"), final_weights(tmp_path / "again")
    resumed = killed_and_resumed(long_run(model, unpaired_root, paired_root, tmp_path, "cut"), tmp_path / "cut")
    assert relative_distance(resumed, whole) <= max(4 * relative_distance(again, whole), 1e-3)


@cuda_only
def test_fp16_gradient_scaler_state_is_saved_and_resumed(unpaired_root, paired_root, tmp_path):
    fp16 = ["--amp", "fp16", "--deterministic"]
    run(train_command(long_run("pix2pix", unpaired_root, paired_root, tmp_path, "whole", *fp16)))
    saved = torch.load(tmp_path / "whole" / "latest_train_state.pth", weights_only=True)
    scalers = saved["model"]["grad_scalers"]  # one per optimizer; a disabled one saves {}
    assert scalers and all(scaler["scale"] > 0 for scaler in scalers)
    resumed = killed_and_resumed(long_run("pix2pix", unpaired_root, paired_root, tmp_path, "cut", *fp16),
                                 tmp_path / "cut")
    assert_identical(resumed, final_weights(tmp_path / "whole"))


# ----------------------------------------------------------------------------- several processes on the GPU

# gloo carries CUDA tensors, so 2 processes can share one GPU; NCCL needs a GPU per process.
BACKENDS = [pytest.param("gloo"), pytest.param("nccl", marks=two_gpus)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_processes_on_the_gpu_train_the_same_cycle_gan_as_one_process_with_double_batch(backend, unpaired_root,
                                                                                            tmp_path):
    on_gpu = [*ON_DEVICE, "--ddp_backend", backend]
    ok(single("train.py", *cycle_gan_args(unpaired_root, tmp_path, "one", 2), *on_gpu))
    ok(torchrun("train.py", *cycle_gan_args(unpaired_root, tmp_path, "two", 1), *on_gpu))
    assert_same_weights(weights(tmp_path / "one"), weights(tmp_path / "two"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_pytorch_sync_batch_norm_on_the_gpu_matches_batch_norm_of_the_whole_batch(backend, paired_root, tmp_path):
    on_gpu = [*ON_DEVICE, "--ddp_backend", backend]
    ok(single("train.py", *pix2pix_args(paired_root, tmp_path, "one", 2, "batch"), *on_gpu))
    ok(torchrun("train.py", *pix2pix_args(paired_root, tmp_path, "two", 1, "syncbatch"), *on_gpu))
    assert_same_weights(weights(tmp_path / "one"), weights(tmp_path / "two"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_failing_rank_on_the_gpu_ends_every_rank_quickly(backend, unpaired_root, tmp_path):
    assert_a_failing_rank_ends_every_rank_quickly(unpaired_root, tmp_path, *ON_DEVICE, "--ddp_backend", backend)


# ----------------------------------------------------------------------------- the benchmark


def test_the_benchmark_measures_speed_and_memory_on_the_gpu(tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "dev" / "benchmark.py"), "--device", DEVICE, "--quick",
                             "--models", "cycle_gan", "--sections", "peaks,step", "--configs", "bf16",
                             "--out", str(tmp_path)], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((tmp_path / "benchmark.json").read_text())
    assert report["meta"]["machine"]["device"] == DEVICE
    rows = {row["config"]: row for row in report["results"]["step"]}
    assert set(rows) == {"fp32", "bf16"}
    for row in rows.values():
        _check_timing(row)  # median step time, quartiles and peak memory, all positive
        assert 0 < row["utilisation_of_conv_peak"] < 10
