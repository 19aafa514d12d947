"""The CUDA path, proved on a real GPU: `bash scripts/gpu_check.sh` runs this file (`pytest -m gpu`).

Every test needs PyTorch to see a CUDA GPU and is skipped, with that reason, where it does not.
The runs are the CPU suite's (tests/test_resume.py, tests/test_distributed.py, tests/test_tiling.py:
tiny networks, 32 px images, 8 of them) with --device cuda, so a failure here and not there
belongs to the GPU path. Tolerances, where results may differ from the CPU or between runs:

- test.py on the GPU vs on the CPU (fp32, TF32 off): every output pixel within 1 of 255 levels;
- 2 processes x batch 1 vs 1 process x batch 2 (float64): as on the CPU (helpers_weights.assert_trained_alike);
- resume without --deterministic: the resumed run no further from the uninterrupted one than
  4 x the distance between two uninterrupted runs (at least 1e-3, relative L2 per network);
  with --deterministic: bit for bit.

IMG2IMG_GPU_TESTS_ON_CPU=1 runs the tests that can run on the CPU there instead (fp16 and NCCL
are skipped): a check of this file on a machine without a GPU, which proves nothing about CUDA.
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import ROOT, run_script, torchrun
from helpers import BICYCLE_GAN_TINY as BICYCLE_TINY
from helpers import (
    ENV,
    EVERY_SPEED_FLAG,
    assert_a_failing_rank_ends_every_rank_quickly,
    check_timing,
    cut_args,
    cycle_gan,
    cycle_gan_args,
    interrupt_when_logged,
    ok,
    pix2pix,
    pix2pix_args,
    run,
    run_test_py,
    sb_args,
    smooth_image,
    train_command,
)
from helpers import bicycle_gan_args as bicycle_args
from helpers_weights import assert_identical, assert_trained_alike, final_weights, weights
from util.display.loss_log import parse_loss_log

try:
    import nibabel as nib
except ImportError:  # the volume checks skip, saying so; the others run
    nib = None
if nib is not None:
    from helpers_volumes import GENERATOR as VOLUME_GENERATOR
    from helpers_volumes import SMALL_NETS as VOLUME_NETS
    from helpers_volumes import pix2pix_args as volume_pix2pix_args
    from helpers_volumes import synthetic_volumes

ON_CPU = os.environ.get("IMG2IMG_GPU_TESTS_ON_CPU") == "1"
DEVICE = "cuda" if torch.cuda.is_available() else ("cpu" if ON_CPU else None)
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(DEVICE is None, reason=(
    "no CUDA GPU: torch.cuda.is_available() is False (scripts/gpu_check.sh runs these on a GPU machine)"))]
cuda_only = pytest.mark.skipif(DEVICE != "cuda", reason="needs CUDA (skipped in the IMG2IMG_GPU_TESTS_ON_CPU dry run)")
needs_nibabel = pytest.mark.skipif(nib is None, reason=(
    "the volume checks need nibabel (requirements.txt): install it, or pass scripts/gpu_check.sh --wheels with "
    "its wheel"))
needs_monai = pytest.mark.skipif(importlib.util.find_spec("monai") is None, reason=(
    "whole volumes and --tile are translated in MONAI's sliding windows (requirements.txt): install monai, or pass "
    "scripts/gpu_check.sh --wheels with its wheel"))
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


@pytest.mark.parametrize("tiling", [[], pytest.param(["--tile", "64", "--tile_overlap", "32"], marks=needs_monai)],
                         ids=["whole", "tiled"])
def test_test_py_on_the_gpu_equals_test_py_on_the_cpu(tiling, resnet_checkpoint, tmp_path):
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


# --compile on a GPU trains in CUDA graphs; compiled from the first step, so that every run replays them alike
GRAPHED = ["--compile", "--compile_probe", "0"]


@pytest.mark.parametrize("model,flags", [pytest.param("cycle_gan", [], id="cycle_gan"),
                                         pytest.param("pix2pix", [], id="pix2pix"),
                                         pytest.param("cycle_gan", GRAPHED, id="cycle_gan-cuda_graphs")])
def test_a_gpu_run_killed_and_resumed_is_as_close_as_two_uninterrupted_runs(model, flags, unpaired_root, paired_root,
                                                                             tmp_path):
    for name in ("whole", "again"):
        run(train_command(long_run(model, unpaired_root, paired_root, tmp_path, name, *flags)))
    whole, again = final_weights(tmp_path / "whole"), final_weights(tmp_path / "again")
    resumed = killed_and_resumed(long_run(model, unpaired_root, paired_root, tmp_path, "cut", *flags),
                                 tmp_path / "cut")
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


# ----------------------------------------------------------------------- the newer families: BicycleGAN, CUT, volumes

NEWER_FAMILIES = ["bicycle_gan", "cut", "sb", pytest.param("cycle_gan_3d", marks=needs_nibabel)]
TRAINING_DATA = {"bicycle_gan": "paired_root", "cut": "unpaired_root", "sb": "unpaired_root",
                 "cycle_gan_3d": "volumes"}  # fixtures


def newer_family_args(family: str, request: pytest.FixtureRequest, ckpt: Path, name: str, epochs: int = 1
                      ) -> list[str]:
    """Each family's small CPU-suite run (tests/test_bicyclegan.py, test_cut.py, test_volumes.py),
    `epochs` + `epochs` long, on the device under test; a checkpoint and a loss line every 2 images."""
    root = request.getfixturevalue(TRAINING_DATA[family])
    schedule = ["--n_epochs", str(epochs), "--n_epochs_decay", str(epochs), "--print_freq", "2",
                "--save_latest_freq", "2"]
    if family == "bicycle_gan":  # batch 2: one encoded and one random half
        args = bicycle_args(root, ckpt, name, "--max_dataset_size", "4")
    elif family == "cut":
        args = cut_args(root, ckpt, name, "--max_dataset_size", "4", "--nce_idt")
    elif family == "sb":
        args = sb_args(root, ckpt, name, "--max_dataset_size", "4")
    else:  # patches of 8^3 at random places, 2 per volume
        args = ["--dataroot", str(root), "--name", name, "--checkpoints_dir", str(ckpt), "--model", "cycle_gan",
                "--dataset_mode", "unaligned_volume", "--data_range", "-1", "1", "--patch_size", "8",
                "--patches_per_volume", "2", "--batch_size", "1", *VOLUME_NETS]
    return [*args, *schedule, *ON_DEVICE]


@pytest.fixture(scope="module")
def volumes(tmp_path_factory) -> Path:
    return synthetic_volumes(tmp_path_factory.mktemp("volumes"))


@pytest.mark.parametrize("precision", [[], ["--amp", "bf16"], ["--amp", "fp16"]], ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("family", NEWER_FAMILIES)
def test_the_newer_families_train_on_the_gpu_in_each_precision_and_their_checkpoints_load_on_a_cpu(
        family, precision, request, tmp_path):
    if "fp16" in precision and DEVICE != "cuda":
        pytest.skip("--amp fp16 needs CUDA (skipped in the IMG2IMG_GPU_TESTS_ON_CPU dry run)")
    run(train_command(newer_family_args(family, request, tmp_path, "run") + precision))
    log = tmp_path / "run" / "loss_log.txt"
    assert f"processes) on {DEVICE}" in log.read_text()
    records = [r for section in parse_loss_log(str(log)) for r in section.records]
    assert len(records) >= 2 and all(math.isfinite(v) for r in records for v in r.losses.values())
    checkpoints = sorted((tmp_path / "run").glob("latest_net_*.pth"))
    assert len(checkpoints) >= 3  # G and D at least, and E, D2 / F / the second pair
    for path in checkpoints:  # the reference's format, on the CPU
        state = torch.load(path, weights_only=True)
        assert all(t.device.type == "cpu" for t in state.values()), path
        assert not any(k.startswith(("module.", "_orig_mod.")) for k in state), path


def bicycle_test_py(paired_root: Path, run_dir: Path, results: Path, *where: str, env: dict) -> list[Path]:
    """test.py of BicycleGAN over 2 test pairs, 2 samples each from seed 4: the encoded output and the samples."""
    result = run_script("test.py", "--dataroot", str(paired_root), "--name", run_dir.name, "--checkpoints_dir",
                        str(run_dir.parent), "--results_dir", str(results), *BICYCLE_TINY, "--phase", "test",
                        "--num_test", "2", "--n_samples", "2", "--seed", "4", *where, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return sorted((results / run_dir.name / "test_latest" / "images").glob("*_fake_B*.png"))


def test_sb_on_the_gpu_gives_test_py_on_the_cpus_outputs_at_every_step_for_a_seed(unpaired_root, request, tmp_path):
    run(train_command(newer_family_args("sb", request, tmp_path, "run")))
    outputs = {}
    for where, device, env in (("gpu", DEVICE, EXACT_FP32), ("cpu", "cpu", CPU_ONLY)):
        result = run_script("test.py", "--dataroot", str(unpaired_root), "--name", "run", "--checkpoints_dir",
                            str(tmp_path), "--results_dir", str(tmp_path / where), "--model", "sb", "--ngf", "4",
                            "--load_size", "32", "--crop_size", "32", "--num_timesteps", "3", "--seed", "3",
                            "--phase", "test", "--num_test", "2", "--device", device, env=env)
        assert result.returncode == 0, result.stderr[-3000:]
        outputs[where] = sorted((tmp_path / where / "run" / "test_latest" / "images").glob("*_fake_*.png"))
    assert len(outputs["gpu"]) == 2 * 4  # fake_1 .. fake_3 and fake_B of 2 images
    for on_gpu, on_cpu in zip(outputs["gpu"], outputs["cpu"]):
        difference = np.abs(np.asarray(Image.open(on_gpu), dtype=int) - np.asarray(Image.open(on_cpu), dtype=int))
        assert difference.max() <= 1, on_gpu.name  # the same noise (drawn on the CPU), fp32 rounding apart


def test_bicycle_gan_on_the_gpu_gives_test_py_on_the_cpus_encoded_outputs_and_samples(paired_root, request, tmp_path):
    run(train_command(newer_family_args("bicycle_gan", request, tmp_path, "run")))
    on_device = bicycle_test_py(paired_root, tmp_path / "run", tmp_path / "gpu", *ON_DEVICE, env=EXACT_FP32)
    on_cpu = bicycle_test_py(paired_root, tmp_path / "run", tmp_path / "cpu", "--device", "cpu", env=CPU_ONLY)
    assert [p.name for p in on_device] == [p.name for p in on_cpu] and len(on_device) == 2 * 3
    for gpu_image, cpu_image in zip(on_device, on_cpu):  # the same codes: drawn on the CPU from the seed
        difference = np.abs(np.asarray(Image.open(gpu_image), dtype=int) - np.asarray(Image.open(cpu_image), dtype=int))
        assert difference.max() <= 1, gpu_image.name


@needs_nibabel
@needs_monai
def test_a_3d_generator_on_the_gpu_translates_a_volume_by_windows_as_on_the_cpu(
        real_scan_pairs, tmp_path):
    run(train_command(volume_pix2pix_args(real_scan_pairs, tmp_path, "run", "--n_epochs", "1", "--n_epochs_decay", "0",
                                          *ON_DEVICE)))
    outputs = {}
    for results, where, env in (("gpu", ON_DEVICE, EXACT_FP32), ("cpu", ["--device", "cpu"], CPU_ONLY)):
        result = run_script("test.py", *volume_pix2pix_args(real_scan_pairs, tmp_path, "run", "--results_dir",
                                                            str(tmp_path / results), *where, networks=VOLUME_GENERATOR),
                            env=env)
        assert result.returncode == 0, result.stderr[-3000:]
        volume = nib.load(str(tmp_path / results / "run" / "test_latest" / "volumes" / "scan_fake_B.nii.gz"))
        outputs[results] = np.asarray(volume.dataobj, dtype=np.float64)
    on_device, on_cpu = outputs["gpu"], outputs["cpu"]
    assert on_device.shape == (33, 20, 25)
    # fp32 with TF32 off: the two devices' rounding only, well under a level of an 8-bit picture of the
    # window (0..20000: 78 units)
    assert np.abs(on_device - on_cpu).max() <= 20, np.abs(on_device - on_cpu).max()


@pytest.mark.parametrize("family", NEWER_FAMILIES)
def test_a_deterministic_gpu_run_of_a_newer_family_killed_and_resumed_is_bit_identical(family, request, tmp_path):
    """Every random stream (BicycleGAN's codes, CUT's patches, the volumes' patch positions) resumes."""
    def args(name: str) -> list[str]:
        return newer_family_args(family, request, tmp_path, name, 10) + ["--deterministic"]
    run(train_command(args("whole")))
    cut = args("cut")
    killed = interrupt_when_logged(train_command(cut), tmp_path / "cut" / "loss_log.txt", "(epoch: 2, iters: 2,")
    assert killed.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    assert "resuming from" in run(train_command(cut + ["--continue_train"])).stdout
    assert_identical(final_weights(tmp_path / "cut"), final_weights(tmp_path / "whole"))


def test_two_processes_on_the_gpu_train_the_same_bicycle_gan_as_one_process_with_the_global_batch(paired_root,
                                                                                                  tmp_path):
    """float64, gloo (2 processes share the GPU): the codes of the step are drawn for the global batch."""
    equivalence = ["--dtype", "float64", "--n_epochs", "1", "--n_epochs_decay", "0", "--serial_batches", "--no_flip",
                   "--max_dataset_size", "4", *ON_DEVICE, "--ddp_backend", "gloo"]
    # the sampler deals p0 p2 to rank 0 and p1 p3 to rank 1, each encodes its first and draws a code for its
    # second: the encoded p0 p1 and the random p2 p3 of one process's batch of 4
    ok(run_script("train.py", *bicycle_args(paired_root, tmp_path, "one", "--batch_size", "4", *equivalence),
                  timeout=240))
    ok(torchrun("train.py", *bicycle_args(paired_root, tmp_path, "two", "--batch_size", "2", *equivalence)))
    one, two = weights(tmp_path / "one"), weights(tmp_path / "two")
    assert {"latest_net_G.pth", "latest_net_E.pth", "latest_net_D.pth", "latest_net_D2.pth"} <= set(one) == set(two)
    assert_trained_alike(tmp_path / "one", tmp_path / "two")


# ----------------------------------------------------------------------------- several processes on the GPU

# gloo carries CUDA tensors, so 2 processes can share one GPU; NCCL needs a GPU per process.
BACKENDS = [pytest.param("gloo"), pytest.param("nccl", marks=two_gpus)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_processes_on_the_gpu_train_the_same_cycle_gan_as_one_process_with_double_batch(backend, unpaired_root,
                                                                                            tmp_path):
    on_gpu = [*ON_DEVICE, "--ddp_backend", backend]
    ok(run_script("train.py", *cycle_gan_args(unpaired_root, tmp_path, "one", 2), *on_gpu, timeout=240))
    ok(torchrun("train.py", *cycle_gan_args(unpaired_root, tmp_path, "two", 1), *on_gpu))
    assert_trained_alike(tmp_path / "one", tmp_path / "two")


def equivalence_run(model: str, unpaired_root: Path, paired_root: Path, ckpt: Path, name: str, *flags: str,
                    graphed: bool = False) -> subprocess.CompletedProcess:
    """test_distributed's float64 one-process run of `model` (batch 2) on the GPU; `graphed`: in CUDA graphs,
    in a new interpreter, so that inductor reports where it could not record one (TORCH_LOGS=perf_hints)."""
    args = cycle_gan_args(unpaired_root, ckpt, name, 2) if model == "cycle_gan" else \
        pix2pix_args(paired_root, ckpt, name, 2, "batch")
    if not graphed:
        return ok(run_script("train.py", *args, *ON_DEVICE, *flags, timeout=240))
    result = ok(run_script("train.py", *args, *ON_DEVICE, *GRAPHED, *flags, timeout=600, new_interpreter=True,
                           env={"TORCH_LOGS": "perf_hints"}))
    assert "skipping cudagraphs" not in result.stderr, result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def graphed_cycle_gan(unpaired_root, paired_root, tmp_path_factory) -> Path:
    """One process training CycleGAN in CUDA graphs (float64): what the eager step and two gloo processes must
    train alike."""
    ckpt = tmp_path_factory.mktemp("graphed")
    equivalence_run("cycle_gan", unpaired_root, paired_root, ckpt, "graphed", graphed=True)
    return ckpt / "graphed"


@cuda_only
@pytest.mark.parametrize("model", ["cycle_gan", "pix2pix"])
def test_the_step_in_cuda_graphs_trains_what_the_eager_step_trains(model, unpaired_root, paired_root, request,
                                                                   tmp_path):
    # float64: inductor's kernels sum in another order than the eager ones (the tolerances of two processes)
    equivalence_run(model, unpaired_root, paired_root, tmp_path, "eager")
    if model == "cycle_gan":
        graphed = request.getfixturevalue("graphed_cycle_gan")
    else:
        equivalence_run(model, unpaired_root, paired_root, tmp_path, "graphed", graphed=True)
        graphed = tmp_path / "graphed"
    assert_trained_alike(tmp_path / "eager", graphed)


@cuda_only
def test_two_gloo_processes_sharing_the_gpu_decline_cuda_graphs_and_train_what_one_graphed_process_does(
        graphed_cycle_gan, unpaired_root, tmp_path):
    two = ok(torchrun("train.py", *cycle_gan_args(unpaired_root, tmp_path, "two", 1), *ON_DEVICE,
                      "--ddp_backend", "gloo", *GRAPHED, timeout=600))
    declined = [line for line in (two.stdout + two.stderr).splitlines() if "CUDA graphs cannot capture" in line]
    assert len(declined) == 1 and "gloo" in declined[0], two.stdout[-3000:]  # said once, by rank 0
    assert_trained_alike(graphed_cycle_gan, tmp_path / "two")


@pytest.mark.parametrize("backend", BACKENDS)
def test_pytorch_sync_batch_norm_on_the_gpu_matches_batch_norm_of_the_whole_batch(backend, paired_root, tmp_path):
    on_gpu = [*ON_DEVICE, "--ddp_backend", backend]
    ok(run_script("train.py", *pix2pix_args(paired_root, tmp_path, "one", 2, "batch"), *on_gpu, timeout=240))
    ok(torchrun("train.py", *pix2pix_args(paired_root, tmp_path, "two", 1, "syncbatch"), *on_gpu))
    assert_trained_alike(tmp_path / "one", tmp_path / "two")


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
        check_timing(row)  # median step time, quartiles and peak memory, all positive
        assert 0 < row["utilisation_of_conv_peak"] < 10


# ----------------------------------------------------------------------------- serving


needs_serving = pytest.mark.skipif(importlib.util.find_spec("uvicorn") is None, reason=(
    "scripts/serve.py needs fastapi, uvicorn and python-multipart (requirements.txt): install them, or pass "
    "scripts/gpu_check.sh --wheels with their wheels"))


@needs_serving
@needs_nibabel  # tests/test_serving.py's helpers, imported here, need it
def test_the_server_on_the_gpu_batches_requests_and_each_answer_is_the_cpu_translators(tmp_path):
    import asyncio
    import io

    import httpx

    from helpers import SERVED_FAMILIES, photo, png_bytes, save_run
    from models.inference.translator import Translator
    run = save_run(tmp_path, "served", SERVED_FAMILIES["cycle_gan"])
    server = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "serve.py"), "--checkpoint", str(run),
                               "--port", "0", "--devices", DEVICE, "--max_batch", "4", "--batch_timeout_ms", "200"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=EXACT_FP32)
    uploads = [png_bytes(photo(seed)) for seed in range(12)]

    async def send_all(url: str) -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=120) as client:
            return await asyncio.gather(*(client.post(f"{url}/translate", content=body) for body in uploads))

    try:
        line = server.stdout.readline()
        assert "http://127.0.0.1:" in line, line + server.stderr.read()
        url = re.search(r"http://127\.0\.0\.1:\d+", line).group(0)
        answers = asyncio.run(send_all(url))
        health = httpx.get(f"{url}/health", timeout=10).json()
        devices = httpx.get(f"{url}/info", timeout=10).json()["batching"]["devices"]
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert len(devices) == 1 and devices[0].startswith(DEVICE)
    assert health["largest_batch"] > 1 and health["served"] == len(uploads)
    on_cpu = Translator.load(run, device="cpu")
    for body, answer in zip(uploads, answers):
        assert answer.status_code == 200, answer.text
        served = np.asarray(Image.open(io.BytesIO(answer.content)), dtype=int)
        alone = np.asarray(on_cpu.translate(Image.open(io.BytesIO(body))), dtype=int)
        # fp32 on both (TF32 off); a batched GPU convolution sums in another order, which may move a value
        # lying within float32 rounding of a quantisation step by one level, and no more
        assert np.abs(served - alone).max() <= 1 and (served != alone).mean() < 0.01
