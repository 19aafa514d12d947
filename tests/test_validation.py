"""The up-front image checks of `data.input_checks` (in-process and fast; the end-to-end behaviour of
train.py/test.py on bad input is in test_bad_input.py)."""
from __future__ import annotations

import argparse
import random

import numpy as np
import pytest
from PIL import Image, ImageFile

from data import create_dataset
from data.base_dataset import get_params, get_transform
from data.image_folder import load_image, read_image_header
from data.input_checks import _final_size, check_dataset_root, check_image_files
from models.networks import size_rule
from util.errors import UserError


def make_opt(root, **overrides) -> argparse.Namespace:
    """Options as train.py parses them, for a pix2pix run on 32x32 A|B pairs."""
    values = dict(
        dataroot=str(root), phase="train", dataset_mode="aligned", direction="AtoB", input_nc=3, output_nc=3,
        preprocess="resize_and_crop", load_size=32, crop_size=32, no_flip=False, serial_batches=False,
        batch_size=1, num_threads=0, max_dataset_size=float("inf"), isTrain=True, netG="resnet_6blocks",
        skip_bad_images=False, data_range=None,
    )
    values.update(overrides)
    return argparse.Namespace(**values)


def write(path, size=(64, 32), mode="RGB", seed=0):
    path.parent.mkdir(parents=True, exist_ok=True)
    w, h = size
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)).convert(mode).save(path)
    return path


def pairs(root, count=3, folder="train"):
    return [write(root / folder / f"{i:04d}.png", seed=i) for i in range(count)]


def checked(opt) -> None:
    """The checks as train.py runs them, with the size rule of the run's --netG."""
    check_dataset_root(opt, size_rule(opt.netG))


def refused(opt, *fragments) -> str:
    with pytest.raises(UserError) as info:
        checked(opt)
    message = str(info.value)
    for fragment in fragments:
        assert str(fragment) in message, (fragment, message)
    return message


# ---------------------------------------------------------------------------------- unreadable files
@pytest.mark.parametrize("content, fragments", [
    (b"", ["empty (0 bytes)"]),
    (b"this is not an image\n", ["not an image", "ends in .png", "this is not an image"]),
    (b"<!DOCTYPE html><html>404</html>", ["HTML", "failed download"]),
    (b"version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 1\n", ["Git LFS pointer", "git lfs pull"]),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00", ["cannot read image"]),
], ids=["zero-byte", "text", "html", "git-lfs-pointer", "header-cut-off"])
def test_unreadable_file_is_refused_up_front_naming_it(tmp_path, content, fragments):
    bad = pairs(tmp_path)[1]
    bad.write_bytes(content)
    refused(make_opt(tmp_path), bad, "remove or replace", *fragments)
    with pytest.raises(UserError, match="remove or replace"):  # the same words when met while loading
        load_image(str(bad))


def test_several_bad_files_name_the_first_and_count_the_rest(tmp_path):
    paths = pairs(tmp_path, 6)
    for p in paths[1:5]:
        p.write_bytes(b"")
    message = refused(make_opt(tmp_path), paths[1], "3 more of the 6 images checked", paths[2], "--skip_bad_images")
    assert message.count("cannot read image") == 1


def test_files_beyond_max_dataset_size_are_not_checked_and_not_read(tmp_path):
    paths = pairs(tmp_path, 3)
    paths[2].write_bytes(b"")  # last in sorted order
    opt = make_opt(tmp_path, max_dataset_size=2)
    loader = create_dataset(opt, seed=0)
    assert [b["A_paths"][0] for b in loader] and len(loader.dataset) == 2


def test_only_the_first_num_test_images_are_checked_for_test_py(tmp_path):
    paths = pairs(tmp_path, 3, folder="test")
    paths[2].write_bytes(b"")
    checked(make_opt(tmp_path, phase="test", isTrain=False, num_test=2, tile=0))
    refused(make_opt(tmp_path, phase="test", isTrain=False, num_test=3, tile=0), paths[2])


def test_unaligned_test_run_checks_every_b_image_when_b_is_drawn_at_random(tmp_path):
    for i in range(3):
        write(tmp_path / "testA" / f"{i}.png", (32, 32), seed=i)
        write(tmp_path / "testB" / f"{i}.png", (32, 32), seed=i)
    (tmp_path / "testB" / "2.png").write_bytes(b"")
    opt = dict(phase="test", dataset_mode="unaligned", isTrain=False, num_test=1, tile=0)
    checked(make_opt(tmp_path, serial_batches=True, **opt))  # reads only testB/0.png
    refused(make_opt(tmp_path, serial_batches=False, **opt), tmp_path / "testB" / "2.png")


def test_skip_bad_images_warns_naming_the_file_and_proceeds(tmp_path, capsys):
    paths = pairs(tmp_path, 3)
    paths[2].write_bytes(b"")
    checked(make_opt(tmp_path, skip_bad_images=True))
    err = capsys.readouterr().err
    assert "warning" in err and str(paths[2]) in err and "--skip_bad_images" in err


def test_skip_bad_images_refuses_when_nothing_is_readable(tmp_path):
    for p in pairs(tmp_path, 2):
        p.write_bytes(b"")
    refused(make_opt(tmp_path, skip_bad_images=True), "--skip_bad_images", "none of the 2 images")


def test_header_check_stops_at_its_time_budget_and_says_so(tmp_path, capsys):
    paths = pairs(tmp_path, 3)
    paths[0].write_bytes(b"")
    # nothing checked: left to load time
    check_image_files(make_opt(tmp_path), size_rule('resnet_6blocks'), budget_s=-1.0)
    assert "checked the headers of 0 of 3 images" in capsys.readouterr().out


def test_header_check_reads_headers_only(tmp_path, monkeypatch):
    # Decoding is what costs time (1000 files of 256x512: ~2 s, their headers ~0.1 s): none may be decoded.
    paths = pairs(tmp_path, 20)
    paths[-1].write_bytes(paths[-1].read_bytes()[:40])  # the last one's header is cut short
    decoded = []
    decode = ImageFile.ImageFile.load
    monkeypatch.setattr(ImageFile.ImageFile, "load", lambda image: decoded.append(image.filename) or decode(image))
    with pytest.raises(UserError, match=str(paths[-1])):  # every header was read, down to the last
        check_image_files(make_opt(tmp_path), size_rule('resnet_6blocks'), budget_s=60)
    assert decoded == []


def test_truncated_jpeg_passes_the_header_check_and_fails_at_load(tmp_path):
    path = write(tmp_path / "train" / "0000.jpg")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # header intact, pixel data cut off
    assert read_image_header(str(path)) == (64, 32, "RGB")
    checked(make_opt(tmp_path))
    with pytest.raises(UserError, match="truncated"):
        load_image(str(path))


# ---------------------------------------------------------------------------------- layout and sizes
def test_odd_width_aligned_image_is_refused_up_front(tmp_path):
    paths = pairs(tmp_path)
    write(paths[1], (63, 32))
    refused(make_opt(tmp_path), paths[1], "63x32", "even width", f"re-save {paths[1]} as A|B")


@pytest.mark.parametrize("mode", ["template", "colorization"])
def test_odd_width_is_fine_where_the_image_is_not_split(tmp_path, mode):
    write(tmp_path / "train" / "0.png", (63, 32))
    extra = dict(input_nc=1, output_nc=2) if mode == "colorization" else {}
    checked(make_opt(tmp_path, dataset_mode=mode, **extra))


@pytest.mark.parametrize("preprocess", ["resize_and_crop", "scale_width_and_crop"])
def test_tiny_image_is_fine_when_it_is_resized(tmp_path, preprocess):
    paths = pairs(tmp_path)
    Image.new("RGB", (2, 1)).save(paths[1])
    checked(make_opt(tmp_path, preprocess=preprocess))


@pytest.mark.parametrize("preprocess, size, reaches", [
    ("none", (2, 1), "4x4"),
    ("crop", (20, 10), "10x10"),          # no larger than --crop_size: kept as it is
    ("scale_width", (64, 45), "32x45"),   # height 45 is no multiple of 4
])
def test_image_whose_own_size_reaches_the_generator_must_fit_netG(tmp_path, preprocess, size, reaches):
    paths = pairs(tmp_path)
    Image.new("RGB", size).save(paths[1])
    refused(make_opt(tmp_path, preprocess=preprocess), paths[1], f"--preprocess {preprocess}", reaches,
            "--netG resnet_6blocks")


def test_unet_needs_its_full_size_with_preprocess_none(tmp_path):
    pairs(tmp_path)  # 32x32 halves
    refused(make_opt(tmp_path, preprocess="none", netG="unet_128"), "--netG unet_128", "128x128")
    checked(make_opt(tmp_path, preprocess="none", netG="resnet_9blocks"))


def test_different_sizes_are_refused_only_when_batched(tmp_path):
    paths = pairs(tmp_path)
    write(paths[2], (96, 48))
    checked(make_opt(tmp_path, preprocess="none", batch_size=1))
    refused(make_opt(tmp_path, preprocess="none", batch_size=2), paths[0], paths[2], "32x32", "48x48",
            "--batch_size 1")
    checked(make_opt(tmp_path, preprocess="resize_and_crop", batch_size=2))  # all become 32x32


@pytest.mark.parametrize("preprocess", ["none", "crop", "scale_width"])
@pytest.mark.parametrize("size", [(1, 1), (5, 3), (26, 37), (32, 32), (40, 60), (100, 20), (33, 64)])
def test_predicted_size_matches_the_transform(tmp_path, preprocess, size):
    opt = make_opt(tmp_path, preprocess=preprocess, load_size=36, crop_size=32)
    out = get_transform(opt, get_params(opt, size, random.Random(0)))(Image.new("RGB", size))
    assert _final_size(opt, *size) == (out.shape[2], out.shape[1])


# ---------------------------------------------------------------------------------- convertible images
def save_in_mode(path, mode):
    rng = np.random.default_rng(0)
    if mode in ("I;16", "I", "F"):
        dtype = {"I;16": np.uint16, "I": np.int32, "F": np.float32}[mode]
        img = Image.fromarray(rng.integers(0, 65536, (32, 64)).astype(dtype))
    elif mode == "LAB":
        img = Image.new("LAB", (64, 32), (50, 20, 200))
    else:
        img = Image.fromarray(rng.integers(0, 256, (32, 64, 3), dtype=np.uint8)).convert(mode)
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path)
    return path


@pytest.mark.parametrize("mode, ext", [
    ("L", ".png"), ("LA", ".png"), ("RGBA", ".png"), ("P", ".png"), ("1", ".png"), ("I;16", ".png"),
    ("CMYK", ".jpg"), ("I", ".tif"), ("F", ".tif"), ("LAB", ".tif"),
])
def test_images_of_any_mode_pass_the_check_and_load_as_rgb_or_gray(tmp_path, mode, ext):
    path = save_in_mode(tmp_path / "train" / f"0{ext}", mode)
    assert read_image_header(str(path))[2] == mode
    checked(make_opt(tmp_path))
    for target in ("RGB", "L"):
        assert load_image(str(path), target).mode == target


def test_premultiplied_gray_alpha_converts_too():
    from data.image_folder import _convert

    img = Image.new("La", (4, 4))
    assert _convert(img, "RGB").mode == "RGB" and _convert(img, "L").mode == "L"
