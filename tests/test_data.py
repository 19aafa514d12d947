"""Behaviour of the data package that users rely on: folder layouts, preprocessing,
reproducible augmentation, distributed splitting, and clear errors for bad input."""

from __future__ import annotations

import argparse
import gc
import os
import random
import time

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import load_script
from data import DATASETS, create_dataset, find_dataset_using_name, get_option_setter
from data.base_dataset import get_params, get_transform
from data.colorization_dataset import lab_to_rgb, lab_to_srgb, rgb_to_lab
from data.image_folder import DomainSpec, is_image_file, load_for_network, load_image, make_dataset
from data.image_io import layout_hint, probe_image, read_image
from util.distributed import DistContext
from util.errors import UserError
from util.flag_types import OneParagraphParser

RED, BLUE = (255, 0, 0), (0, 0, 255)


def make_opt(root, **overrides) -> argparse.Namespace:
    values = dict(
        dataroot=str(root), phase="train", dataset_mode="aligned", direction="AtoB",
        input_nc=3, output_nc=3, preprocess="resize_and_crop", load_size=20, crop_size=16,
        no_flip=False, serial_batches=False, batch_size=2, num_threads=0,
        max_dataset_size=float("inf"), isTrain=True, data_range=None, skip_bad_images=False,
        second_input=False, new_dataset_option=1.0,  # the unaligned and template modes' own flags
    )
    values.update(overrides)
    return argparse.Namespace(**values)


def save(path, size=(24, 18), color=(10, 120, 240), mode="RGB"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.new(mode, size, color).save(path)
    return str(path)


def save_gradient(path, size=(24, 16)):
    """Left-to-right gradient: distinguishes flipped from unflipped and reveals crop position."""
    w, h = size
    row = np.linspace(0, 255, w).astype(np.uint8)
    arr = np.stack([np.tile(row, (h, 1))] * 3, axis=-1)
    arr[:, :, 1] = np.tile(np.linspace(0, 255, h).astype(np.uint8)[:, None], (1, w))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.fromarray(arr).save(path)
    return str(path)


def save_ab(path, size=(32, 16), left=RED, right=BLUE):
    img = Image.new("RGB", size, left)
    img.paste(Image.new("RGB", (size[0] // 2, size[1]), right), (size[0] // 2, 0))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    img.save(path)
    return str(path)


@pytest.fixture
def aligned_root(tmp_path):
    for i in range(4):
        save_ab(tmp_path / "train" / f"{i}.png")
    return tmp_path


@pytest.fixture
def unaligned_root(tmp_path):
    for i in range(4):
        save(tmp_path / "trainA" / f"{i}.png", color=RED)
    for i in range(3):
        save(tmp_path / "trainB" / f"{i}.png", color=BLUE)
    return tmp_path


def mean_rgb(t: torch.Tensor) -> list[float]:
    return [round(v, 2) for v in t.mean(dim=(1, 2)).tolist()]


# ---------------------------------------------------------------- dataset modes

def assert_image_tensor(t, channels, size):
    assert t.dtype == torch.float32 and tuple(t.shape) == (channels, size, size)
    assert t.min() >= -1.0 and t.max() <= 1.0


def test_aligned_sample_has_a_and_b_halves_cropped_in_minus_one_to_one(aligned_root):
    ds = create_dataset(make_opt(aligned_root, output_nc=1), seed=0).dataset
    sample = ds[0]
    assert set(sample) == {"A", "B", "A_paths", "B_paths"}
    assert_image_tensor(sample["A"], 3, 16)
    assert_image_tensor(sample["B"], 1, 16)
    assert sample["A_paths"] == sample["B_paths"] == str(aligned_root / "train" / "0.png")


def test_unaligned_sample_has_one_image_of_each_domain(unaligned_root):
    ds = create_dataset(make_opt(unaligned_root, dataset_mode="unaligned"), seed=0).dataset
    sample = ds[0]
    assert set(sample) == {"A", "B", "A_paths", "B_paths"}
    assert_image_tensor(sample["A"], 3, 16)
    assert_image_tensor(sample["B"], 3, 16)
    assert "trainA" in sample["A_paths"] and "trainB" in sample["B_paths"]
    assert len(ds) == 4  # max(size_A, size_B)


def test_single_reads_images_directly_under_dataroot_with_input_nc_channels(unaligned_root):
    opt = make_opt(unaligned_root / "trainA", dataset_mode="single", input_nc=1)
    sample = create_dataset(opt, seed=0).dataset[0]
    assert set(sample) == {"A", "A_paths"}
    assert_image_tensor(sample["A"], 1, 16)


def test_single_uses_output_nc_when_direction_is_btoa(unaligned_root):
    opt = make_opt(unaligned_root / "trainA", dataset_mode="single", output_nc=1, direction="BtoA")
    assert create_dataset(opt, seed=0).dataset[0]["A"].shape[0] == 1


def test_colorization_returns_l_and_ab_channels(tmp_path):
    save(tmp_path / "train" / "x.png", color=(200, 30, 30))
    parser = get_option_setter("colorization")(argparse.ArgumentParser(), True)
    defaults = vars(parser.parse_args([]))
    assert (defaults["input_nc"], defaults["output_nc"], defaults["direction"]) == (1, 2, "AtoB")
    sample = create_dataset(make_opt(tmp_path, dataset_mode="colorization", **defaults), seed=0).dataset[0]
    assert set(sample) == {"A", "B", "A_paths", "B_paths"}
    assert_image_tensor(sample["A"], 1, 16)
    assert_image_tensor(sample["B"], 2, 16)
    assert sample["B"][0].mean() > 0.3  # a strong red has a large positive a


def test_template_dataset_pairs_each_image_with_its_mirror(tmp_path):
    save_gradient(tmp_path / "train" / "x.png")
    parser = get_option_setter("template")(OneParagraphParser(), True)  # it declares its flag's on_resume
    assert parser.parse_args([]).new_dataset_option == 1.0
    sample = create_dataset(make_opt(tmp_path, dataset_mode="template"), seed=0).dataset[0]
    assert_image_tensor(sample["A"], 3, 16)
    assert torch.equal(sample["B"], sample["A"].flip(-1))


def test_loader_yields_batches_of_batch_size(aligned_root):
    batches = list(create_dataset(make_opt(aligned_root, batch_size=3), seed=0))
    assert [b["A"].shape[0] for b in batches] == [3, 1]
    assert len(batches[0]["A_paths"]) == 3


def test_unknown_dataset_mode_error_lists_valid_names():
    with pytest.raises(UserError, match="aligned, aligned_volume, colorization, single, single_volume, template, "
                                        "unaligned, unaligned_volume"):  # found by file
        find_dataset_using_name("pairs")
    assert set(DATASETS) == {"aligned", "unaligned", "single", "colorization", "template", "aligned_volume",
                             "unaligned_volume", "single_volume"}


# ---------------------------------------------------------------- preprocessing

@pytest.mark.parametrize("preprocess, expected_wh", [
    ("resize_and_crop", (16, 16)),
    ("crop", (16, 16)),
    ("scale_width", (20, 30)),  # width = load_size, height keeps the 2:3 aspect
    ("scale_width_and_crop", (16, 16)),
    ("none", (24, 36)),  # 26x37 rounded to multiples of 4
])
def test_preprocess_mode_output_size(tmp_path, preprocess, expected_wh):
    img = Image.new("RGB", (26, 37) if preprocess == "none" else (40, 60))
    opt = make_opt(tmp_path, preprocess=preprocess)
    out = get_transform(opt, get_params(opt, img.size, random.Random(0)))(img)
    assert tuple(out.shape) == (3, expected_wh[1], expected_wh[0])


def test_scale_width_never_goes_below_crop_height(tmp_path):
    opt = make_opt(tmp_path, preprocess="scale_width", load_size=20, crop_size=16)
    out = get_transform(opt)(Image.new("RGB", (100, 20)))  # aspect would give height 4
    assert tuple(out.shape) == (3, 16, 20)


def test_grayscale_transform_gives_one_channel_in_range(tmp_path):
    opt = make_opt(tmp_path, preprocess="none")
    out = get_transform(opt, grayscale=True)(Image.new("RGB", (8, 8), (255, 255, 255)))
    assert tuple(out.shape) == (1, 8, 8) and torch.allclose(out, torch.ones_like(out))


# ---------------------------------------------------------------- direction

# The dataset never swaps A and B (the models pick their input with --direction, as in the
# original); direction decides which domain gets --input_nc and which --output_nc channels.

def test_aligned_a_is_left_half_in_both_directions(aligned_root):
    a2b = create_dataset(make_opt(aligned_root), seed=0).dataset[0]
    b2a = create_dataset(make_opt(aligned_root, direction="BtoA"), seed=0).dataset[0]
    for sample in (a2b, b2a):
        assert mean_rgb(sample["A"]) == [1.0, -1.0, -1.0] and mean_rgb(sample["B"]) == [-1.0, -1.0, 1.0]


def test_aligned_btoa_gives_input_nc_to_right_half(aligned_root):
    sample = create_dataset(make_opt(aligned_root, direction="BtoA", input_nc=1, output_nc=3), seed=0).dataset[0]
    assert sample["B"].shape[0] == 1 and sample["A"].shape[0] == 3
    sample = create_dataset(make_opt(aligned_root, direction="AtoB", input_nc=1, output_nc=3), seed=0).dataset[0]
    assert sample["A"].shape[0] == 1 and sample["B"].shape[0] == 3


def test_unaligned_a_comes_from_phase_a_folder_in_both_directions(unaligned_root):
    for direction in ("AtoB", "BtoA"):
        sample = create_dataset(make_opt(unaligned_root, dataset_mode="unaligned", direction=direction),
                                seed=0).dataset[0]
        assert "trainA" in sample["A_paths"] and mean_rgb(sample["A"]) == [1.0, -1.0, -1.0]
        assert "trainB" in sample["B_paths"] and mean_rgb(sample["B"]) == [-1.0, -1.0, 1.0]


def test_unaligned_btoa_gives_phase_b_images_input_nc_channels(unaligned_root):
    opt = make_opt(unaligned_root, dataset_mode="unaligned", direction="BtoA", input_nc=1, output_nc=3)
    sample = create_dataset(opt, seed=0).dataset[0]
    assert sample["B"].shape[0] == 1 and sample["A"].shape[0] == 3


# ---------------------------------------------------------------- reproducible augmentation

def gradient_dataset(tmp_path, n=4, **overrides):
    for i in range(n):
        save_gradient(tmp_path / "train" / f"{i}.png", size=(40, 30))
    options = {"dataset_mode": "template", "preprocess": "crop", **overrides}
    return create_dataset(make_opt(tmp_path, **options), seed=7).dataset


def test_no_flip_never_mirrors_images(tmp_path):
    ds = gradient_dataset(tmp_path, n=1, preprocess="none", no_flip=True)
    unflipped = get_transform(ds.opt)(load_image(ds.image_paths[0]))
    for epoch in range(12):
        ds.set_epoch(epoch)
        assert torch.equal(ds[0]["A"], unflipped)


def test_flip_enabled_mirrors_some_epochs(tmp_path):
    ds = gradient_dataset(tmp_path, n=1, preprocess="none")
    unflipped = get_transform(ds.opt)(load_image(ds.image_paths[0]))
    outcomes = set()
    for epoch in range(12):
        ds.set_epoch(epoch)
        outcomes.add(torch.equal(ds[0]["A"], unflipped))
    assert outcomes == {True, False}


def test_same_seed_epoch_index_gives_identical_sample(tmp_path):
    ds = gradient_dataset(tmp_path)
    ds.set_epoch(3)
    first = ds[2]["A"]
    ds.set_epoch(0)
    ds[2]
    ds.set_epoch(3)
    assert torch.equal(ds[2]["A"], first)


def test_different_epoch_changes_augmentation(tmp_path):
    ds = gradient_dataset(tmp_path)
    samples = []
    for epoch in range(4):
        ds.set_epoch(epoch)
        samples.append(ds[1]["A"])
    assert any(not torch.equal(samples[0], s) for s in samples[1:])


def test_worker_count_does_not_change_batches(tmp_path):
    gradient_dataset(tmp_path)
    results = []
    for workers in (0, 2):
        loader = create_dataset(make_opt(tmp_path, dataset_mode="template", preprocess="crop", num_threads=workers),
                                seed=7)
        loader.set_epoch(5)
        results.append([(b["A_paths"], b["A"]) for b in loader])
    for (paths0, a0), (paths2, a2) in zip(*results):
        assert paths0 == paths2 and torch.equal(a0, a2)


def test_serial_batches_pairs_b_by_index_and_keeps_order(unaligned_root):
    opt = make_opt(unaligned_root, dataset_mode="unaligned", serial_batches=True, batch_size=1)
    paths = [(b["A_paths"][0], b["B_paths"][0]) for b in create_dataset(opt, seed=0)]
    names = [(os.path.basename(a), os.path.basename(b)) for a, b in paths]
    assert names == [("0.png", "0.png"), ("1.png", "1.png"), ("2.png", "2.png"), ("3.png", "0.png")]


def test_distributed_ranks_get_disjoint_shares_covering_dataset(aligned_root):
    shares = []
    for rank in (0, 1):
        loader = create_dataset(make_opt(aligned_root, batch_size=1), seed=3, ctx=DistContext(rank=rank, world_size=2))
        loader.set_epoch(1)
        shares.append({b["A_paths"][0] for b in loader})
    assert len(shares[0]) == len(shares[1]) == 2
    assert not shares[0] & shares[1]
    assert shares[0] | shares[1] == set(make_dataset(str(aligned_root / "train")))


def test_max_dataset_size_caps_length(aligned_root):
    loader = create_dataset(make_opt(aligned_root, max_dataset_size=3, batch_size=1), seed=0)
    assert len(loader) == 3 and len(loader.dataset) == 3 and len(list(loader)) == 3
    assert make_dataset(str(aligned_root / "train"), 2) == make_dataset(str(aligned_root / "train"))[:2]


# ---------------------------------------------------------------- finding and loading files

def test_extensions_match_in_any_case(tmp_path):
    save(tmp_path / "a.PNG")
    save(tmp_path / "sub" / "b.JpEg")
    (tmp_path / "notes.txt").write_text("x")
    assert [os.path.basename(p) for p in make_dataset(str(tmp_path))] == ["a.PNG", "b.JpEg"]
    assert is_image_file("x.TIFF") and is_image_file("x.webp") and not is_image_file("x.gif")


def test_rgba_transparent_pixels_become_white(tmp_path):
    path = save(tmp_path / "a.png", size=(2, 1), color=(0, 0, 0, 0), mode="RGBA")
    img = load_image(path, "RGB")
    assert img.mode == "RGB" and img.getpixel((0, 0)) == (255, 255, 255)


def test_palette_image_loads_as_rgb_colors(tmp_path):
    pal = Image.new("RGB", (4, 4), (200, 10, 10)).convert("P", palette=Image.Palette.ADAPTIVE, colors=4)
    pal.save(tmp_path / "p.png")
    img = load_image(str(tmp_path / "p.png"), "RGB")
    assert img.mode == "RGB" and img.getpixel((1, 1)) == (200, 10, 10)


def test_16bit_grayscale_mid_gray_maps_to_128_not_white(tmp_path):
    Image.fromarray(np.full((4, 4), 32896, dtype=np.uint16)).save(tmp_path / "g.png")
    for mode in ("L", "RGB"):
        arr = np.asarray(load_image(str(tmp_path / "g.png"), mode))
        assert np.all(arr == 128)


# ---------------------------------------------------------------- user errors

def assert_user_error(fn, *fragments):
    with pytest.raises(UserError) as info:
        fn()
    for fragment in fragments:
        assert str(fragment) in str(info.value)


def test_missing_dataroot_is_user_error(tmp_path):
    missing = tmp_path / "nope"
    assert_user_error(lambda: create_dataset(make_opt(missing), seed=0), missing, "--dataroot")


def test_empty_folder_is_user_error_listing_extensions(tmp_path):
    (tmp_path / "train").mkdir()
    assert_user_error(lambda: create_dataset(make_opt(tmp_path), seed=0), tmp_path / "train", ".png")
    assert_user_error(lambda: make_dataset(str(tmp_path / "train")), tmp_path / "train", ".jpg")


def test_missing_trainb_is_user_error_naming_folder(tmp_path):
    save(tmp_path / "trainA" / "a.png")
    assert_user_error(lambda: create_dataset(make_opt(tmp_path, dataset_mode="unaligned"), seed=0),
                      tmp_path / "trainB")


def test_aligned_mode_on_unaligned_layout_suggests_unaligned(unaligned_root):
    assert_user_error(lambda: create_dataset(make_opt(unaligned_root), seed=0),
                      unaligned_root / "train", "--dataset_mode unaligned")


@pytest.mark.parametrize("content", [b"", b"this is not an image\n"], ids=["zero-byte", "text"])
def test_unreadable_png_is_user_error_naming_file(tmp_path, content):
    path = tmp_path / "bad.png"
    path.write_bytes(content)
    assert_user_error(lambda: load_image(str(path)), path, "remove or replace")


def test_truncated_jpeg_is_user_error_naming_file(tmp_path):
    path = tmp_path / "t.jpg"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # header intact, pixel data cut off
    assert_user_error(lambda: load_image(str(path)), path, "truncated")


def test_odd_width_aligned_image_is_user_error(tmp_path):
    path = save(tmp_path / "train" / "odd.png", size=(31, 16))
    # refused up front when the dataset is created (or, past the header-check time cap, on loading)
    assert_user_error(lambda: create_dataset(make_opt(tmp_path), seed=0).dataset[0], path, "even width")


def test_load_size_smaller_than_crop_size_is_user_error(aligned_root):
    assert_user_error(lambda: create_dataset(make_opt(aligned_root, load_size=8, crop_size=16), seed=0),
                      "--load_size", "--crop_size")


@pytest.mark.parametrize("bad, counted", [(np.nan, "1 NaN"), (np.inf, "1 infinite"), (-np.inf, "1 infinite")])
def test_float_image_holding_nan_or_infinity_is_user_error_naming_file_and_place(tmp_path, bad, counted):
    pixels = np.random.default_rng(0).random((8, 12, 2), dtype=np.float32)
    pixels[5, 7, 1] = bad
    np.save(tmp_path / "x.npy", pixels)
    spec = DomainSpec(2, "--input_nc", (0.0, 1.0))
    assert_user_error(lambda: load_for_network(str(tmp_path / "x.npy"), [spec]),
                      f"image {tmp_path / 'x.npy'} holds non-finite values: {counted}", "row 5, column 7, band 1")
    pixels[5, 7, 1] = 0.5
    np.save(tmp_path / "x.npy", pixels)
    assert load_for_network(str(tmp_path / "x.npy"), [spec])[0].shape == (2, 8, 12)


def test_data_range_script_leaves_out_non_finite_values_and_names_their_file(tmp_path, capsys):
    (tmp_path / "train").mkdir()
    np.save(tmp_path / "train" / "a.npy", np.array([[-2.0, 3.0]], np.float32))
    np.save(tmp_path / "train" / "b.npy", np.array([[np.nan, 5.0], [-np.inf, 1.0]], np.float32))
    assert load_script("scripts/data_range.py").main(["--dataroot", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "--data_range -2 5" in out \
        and f"1 image(s) hold NaN or infinite values, e.g. {tmp_path / 'train' / 'b.npy'}" in out


def test_links_that_lead_nowhere_are_described_as_links_not_as_missing(tmp_path):
    (tmp_path / "loop_a").symlink_to(tmp_path / "loop_b")
    (tmp_path / "loop_b").symlink_to(tmp_path / "loop_a")
    (tmp_path / "dangling").symlink_to(tmp_path / "unmounted")
    loop = f"{tmp_path / 'loop_a'} is a symbolic link in a loop ({tmp_path / 'loop_a'} -> {tmp_path / 'loop_b'} ->"
    gone = f"{tmp_path / 'dangling'} is a symbolic link to {tmp_path / 'unmounted'}, which does not exist"
    assert_user_error(lambda: create_dataset(make_opt(tmp_path / "loop_a"), seed=0), "--dataroot", loop)
    assert_user_error(lambda: create_dataset(make_opt(tmp_path / "dangling"), seed=0), "--dataroot", gone)
    assert_user_error(lambda: make_dataset(str(tmp_path / "dangling" / "train")), gone)
    assert_user_error(lambda: create_dataset(make_opt(tmp_path / "nowhere"), seed=0), "does not exist")
    image = tmp_path / "photos" / "a.png"
    image.parent.mkdir()
    image.symlink_to(tmp_path / "moved.png")
    with pytest.raises(UserError) as refused:
        load_image(str(image))
    assert f"{image} is a symbolic link to {tmp_path / 'moved.png'}" in str(refused.value)
    assert "moved or deleted" not in str(refused.value)


def test_a_tiff_of_band_pages_reads_as_bands_and_only_rows_stored_as_pages_get_a_hint(tmp_path):
    import tifffile

    tifffile.imwrite(tmp_path / "bands.tif", np.zeros((6, 32, 40), np.float32))  # 6 bands of 32 x 40, as pages
    tifffile.imwrite(tmp_path / "rows.tif", np.zeros((32, 40, 6), np.float32))   # H x W x C: 32 pages of 40 x 6
    assert read_image(str(tmp_path / "bands.tif")).shape == (32, 40, 6)
    assert layout_hint(str(tmp_path / "bands.tif"), probe_image(str(tmp_path / "bands.tif"))) == ""
    spec = DomainSpec(3, "--input_nc", (0.0, 1.0))
    assert_user_error(lambda: load_for_network(str(tmp_path / "rows.tif"), [spec]), "has 32 channels",
                      "32 pages of 40x6 pixels", "40x32 image with 6 channels", 'planarconfig="contig"')


# ---------------------------------------------------------------- Lab conversion

def test_lab_of_known_colors_matches_cie_formula():
    lab = rgb_to_lab(np.array([[[255, 255, 255], [0, 0, 0], [255, 0, 0], [128, 128, 128]]], dtype=np.uint8))[0]
    np.testing.assert_allclose(lab[0], [100.0, 0.0, 0.0], atol=0.01)
    np.testing.assert_allclose(lab[1], [0.0, 0.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(lab[2], [53.24, 80.09, 67.20], atol=0.02)
    np.testing.assert_allclose(lab[3], [53.59, 0.0, 0.0], atol=0.02)


def test_rgb_lab_rgb_round_trip_within_one_level():
    rgb = np.random.default_rng(1).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    back = np.rint(lab_to_srgb(rgb_to_lab(rgb)) * 255)
    assert np.abs(back - rgb).max() <= 1


def test_lab_to_rgb_inverts_colorization_sample(tmp_path):
    rgb = np.random.default_rng(2).integers(0, 256, (16, 16, 3), dtype=np.uint8)
    os.makedirs(tmp_path / "train")
    Image.fromarray(rgb).save(tmp_path / "train" / "c.png")
    opt = make_opt(tmp_path, dataset_mode="colorization", input_nc=1, output_nc=2, preprocess="none", no_flip=True)
    sample = create_dataset(opt, seed=0).dataset[0]
    out = lab_to_rgb(sample["A"].unsqueeze(0), sample["B"].unsqueeze(0))
    assert out.dtype == np.uint8 and out.shape == (16, 16, 3)
    assert np.abs(out.astype(int) - rgb).max() <= 2


def test_a_bad_image_met_in_a_worker_process_ends_the_workers_at_once(tmp_path):
    # The error's traceback keeps the loader's iterator in a reference cycle; freed by the garbage
    # collector, PyTorch's shutdown waited 5 s for each worker: 10 s of silence after the message.
    (tmp_path / "train").mkdir()
    for i in range(4):
        noise = np.random.default_rng(i).integers(0, 256, (64, 128, 3), dtype=np.uint8)
        Image.fromarray(noise).save(tmp_path / "train" / f"{i}.jpg")
    broken = tmp_path / "train" / "3.jpg"
    broken.write_bytes(broken.read_bytes()[:len(broken.read_bytes()) // 2])  # header intact: met in a worker

    def first_epoch() -> tuple[int, str]:
        """Batches read before the error, and its message, as train.py's loop meets them."""
        loader = create_dataset(make_opt(tmp_path, batch_size=1, num_threads=2, serial_batches=True), seed=0)
        loader.set_epoch(1)
        read = 0
        try:
            for _ in loader:
                read += 1
        except UserError as err:
            return read, str(err)
        return read, ""

    read, message = first_epoch()
    assert read == 3 and str(broken) in message
    started = time.monotonic()
    gc.collect()  # as a script that stops on the error frees its loader
    assert time.monotonic() - started < 3.0
