"""Pictures too large to hold (models/inference/large_pictures.py): `Translator.translate_file` and
scripts/translate.py read a TIFF by regions, translate it exactly and write it by regions into a tiled TIFF, so
the output is the whole picture's translation while the picture is never whole in memory; what needs the picture
whole is refused in one paragraph, and a failure midway leaves nothing at the output path. A PNG or JPEG is held as
its samples only and translated by regions likewise; a .npy file is mapped, in and out.

Each case forces the way by regions with a small exact budget (a TIFF goes by regions when its float32 values
exceed a quarter of the budget's memory)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest
import tifffile
import torch
from PIL import Image
from torch import nn

from conftest import load_script, run_in_process
from data.image_io import read_image
from models import networks
from models.inference.exact import ExactBudget
from models.inference.held_pictures import held_samples
from models.inference.translator import Translator
from util.errors import UserError

large_tiff_under_limit = load_script("dev/large_tiff_under_limit.py")
BY_REGIONS = ExactBudget(memory=2 << 20)  # 2 MiB: pictures over 512 KiB of float32 go by regions, in many tiles


def tiny_net(channels: int, seed: int = 0) -> nn.Module:
    """Two convolutions, zero-padded: every output pixel reads its neighbours (and so the reflected padding)."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(channels, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, channels, 3, padding=1),
                         nn.Tanh())


def written_by_regions(path: Path) -> bool:
    """Whether `path` was written by regions: a tiled TIFF (a whole picture's TIFF is written in strips)."""
    with tifffile.TiffFile(path) as written:
        return written.pages.first.is_tiled


def ramps(height: int, width: int, bands: int, dtype: type) -> np.ndarray:
    """Smooth, different in every band, spanning most of the dtype's range."""
    rows, columns = np.mgrid[0:height, 0:width] / 60.0
    waves = [np.sin(rows + columns * (band + 1)) * np.cos(rows * (band + 2) - columns) for band in range(bands)]
    return ((np.stack(waves, -1) * 0.45 + 0.5) * np.iinfo(dtype).max).astype(dtype)


def test_a_16_bit_tiff_translated_by_regions_equals_the_whole_picture_translation(tmp_path):
    picture = ramps(700, 900, 3, np.uint16)
    tifffile.imwrite(tmp_path / "big.tif", picture, tile=(128, 128), compression="zlib")
    torch.manual_seed(0)
    generator = networks.define_G(3, 3, 4, "resnet_6blocks", "instance", init_type="xavier", init_gain=1.0)
    for name, budget in (("regions.tif", BY_REGIONS), ("whole.tif", None)):
        translator = Translator.from_generator(generator, "resnet_6blocks", 3, 3, device="cpu", exact=budget)
        assert translator.translate_file(tmp_path / "big.tif", tmp_path / name) == [str(tmp_path / name)]
    assert written_by_regions(tmp_path / "regions.tif") and not written_by_regions(tmp_path / "whole.tif")
    by_regions, whole = read_image(str(tmp_path / "regions.tif")), read_image(str(tmp_path / "whole.tif"))
    assert by_regions.shape == whole.shape == picture.shape and by_regions.dtype == np.uint16
    assert np.ptp(whole) > 20000  # an output that varies: a wrong region or padding would show
    # a value within float rounding of a rounding boundary may round either way
    assert np.abs(by_regions.astype(np.int32) - whole).max() <= 1


def test_an_8_bit_tiff_turned_by_its_orientation_tag_is_read_by_regions_as_shown_and_padded(tmp_path):
    picture = ramps(70, 97, 3, np.uint8)  # 97 x 70 as shown: both sides padded to a multiple of 4, unevenly
    tifffile.imwrite(tmp_path / "turned.tif", picture, extratags=[(274, "H", 1, 6, False)])  # 90 degrees clockwise
    net = tiny_net(3)
    for name, budget in (("regions.tif", ExactBudget(memory=256 << 10)), ("whole.tif", None)):
        Translator.from_generator(net, "resnet_6blocks", 3, 3, device="cpu", exact=budget).translate_file(
            tmp_path / "turned.tif", tmp_path / name)
    by_regions, whole = read_image(str(tmp_path / "regions.tif")), read_image(str(tmp_path / "whole.tif"))
    assert written_by_regions(tmp_path / "regions.tif")
    assert by_regions.shape == whole.shape == (97, 70, 3) and by_regions.dtype == np.uint8
    assert np.abs(by_regions.astype(np.int32) - whole).max() <= 1


def test_a_png_and_a_turned_jpeg_too_large_to_hold_as_float32_are_translated_by_regions_as_the_whole_way(tmp_path):
    # Formats decoded whole are held as their samples (8-bit: a quarter of the float32 values) and read by regions
    # from them; the output is written in the format its name says. (That the float32 values are never whole is
    # shown under an address-space cap below.)
    Image.fromarray(ramps(301, 499, 3, np.uint8)).save(tmp_path / "wide.png")
    exif = Image.Exif()
    exif[0x0112] = 6  # shown turned 90 degrees clockwise: 403 x 250
    Image.fromarray(ramps(250, 403, 3, np.uint8)).save(tmp_path / "turned.jpg", exif=exif, quality=95)
    net = tiny_net(3)
    by_regions = Translator.from_generator(net, "resnet_6blocks", 3, 3, device="cpu", exact=BY_REGIONS)
    whole = Translator.from_generator(net, "resnet_6blocks", 3, 3, device="cpu", exact=None)
    for source, output, shape in (("wide.png", "wide.png", (301, 499, 3)), ("turned.jpg", "turned.png", (403, 250, 3))):
        by_regions.translate_file(tmp_path / source, tmp_path / "regions" / output)
        whole.translate_file(tmp_path / source, tmp_path / "whole" / output)
        written, expected = read_image(str(tmp_path / "regions" / output)), read_image(str(tmp_path / "whole" / output))
        assert written.shape == expected.shape == shape and written.dtype == np.uint8
        assert np.ptp(expected) > 100 and np.abs(written.astype(np.int32) - expected).max() <= 1
    assert sorted(os.listdir(tmp_path / "regions")) == ["turned.png", "wide.png"]  # and no temporary file
    # Asked for cross-faded tiles, a held picture goes the whole way (it is decoded whole anyway), as before: under
    # instance norm (each tile normalised on its own) the cross-fade shows.
    torch.manual_seed(0)
    normed = networks.define_G(3, 3, 4, "resnet_6blocks", "instance", init_type="xavier", init_gain=1.0)
    for budget, name, tile in ((BY_REGIONS, "tiled.png", 128), (None, "whole_tiled.png", 128), (None, "exact.png", 0)):
        Translator.from_generator(normed, "resnet_6blocks", 3, 3, device="cpu", exact=budget).translate_file(
            tmp_path / "wide.png", tmp_path / name, tile=tile)
    tiled = read_image(str(tmp_path / "tiled.png"))
    assert np.array_equal(tiled, read_image(str(tmp_path / "whole_tiled.png")))
    assert not np.array_equal(tiled, read_image(str(tmp_path / "exact.png")))


def test_a_float_npy_too_large_to_hold_goes_by_regions_mapped_and_is_checked_before_the_first_tile(tmp_path):
    # A .npy file is mapped, in and out, not read: its float32 values are never whole in memory.
    picture = ramps(301, 499, 3, np.uint16) / 65535.0  # float64 in [0, 1]: read as float32, as the whole way
    np.save(tmp_path / "big.npy", picture)
    assert isinstance(held_samples(str(tmp_path / "big.npy")), np.memmap)
    net = tiny_net(3)
    for name, budget in (("regions", BY_REGIONS), ("whole", None)):
        Translator.from_generator(net, "resnet_6blocks", 3, 3, device="cpu", exact=budget).translate_file(
            tmp_path / "big.npy", tmp_path / name / "out.npy")
    written, expected = np.load(tmp_path / "regions" / "out.npy"), np.load(tmp_path / "whole" / "out.npy")
    assert written.shape == expected.shape == (301, 499, 3) and written.dtype == np.float32
    # [-1, 1] float rounding (1e-5, the exact executor's bound) is half that in [0, 1]
    assert np.ptp(expected) > 0.2 and np.abs(written - expected).max() <= 1e-5
    assert os.listdir(tmp_path / "regions") == ["out.npy"]  # and no temporary file
    # Refused before the generator's first tile (it would raise): a NaN, named where it is; float data into a PNG.
    failing = nn.Sequential(nn.Conv2d(3, 3, 3, padding=1), FailingNorm(3, fail_at=1), nn.Tanh())
    translator = Translator.from_generator(failing, "resnet_6blocks", 3, 3, device="cpu", exact=BY_REGIONS)
    picture[250, 7, 1] = np.nan
    np.save(tmp_path / "nan.npy", picture)
    with pytest.raises(UserError, match=r"1 NaN \(the first at row 250, column 7, band 1\)"):
        translator.translate_file(tmp_path / "nan.npy", tmp_path / "refused" / "nan.npy")
    with pytest.raises(UserError, match="cannot write .*out.png: .png files cannot hold 3-channel float32"):
        translator.translate_file(tmp_path / "big.npy", tmp_path / "refused" / "out.png")
    assert not (tmp_path / "refused").exists()


@pytest.mark.parametrize("options, refused", [
    (dict(tile=256), "--tile 256"),
    (dict(output="out.png"), "name the output .tif or .tiff"),
    (dict(eval_mode=False), "--no_eval"),
], ids=["tiles", "not a TIFF", "training mode"])
def test_what_needs_the_picture_whole_is_refused_in_one_paragraph_and_nothing_is_written(tmp_path, options, refused):
    tifffile.imwrite(tmp_path / "big.tif", ramps(300, 500, 1, np.uint16))  # 600 KB of float32
    translator = Translator.from_generator(tiny_net(1), "resnet_6blocks", 1, 1, device="cpu", exact=BY_REGIONS,
                                           eval_mode=options.get("eval_mode", True))
    output = tmp_path / "out" / options.get("output", "out.tif")
    with pytest.raises(UserError, match=refused) as refusal:
        translator.translate_file(tmp_path / "big.tif", output, tile=options.get("tile", 0))
    assert "\n" not in str(refusal.value) and "big.tif" in str(refusal.value)
    assert not output.parent.exists()


class FailingNorm(nn.BatchNorm2d):
    """Batch norm (eval mode: its running statistics) that raises at its `fail_at`-th call on real pixels: the
    exact executor calls it once a tile."""

    def __init__(self, *args, fail_at: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls, self.fail_at = 0, fail_at

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "meta":
            self.calls += 1
            if self.calls == self.fail_at:
                raise RuntimeError("the generator failed midway")
        return super().forward(x)


def test_a_generator_failing_midway_leaves_nothing_at_the_output_path(tmp_path):
    tifffile.imwrite(tmp_path / "big.tif", ramps(600, 700, 1, np.uint16))
    failing = FailingNorm(1, fail_at=50)  # of 56 tiles: past the first 512 rows, which the writer has written
    generator = nn.Sequential(nn.Conv2d(1, 1, 3, padding=1), failing, nn.Tanh())
    translator = Translator.from_generator(generator, "resnet_6blocks", 1, 1, device="cpu",
                                           exact=ExactBudget(memory=1 << 20))
    with pytest.raises(RuntimeError, match="failed midway"):
        translator.translate_file(tmp_path / "big.tif", tmp_path / "out" / "big.tif")
    assert failing.calls == 50
    assert os.listdir(tmp_path / "out") == []  # no output, no partial file


def test_translate_command_writes_a_tiff_too_large_for_exact_memory_under_its_name_and_skips_it_with_tile(tmp_path):
    picture = ramps(300, 500, 1, np.uint16)  # 600 KB of float32: by regions within --exact_memory 1 (MiB)
    tifffile.imwrite(tmp_path / "big.tif", picture, tile=(64, 64))
    (tmp_path / "run").mkdir()
    torch.manual_seed(0)
    generator = networks.define_G(1, 1, 4, "resnet_6blocks", "instance", init_type="xavier", init_gain=1.0)
    torch.save(generator.state_dict(), tmp_path / "run" / "latest_net_G.pth")
    flags = ["--checkpoint", str(tmp_path / "run"), "--device", "cpu", "--exact_memory", "1", "--netG",
             "resnet_6blocks", "--norm", "instance", "--ngf", "4", "--input_nc", "1", "--output_nc", "1"]
    result = run_in_process("scripts/translate.py", str(tmp_path / "big.tif"), "--output", str(tmp_path / "out"),
                            *flags)
    assert result.returncode == 0, result.stderr
    whole = Translator.from_generator(generator, "resnet_6blocks", 1, 1, device="cpu", exact=None).translate(picture)
    written = read_image(str(tmp_path / "out" / "big.tif"))
    assert written_by_regions(tmp_path / "out" / "big.tif")
    assert written.dtype == np.uint16 and np.abs(written.astype(np.int32) - whole).max() <= 1
    tiled = run_in_process("scripts/translate.py", str(tmp_path / "big.tif"), "--output", str(tmp_path / "tiled"),
                           "--tile", "128", *flags)
    assert tiled.returncode == 2 and "--tile 128" in tiled.stdout + tiled.stderr
    assert not (tmp_path / "tiled" / "big.tif").exists()


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the address space from /proc (Linux)")
def test_a_tiff_and_a_png_larger_than_the_memory_allowed_are_translated_within_it(tmp_path):
    # 8192 x 16384 uint16 (256 MiB of samples, 512 MiB as float32) translated within 192 MiB of address space more
    # than the process holds; the file is 300 KB of one constant compressed tile repeated. (16384 x 16384 passes
    # too, in twice the time: over 20 s on 2 cores; dev/large_tiff_under_limit.py runs the same at 32768 x 32768.)
    # Then a 4096 x 8192 8-bit PNG: its float32 input and output (256 MiB) do not fit, its samples held do (32 MiB).
    height, width = 8192, 16384
    large_tiff_under_limit.write_constant_tiff(tmp_path / "huge.tif", height, width)
    large_tiff_under_limit.write_constant_png(tmp_path / "wide.png", 4096, 8192)
    result = large_tiff_under_limit.translate_under_limit(tmp_path, height, width, headroom_mib=192, timeout=120,
                                                          png=(4096, 8192))
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(os.listdir(tmp_path / "out")) == ["huge.tif", "warm.tif", "wide.png"]


def test_smaller_tiffs_keep_the_whole_way(tmp_path):
    """A TIFF whose float32 values fit a quarter of the budget is translated whole, as before (--tile too)."""
    tifffile.imwrite(tmp_path / "small.tif", ramps(40, 60, 1, np.uint16))
    translator = Translator.from_generator(tiny_net(1), "resnet_6blocks", 1, 1, device="cpu", exact=BY_REGIONS)
    translator.translate_file(tmp_path / "small.tif", tmp_path / "out.tif")
    assert read_image(str(tmp_path / "out.tif")).shape == (40, 60, 1)
    assert not written_by_regions(tmp_path / "out.tif")


def test_a_tiff_damaged_past_its_first_rows_is_refused_naming_it_and_leaves_nothing(tmp_path):
    """The file is read region by region, so its damage is found midway, when its region is read."""
    picture = ramps(512, 512, 1, np.uint16)
    path = tmp_path / "damaged.tif"
    tifffile.imwrite(path, picture, tile=(64, 64), compression="zlib")
    with tifffile.TiffFile(path) as tif:
        offset = tif.pages.first.dataoffsets[-1]  # the last tile
    with open(path, "r+b") as file:
        file.seek(offset)
        file.write(b"\xff" * 16)
    translator = Translator.from_generator(tiny_net(1), "resnet_6blocks", 1, 1, device="cpu", exact=BY_REGIONS)
    with pytest.raises(UserError, match=f"{path} is damaged"):
        translator.translate_file(path, tmp_path / "out" / "damaged.tif")
    assert os.listdir(tmp_path / "out") == []

