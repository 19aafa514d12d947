"""Volumes end to end: pix2pix, CycleGAN and CUT on 3-D images (NIfTI), trained on patches, applied to
whole volumes in sliding windows (docs/volumes.md).

One real scan (nibabel's anatomical.nii, from the installed package) and tiny synthetic volumes; the
networks are the 3-D families with a handful of filters, so each run takes seconds.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import load_script, ranks, run_in_process
from models import networks
from test_distributed import assert_trained_alike, ok, weights
from test_resume import assert_identical, final_weights, interrupt_when_logged, train_command

nib = pytest.importorskip("nibabel")


REAL_SCAN = Path(os.path.dirname(nib.__file__)) / "tests" / "data" / "anatomical.nii"
GENERATOR = ["--netG", "resnet_6blocks_3d", "--ngf", "4", "--input_nc", "1", "--output_nc", "1", "--num_threads", "0",
             "--seed", "0"]
SMALL_NETS = [*GENERATOR, "--netD", "n_layers_3d", "--n_layers_D", "1", "--ndf", "4", "--display_id", "0"]


def save_nifti(path: Path, values: np.ndarray, affine: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    nib.save(nib.Nifti1Image(values.astype(np.float32), affine), str(path))


def blurred(volume: np.ndarray) -> np.ndarray:
    """A 3x3x3 box blur (edges replicated)."""
    padded = torch.nn.functional.pad(torch.from_numpy(volume)[None, None], [1] * 6, mode="replicate")
    return torch.nn.functional.avg_pool3d(padded, 3, stride=1)[0, 0].numpy()


@pytest.fixture(scope="module")
def real_scan_pairs(tmp_path_factory) -> Path:
    """The real MRI scan cut in two halves across its second axis: the first half to train on, the second
    (never seen in training) to test on. B is the scan, A a degraded copy (another contrast, blurred,
    noisy: what a cheaper acquisition gives), so pix2pix learns to restore B from A."""
    root = tmp_path_factory.mktemp("real_scan")
    image = nib.load(str(REAL_SCAN))
    scan = np.asarray(image.dataobj, dtype=np.float32)  # 33 x 41 x 25, 2 mm voxels
    noise = np.random.default_rng(0)
    for phase, part in (("train", slice(0, 20)), ("test", slice(21, 41))):
        target = scan[:, part, :]
        affine = image.affine.copy()  # the half's own place in the scanner
        affine[:3, 3] += image.affine[:3, :3] @ np.array([0, part.start, 0])
        degraded = 16000 - 0.8 * blurred(target) + noise.normal(0, 400, target.shape)
        save_nifti(root / f"{phase}A" / "scan.nii", degraded, affine)
        save_nifti(root / f"{phase}B" / "scan.nii", target, affine)
    return root


def pix2pix_args(root: Path, ckpt: Path, name: str, *extra: str, networks: list[str] = SMALL_NETS) -> list[str]:
    return ["--dataroot", str(root), "--name", name, "--checkpoints_dir", str(ckpt), "--model", "pix2pix",
            "--dataset_mode", "aligned_volume", "--data_range", "0", "20000", "--patch_size", "16", *networks, *extra]


@pytest.mark.slow
def test_pix2pix_trained_on_patches_of_a_real_scan_restores_a_held_out_half_better_than_untrained_and_identity(
        real_scan_pairs, tmp_path):
    train, test = load_script("train.py"), load_script("test.py")
    training = ["--patches_per_volume", "16", "--batch_size", "4", "--lr", "0.002"]
    assert train.main(pix2pix_args(real_scan_pairs, tmp_path, "trained", *training, "--n_epochs", "20",
                                   "--n_epochs_decay", "0")) == 0
    torch.manual_seed(0)  # the untrained generator: freshly initialised, as training starts
    untrained = networks.define_G(1, 1, 4, "resnet_6blocks_3d", norm="batch", use_dropout=True)
    torch.save(untrained.state_dict(), tmp_path / "trained" / "untrained_net_G.pth")
    scores = {}
    results = tmp_path / "results"
    for epoch in ("latest", "untrained"):
        assert test.main(pix2pix_args(real_scan_pairs, tmp_path, "trained", "--results_dir", str(results), "--eval",
                                      "--epoch", epoch, networks=GENERATOR)) == 0
        scores[epoch] = json.loads((results / "trained" / f"test_{epoch}" / "metrics.json").read_text())
    trained, untrained = scores["latest"], scores["untrained"]
    assert trained["images"] == 1
    assert trained["output_MAE"] < trained["identity_MAE"] and trained["output_MAE"] < untrained["output_MAE"]
    assert trained["output_PSNR"] > trained["identity_PSNR"] and trained["output_PSNR"] > untrained["output_PSNR"]
    # MAE is L1 in the scan's units: the window 0..20000 is 2 network units wide
    assert trained["output_MAE"] == pytest.approx(trained["output_L1"] * 10000, rel=1e-9)

    # the output lies exactly over its input: same shape, affine and voxel size, in the target's units
    source = nib.load(str(real_scan_pairs / "testA" / "scan.nii"))
    output = nib.load(str(results / "trained" / "test_latest" / "volumes" / "scan_fake_B.nii.gz"))
    assert output.shape == source.shape == (33, 20, 25)
    assert np.array_equal(output.affine, source.affine)
    assert output.header.get_zooms() == source.header.get_zooms()
    target = np.clip(np.asarray(nib.load(str(real_scan_pairs / "testB" / "scan.nii")).dataobj), 0, 20000)  # the window
    assert np.abs(np.asarray(output.dataobj) - target).mean() == pytest.approx(trained["output_MAE"], rel=1e-4)
    # and a preview of the middle slice on the results page
    assert (results / "trained" / "test_latest" / "images" / "scan_fake_B.png").is_file()


# ------------------------------------------------------------------------------- CycleGAN and CUT, DDP
def synthetic_volumes(root: Path, count: int = 2, shape: tuple[int, int, int] = (12, 12, 12)) -> Path:
    """Unpaired volumes: smooth random fields in A, their squares in B."""
    rng = np.random.default_rng(1)
    for side in "AB":
        for i in range(count):
            field = blurred(rng.normal(size=shape).astype(np.float32))
            save_nifti(root / f"train{side}" / f"v{i}.nii", field if side == "A" else field ** 2, np.diag([1.5, 1.5, 3, 1]))
    return root


@pytest.fixture(scope="module")
def unpaired_volumes(tmp_path_factory) -> Path:
    return synthetic_volumes(tmp_path_factory.mktemp("unpaired_volumes"))


def unpaired_args(root: Path, ckpt: Path, name: str, model: str, *extra: str) -> list[str]:
    model_flags = ["--netF_nc", "8", "--num_patches", "8"] if model == "cut" else []
    return ["--dataroot", str(root), "--name", name, "--checkpoints_dir", str(ckpt), "--model", model,
            "--dataset_mode", "unaligned_volume", "--data_range", "-1", "1", "--patch_size", "8",
            "--patches_per_volume", "2", "--dtype", "float64", "--n_epochs", "1", "--n_epochs_decay", "1",
            "--serial_batches", "--print_freq", "1", "--save_latest_freq", "2", *SMALL_NETS, *model_flags, *extra]


@pytest.mark.slow
@pytest.mark.parametrize("model", ["cycle_gan", "cut"])
def test_two_processes_train_the_same_3d_model_as_one_process_with_the_global_batch(model, unpaired_volumes,
                                                                                     tmp_path):
    """float64: 2 processes x batch 1 == 1 process x batch 2, patches, flips and the pool drawn at random."""
    assert load_script("train.py").main(unpaired_args(unpaired_volumes, tmp_path, "one", model,
                                                      "--batch_size", "2")) == 0
    ok(ranks("train.py", *unpaired_args(unpaired_volumes, tmp_path, "two", model, "--batch_size", "1")))
    one, two = weights(tmp_path / "one"), weights(tmp_path / "two")
    assert any(value.ndim == 5 for value in one["latest_net_G.pth" if model == "cut" else "latest_net_G_A.pth"].values())
    assert_trained_alike(tmp_path / "one", tmp_path / "two")


@pytest.mark.slow
def test_a_killed_3d_run_continued_ends_bit_identical_to_the_uninterrupted_one(unpaired_volumes, tmp_path, capsys):
    """The run killed is a process of its own (SIGKILL); the uninterrupted and the continued runs are
    run here, on one thread as the killed process, so the arithmetic is the same."""
    flags = ["--batch_size", "1", "--foreground_fraction", "0.5", "--intensity_jitter", "0.1"]
    assert load_script("train.py").main(unpaired_args(unpaired_volumes, tmp_path, "whole", "cycle_gan", *flags)) == 0
    killed = unpaired_args(unpaired_volumes, tmp_path, "killed", "cycle_gan", *flags)
    interrupt_when_logged(train_command(killed), tmp_path / "killed" / "loss_log.txt", "(epoch: 2, iters: 1,")
    assert "resuming from" in run_in_process("train.py", *killed, "--continue_train", capsys=capsys).stdout
    assert_identical(final_weights(tmp_path / "whole"), final_weights(tmp_path / "killed"))


# ------------------------------------------------------------------------------- flags that do not fit volumes
@pytest.mark.parametrize("flags, flag, advice", [
    (["--netG", "unet_256"], "--netG", "choose a 3-D generator: resnet_9blocks_3d"),
    (["--netD", "multiscale"], "--netD", "choose a 3-D discriminator: basic_3d"),
    (["--diff_augment", "color"], "--diff_augment", "--intensity_jitter"),
])
def test_picture_only_flags_with_volumes_exit_2_naming_the_flag_and_the_fix(flags, flag, advice, unpaired_volumes,
                                                                            capfd):
    with pytest.raises(SystemExit) as exit_info:
        load_script("train.py").main(["--dataroot", str(unpaired_volumes), "--model", "cycle_gan", "--dataset_mode",
                                      "unaligned_volume", "--data_range", "-1", "1", *flags])
    assert exit_info.value.code == 2
    (line,) = capfd.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: argument {flag}:") and advice in line, line


def test_volume_runs_default_to_the_3d_networks_and_warn_about_picture_sizes(unpaired_volumes, capfd):
    from options.train_options import TrainOptions
    opt = TrainOptions().parse(["--dataroot", str(unpaired_volumes), "--model", "cut", "--dataset_mode",
                                "unaligned_volume", "--crop_size", "64"])
    assert (opt.netG, opt.netD) == ("resnet_9blocks_3d", "basic_3d")
    assert opt.no_antialias and opt.no_antialias_up  # CUT's blur layers are 2-D
    (warning,) = capfd.readouterr().err.strip().splitlines()
    assert warning.startswith("warning: --crop_size") and "--patch_size" in warning


def test_test_py_refuses_picture_tiles_for_volumes(real_scan_pairs, tmp_path, capfd):
    assert load_script("test.py").main(pix2pix_args(real_scan_pairs, tmp_path, "none", "--tile", "64",
                                                    networks=GENERATOR)) == 2
    err = capfd.readouterr().err
    assert "--tile 64" in err and "--patch_size" in err
