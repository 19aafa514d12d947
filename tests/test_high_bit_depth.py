"""Data beyond 8-bit RGB, end to end: any channel count, 16-bit and float images (PNG, TIFF, .npy) are
read, preprocessed, trained on, written and exported at full precision (data/image_io.py).

The end-to-end runs call the scripts' main(argv) in this process (`run_in_process`): their point is
the files and messages. One refusal runs train.py as a user types it, for its real stderr."""
from __future__ import annotations

import argparse
import random
from pathlib import Path

import numpy as np
import pytest
import tifffile
import torch
import torch.nn.functional as F
from PIL import Image

from conftest import FAST_FLAGS, run_in_process, run_script
from data import create_dataset
from data.base_dataset import get_params, get_transform
from data.image_folder import DomainSpec, load_for_network
from data.image_io import ValueRange, from_network, probe_image, read_image, to_network, write_image
from util.errors import UserError
from util.util import tensor2im

STEP_16 = 257  # one 8-bit step in 16-bit units (65535 / 255)


def ok(result):
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def refused(result, *fragments: str) -> str:
    """A run that exits 2 with one paragraph naming `fragments` (and no traceback)."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-3000:]
    for fragment in fragments:
        assert str(fragment) in lines[0], (fragment, lines[0])
    return lines[0]


# ---------------------------------------------------------------------------------- files and values
@pytest.mark.parametrize("name, array", [
    ("gray16.png", np.arange(12 * 10, dtype=np.uint16).reshape(12, 10, 1) * 500),
    ("rgb8.png", np.random.default_rng(0).integers(0, 256, (12, 10, 3), dtype=np.uint8)),
    ("bands6.tif", np.random.default_rng(1).normal(size=(12, 10, 6)).astype(np.float32) * 1000),
    ("bands4.tif", np.random.default_rng(2).integers(0, 65536, (12, 10, 4), dtype=np.uint16)),
    ("bands2.npy", np.random.default_rng(3).normal(size=(12, 10, 2)).astype(np.float32)),
])
def test_written_images_read_back_with_their_dtype_band_count_and_values(tmp_path, name, array):
    path = str(tmp_path / name)
    write_image(path, array)
    info = probe_image(path)
    assert (info.height, info.width, info.channels, info.dtype) == (*array.shape, array.dtype)
    back = read_image(path)
    assert back.dtype == array.dtype and np.array_equal(back, array)


def test_16bit_colour_png_keeps_all_16_bits(tmp_path):
    pytest.importorskip("imagecodecs")  # PIL reduces 16-bit colour PNGs to 8 bits
    array = (np.arange(8 * 6 * 4).reshape(8, 6, 4) * 337 + 1).astype(np.uint16)
    write_image(str(tmp_path / "x.png"), array)
    assert np.array_equal(read_image(str(tmp_path / "x.png")), array)
    assert probe_image(str(tmp_path / "x.png")).alpha


def test_planar_tiff_and_tiff_pages_are_read_as_bands(tmp_path):
    bands = np.random.default_rng(0).integers(0, 65536, (5, 8, 6), dtype=np.uint16)
    tifffile.imwrite(tmp_path / "planar.tif", bands, photometric="minisblack", planarconfig="separate")
    assert np.array_equal(read_image(str(tmp_path / "planar.tif")), bands.transpose(1, 2, 0))
    assert probe_image(str(tmp_path / "planar.tif")).channels == 5


def test_network_values_map_back_exactly_for_16bit_and_through_the_range_for_float():
    ramp = np.arange(0, 65536, 7, dtype=np.uint16)[:9000].reshape(90, 100, 1)
    full = ValueRange.for_dtype(np.uint16)
    assert np.array_equal(from_network(to_network(ramp, full), full, np.uint16), ramp)
    floats = np.linspace(-3.0, 5.0, 60, dtype=np.float32).reshape(6, 10, 1)
    tensor = to_network(floats, ValueRange(-3.0, 5.0))
    assert tensor.min() == -1.0 and tensor.max() == 1.0
    assert np.abs(from_network(tensor, ValueRange(-3.0, 5.0), np.float32) - floats).max() < 1e-5


# ---------------------------------------------------------------------------------- preprocessing
def make_opt(root, **overrides) -> argparse.Namespace:
    values = dict(dataroot=str(root), phase="train", dataset_mode="aligned", direction="AtoB", input_nc=1,
                  output_nc=1, preprocess="resize_and_crop", load_size=29, crop_size=20, no_flip=False,
                  serial_batches=False, batch_size=1, num_threads=0, max_dataset_size=float("inf"), isTrain=True,
                  netG="resnet_6blocks", data_range=None, skip_bad_images=False)
    values.update(overrides)
    return argparse.Namespace(**values)


def reference_transform(values: np.ndarray, value_range: ValueRange, load: int, crop: int, pos, flip) -> torch.Tensor:
    """Map to [-1, 1] (values outside the range clipped), resize (bicubic, antialiased: PIL's filter), crop,
    flip and clip the overshoot, in float64, computed with torch."""
    x = torch.from_numpy(values.astype(np.float64).transpose(2, 0, 1))[None]
    x = ((x - value_range.low) / value_range.half_span - 1.0).clamp(-1.0, 1.0)
    x = F.interpolate(x, size=(load, load), mode="bicubic", antialias=True, align_corners=False)[0]
    x = x[:, pos[1]:pos[1] + crop, pos[0]:pos[0] + crop]
    return (x.flip(-1) if flip else x).clamp(-1.0, 1.0)


@pytest.mark.parametrize("kind", ["uint16-png", "float32-tiff"])
def test_resize_crop_flip_of_16bit_and_float_images_equal_a_float_reference(tmp_path, kind):
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:23, 0:31]
    smooth = (np.sin(x / 5.0) + np.cos(y / 4.0) + 2.0) / 4.0  # in [0, 1]
    if kind == "uint16-png":
        values = np.rint(smooth * 600 + rng.integers(0, 40, smooth.shape) + 30000).astype(np.uint16)[:, :, None]
        path, value_range, data_range = tmp_path / "x.png", ValueRange.for_dtype(np.uint16), None
    else:
        values = np.stack([smooth * 0.01, 3.0 - 2.0 * smooth, rng.normal(size=smooth.shape)], -1).astype(np.float32)
        path, value_range, data_range = tmp_path / "x.tif", ValueRange(-3.0, 3.0), (-3.0, 3.0)
    write_image(str(path), values)
    channels = values.shape[2]
    opt = make_opt(tmp_path, input_nc=channels)
    (picture,) = load_for_network(str(path), [DomainSpec(channels, "--input_nc", data_range)])
    params = {"crop_pos": (5, 7), "flip": True}
    got = get_transform(opt, params)(picture)
    expected = reference_transform(values, value_range, 29, 20, (5, 7), True)
    assert got.dtype == torch.float32 and got.shape == (channels, 20, 20)
    assert (got.double() - expected).abs().max() < 2e-6
    # The data vary below 8-bit resolution: rounding anywhere to 8 bits would be far off.
    in_8_bits = torch.round((expected + 1) * 127.5) / 127.5 - 1
    assert (in_8_bits - expected).abs().max() > 1e-3


def test_8bit_rgb_images_still_take_the_reference_path_bit_for_bit(tmp_path):
    from data.image_folder import load_image

    rgb = np.random.default_rng(0).integers(0, 256, (23, 31, 3), dtype=np.uint8)
    Image.fromarray(rgb).save(tmp_path / "x.png")
    opt = make_opt(tmp_path, input_nc=3)
    params = get_params(opt, (31, 23), random.Random(3))
    (picture,) = load_for_network(str(tmp_path / "x.png"), [DomainSpec(3, "--input_nc")])
    assert isinstance(picture, Image.Image)
    assert torch.equal(get_transform(opt, params)(picture),
                       get_transform(opt, params)(load_image(str(tmp_path / "x.png"))))


# ---------------------------------------------------------------------------------- datasets
def test_two_folders_pair_files_by_name_whatever_their_format(tmp_path):
    (tmp_path / "trainA").mkdir()
    (tmp_path / "trainB").mkdir()
    for i in range(3):
        write_image(str(tmp_path / "trainA" / f"{i:04d}.tif"), np.full((20, 20, 6), i, np.float32))
        np.save(tmp_path / "trainB" / f"{i:04d}.npy", np.full((20, 20, 2), -i, np.float32))
    opt = make_opt(tmp_path, input_nc=6, output_nc=2, data_range=[-3.0, 3.0], load_size=20, crop_size=20)
    dataset = create_dataset(opt, seed=0).dataset
    sample = dataset[2]
    assert sample["A_paths"].endswith("trainA/0002.tif") and sample["B_paths"].endswith("trainB/0002.npy")
    assert sample["A"].shape == (6, 20, 20) and sample["B"].shape == (2, 20, 20)
    # --data_range -3 3 maps 2 to 2/3 and -2 to -2/3
    assert torch.allclose(sample["A"], torch.tensor(2 / 3)) and torch.allclose(sample["B"], torch.tensor(-2 / 3))


def test_unmatched_names_in_two_folders_are_refused_naming_them(tmp_path):
    for folder, names in (("trainA", ["a", "b", "c"]), ("trainB", ["a", "b", "d"])):
        (tmp_path / folder).mkdir()
        for name in names:
            np.save(tmp_path / folder / f"{name}.npy", np.zeros((8, 8, 2), np.float32))
    with pytest.raises(UserError) as info:
        create_dataset(make_opt(tmp_path, input_nc=2, output_nc=2), seed=0)
    assert "c.npy" in str(info.value) and "d.npy" in str(info.value)


def test_channel_count_other_than_the_flag_is_refused_naming_file_count_and_flag(tmp_path):
    (tmp_path / "trainA").mkdir()
    (tmp_path / "trainB").mkdir()
    for i in range(2):
        write_image(str(tmp_path / "trainA" / f"{i}.tif"), np.zeros((16, 16, 4), np.uint16))
        write_image(str(tmp_path / "trainB" / f"{i}.tif"), np.zeros((16, 16, 4), np.uint16))
    with pytest.raises(UserError) as info:
        create_dataset(make_opt(tmp_path, dataset_mode="unaligned", input_nc=3, output_nc=4), seed=0)
    message = str(info.value)
    assert str(tmp_path / "trainA" / "0.tif") in message and "4 channels" in message and "--input_nc is 3" in message


# ---------------------------------------------------------------------------------- previews
def test_previews_show_the_chosen_channels_or_the_first_three():
    image = torch.stack([torch.full((4, 4), v) for v in (-1.0, -0.5, 0.0, 0.5, 1.0)])[None]
    assert tensor2im(image)[0, 0].tolist() == [0, 64, 128]
    assert tensor2im(image, channels=[4, 0, 3])[0, 0].tolist() == [255, 0, 191]
    assert tensor2im(image[:, :2], channels=[4, 0, 3])[0, 0].tolist() == [0, 0, 0]  # missing channels: default


# ---------------------------------------------------------------------------------- end to end
def float_bands_root(root: Path) -> Path:
    """A pix2pix task between two folders: 6-band float32 TIFFs -> 2-band float32 .npy, 32x32."""
    rng = np.random.default_rng(0)
    for phase in ("train", "test"):
        (root / f"{phase}A").mkdir(parents=True)
        (root / f"{phase}B").mkdir(parents=True)
        for i in range(2):
            bands = (rng.random((32, 32, 6)) * 100 - 50).astype(np.float32)
            tifffile.imwrite(root / f"{phase}A" / f"{i:04d}.tif", bands, photometric="minisblack",
                             planarconfig="contig")
            np.save(root / f"{phase}B" / f"{i:04d}.npy", bands[:, :, :2] * 0.5)
    return root


SMALL = ["--load_size", "32", "--crop_size", "32", "--netG", "resnet_6blocks", "--ngf", "8", "--ndf", "8"]


@pytest.mark.slow
def test_float_6band_tiff_to_2band_npy_pix2pix_trains_and_tests_keeping_dtype_and_bands(tmp_path, capsys):
    root = float_bands_root(tmp_path / "data")
    flags = ["--dataroot", str(root), "--name", "bands", "--model", "pix2pix", "--dataset_mode", "aligned",
             "--input_nc", "6", "--output_nc", "2", "--data_range", "-50", "50", "-25", "25", *SMALL,
             "--checkpoints_dir", str(tmp_path / "ck")]
    ok(run_in_process("train.py", *flags, *FAST_FLAGS, "--n_epochs", "1", "--n_epochs_decay", "0", capsys=capsys))
    ok(run_in_process("test.py", *flags, "--results_dir", str(tmp_path / "res"), capsys=capsys))
    out = tmp_path / "res" / "bands" / "test_latest"
    fake = np.load(out / "full_precision" / "0000_fake_B.npy")
    assert fake.dtype == np.float32 and fake.shape == (32, 32, 2) and np.abs(fake).max() <= 25
    real_A = read_image(str(out / "full_precision" / "0000_real_A.tif"))
    assert real_A.dtype == np.float32 and real_A.shape == (32, 32, 6)
    assert np.abs(real_A - read_image(str(root / "testA" / "0000.tif"))).max() < 1e-4  # through [-1, 1] and back
    assert (out / "images" / "0000_fake_B.png").is_file()  # the page's 8-bit preview


@pytest.mark.slow
def test_4band_cyclegan_trains_tests_and_exports_matching_pytorch(tmp_path, capsys):
    rng = np.random.default_rng(0)
    for folder in ("trainA", "trainB", "testA", "testB"):
        (tmp_path / "data" / folder).mkdir(parents=True)
        for i in range(2):
            write_image(str(tmp_path / "data" / folder / f"{i}.tif"),
                        rng.integers(0, 65536, (32, 32, 4), dtype=np.uint16))
    flags = ["--dataroot", str(tmp_path / "data"), "--name", "c4", "--model", "cycle_gan", "--input_nc", "4",
             "--output_nc", "4", *SMALL, "--checkpoints_dir", str(tmp_path / "ck")]
    ok(run_in_process("train.py", *flags, *FAST_FLAGS, "--n_epochs", "1", "--n_epochs_decay", "0", "--max_dataset_size",
                      "2", capsys=capsys))
    ok(run_in_process("test.py", *flags, "--results_dir", str(tmp_path / "res"), capsys=capsys))
    fake = read_image(str(tmp_path / "res" / "c4" / "test_latest" / "full_precision" / "0_fake_B.tif"))
    assert fake.dtype == np.uint16 and fake.shape == (32, 32, 4)
    result = ok(run_in_process("scripts/export.py", *flags[2:], "--device", "cpu", "--check_sizes", "32x32,24x40",
                               capsys=capsys))
    assert "check passed" in result.stdout
    scripted = torch.jit.load(str(tmp_path / "ck" / "c4" / "export" / "latest_net_G_A.pt"))
    with torch.no_grad(), torch.jit.optimized_execution(False):
        assert scripted(torch.zeros(1, 4, 24, 40)).shape == (1, 4, 24, 40)


def test_wrong_channel_count_exits_2_naming_the_file_its_count_and_the_flag(tmp_path):
    # train.py as a user types it: the process's exit status and its whole stderr
    root = float_bands_root(tmp_path / "data")
    result = run_script("train.py", "--dataroot", str(root), "--name", "x", "--model", "pix2pix", "--input_nc", "3",
                        "--output_nc", "2", *SMALL, *FAST_FLAGS, "--checkpoints_dir", str(tmp_path / "ck"))
    refused(result, root / "trainA" / "0000.tif", "6 channels", "--input_nc is 3")


def test_unreadable_tiff_exits_2_naming_the_file(tmp_path, capsys):
    root = float_bands_root(tmp_path / "data")
    bad = root / "trainA" / "0001.tif"
    bad.write_bytes(bad.read_bytes()[:6] + b"\xff" * 40)  # a TIFF signature, then nonsense
    result = run_in_process("train.py", "--dataroot", str(root), "--name", "x", "--model", "pix2pix", "--input_nc",
                            "6", "--output_nc", "2", *SMALL, *FAST_FLAGS, "--checkpoints_dir", str(tmp_path / "ck"),
                            capsys=capsys)
    refused(result, bad, "cannot read image")


# ---------------------------------------------------------------------------------- acceptance: precision
def ramp_root(root: Path, bits: int) -> list[np.ndarray]:
    """16x16 ramps spanning 300 of 65535 (about one 8-bit step) at random angles, A -> its negative
    65535 - A; with `bits` 8 the same images rounded to 8 bits. Returns the true 16-bit test targets."""
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:16, 0:16] / 15.0
    targets = []
    for phase, count in (("train", 8), ("test", 4)):
        for domain in "AB":
            (root / f"{phase}{domain}").mkdir(parents=True)
        for i in range(count):
            angle = rng.uniform(0, 2 * np.pi)
            t = np.cos(angle) * x + np.sin(angle) * y
            a = np.rint(32618 + 300 * (t - t.min()) / (t.max() - t.min()))
            for domain, values in (("A", a), ("B", 65535 - a)):
                data = values.astype(np.uint16) if bits == 16 else np.rint(values / STEP_16).astype(np.uint8)
                Image.fromarray(data).save(root / f"{phase}{domain}" / f"{i:03d}.png")
            if phase == "test":
                targets.append(65535 - a)
    return targets


def ramp_error(tmp_path: Path, capsys: pytest.CaptureFixture, bits: int, epochs: int = 30) -> tuple[float, float]:
    """Train pix2pix on the ramp task at `bits` (`epochs` + `epochs` of decay), translate the test ramps;
    returns (mean absolute error of the outputs in 16-bit units, the least error any 8-bit output can have)."""
    root = tmp_path / f"ramps{bits}"
    targets = ramp_root(root, bits)
    flags = ["--dataroot", str(root), "--name", "r", "--model", "pix2pix", "--input_nc", "1", "--output_nc", "1",
             "--netG", "resnet_6blocks", "--netD", "n_layers", "--n_layers_D", "1", "--norm", "none", "--no_dropout",
             "--preprocess", "none", "--ngf", "8", "--ndf", "8", "--checkpoints_dir", str(tmp_path / f"ck{bits}")]
    ok(run_in_process("train.py", *flags, *FAST_FLAGS, "--no_flip", "--lr", "0.0005", "--n_epochs", str(epochs),
                      "--n_epochs_decay", str(epochs), "--no_html", "--no_progress", "--print_freq", "100000",
                      capsys=capsys))
    ok(run_in_process("test.py", *flags, "--results_dir", str(tmp_path / f"res{bits}"), capsys=capsys))
    out = tmp_path / f"res{bits}" / "r" / "test_latest"
    errors, floors = [], []
    for i, target in enumerate(targets):
        if bits == 16:
            output = read_image(str(out / "full_precision" / f"{i:03d}_fake_B.png"))[:, :, 0].astype(np.float64)
        else:  # 8-bit data: the PNG preview holds the output, in steps of 257
            output = np.asarray(Image.open(out / "images" / f"{i:03d}_fake_B.png"))[:, :, 0] * float(STEP_16)
        errors.append(np.abs(output - target).mean())
        floors.append(np.abs(np.rint(target / STEP_16) * STEP_16 - target).mean())
    return float(np.mean(errors)), float(np.mean(floors))


@pytest.mark.slow
def test_16bit_task_below_8bit_resolution_is_learned_far_below_one_8bit_step_which_8_bits_cannot_reach(
        tmp_path, capsys):
    error_16, floor_8 = ramp_error(tmp_path, capsys, 16)
    # Through 8 bits no training can beat the floor (every output is a multiple of one 8-bit step),
    # so the shortest run shows the same: the data lost the signal before training began.
    error_8, _ = ramp_error(tmp_path, capsys, 8, epochs=1)
    print(f"mean absolute error of the outputs, in units of 1/65535: 16-bit data {error_16:.1f}, the same task "
          f"through 8 bits {error_8:.1f} (no 8-bit output can be below {floor_8:.1f}; one 8-bit step is {STEP_16})")
    assert error_16 < STEP_16 / 10  # far below one 8-bit step
    assert error_16 < floor_8 / 4 <= error_8 / 4  # and far below anything 8 bits can reach
