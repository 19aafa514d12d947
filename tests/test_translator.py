"""Translator (models/inference/translator.py), scripts/translate.py and the HTTP example of docs/inference.md."""
from __future__ import annotations

import importlib.util
import io
import os
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import ROOT, run_script
from data.image_io import read_image, write_image
from models import create_model, networks
from models.inference.saved_generator import infer_architecture
from models.inference.translator import Translator
from options.base_options import save_options
from options.train_options import TrainOptions
from util.distributed import DistContext
from util.errors import UserError

# Weights far from the reference's N(0, 0.02) start, so that outputs vary across the whole range
# and a wrong network, direction or mode shows in every pixel.
INIT = ["--init_type", "xavier", "--init_gain", "1.0"]
CYCLE = ["--model", "cycle_gan", "--ngf", "8"]
PIX = ["--model", "pix2pix", "--ngf", "8", "--netG", "resnet_6blocks", "--direction", "BtoA"]
REFERENCE = ["--netG", "resnet_9blocks", "--ngf", "8", "--norm", "batch", "--no_dropout"]
SIZES = {"sq": (32, 32), "wide": (44, 28), "big": (72, 60)}  # (width, height); big is tiled below
TILE = {"tile": 48, "tile_overlap": 16}


def load_script(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


test_py = load_script(ROOT / "test.py", "test_py_for_translator")
translate_py = load_script(ROOT / "scripts" / "translate.py", "translate_py")


def save_run(checkpoints: Path, name: str, flags: list[str]) -> Path:
    """A run folder as train.py writes it (weights, architecture.json, train_opt.json), from the model's
    own code."""
    opt = TrainOptions().parse(["--dataroot", "unused", "--name", name, "--checkpoints_dir", str(checkpoints),
                                "--ndf", "8", "--display_id", "0", *INIT, *flags])
    save_options(opt)
    torch.manual_seed(0)
    model = create_model(opt, DistContext())
    for name, net in model.named_networks().items():
        if name.startswith("G"):
            give_batch_norm_running_statistics(net)
    model.save_networks("latest")
    return checkpoints / name


def give_batch_norm_running_statistics(net: torch.nn.Module) -> None:
    """Running statistics unlike the per-image ones, so that eval and training mode differ."""
    channels = next(m for m in net.modules() if isinstance(m, torch.nn.Conv2d)).in_channels
    with torch.no_grad():
        net.train()
        for _ in range(3):
            net(torch.rand(2, channels, 32, 32) * 1.6 - 0.4)


def random_png(path: Path, size: tuple[int, int], rng: np.random.Generator) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(path)


def png(path: Path) -> np.ndarray:
    with Image.open(path) as img:
        return np.asarray(img.convert("RGB")).astype(int)


def run_test_py(*args: str) -> None:
    assert test_py.main([*args, "--preprocess", "none", "--device", "cpu", "--num_threads", "0"]) == 0


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """Images of square and non-square sizes, and three checkpoints: a cycle_gan run `c`, a pix2pix
    run `p` (BtoA, batch norm, dropout) and `ref`, a reference-format folder holding only
    latest_net_G.pth (resnet_9blocks, batch norm, no dropout, no architecture.json)."""
    root = tmp_path_factory.mktemp("translator")
    rng = np.random.default_rng(0)
    for name, (w, h) in SIZES.items():
        random_png(root / "unpaired" / "testA" / f"{name}.png", (w, h), rng)
        random_png(root / "unpaired" / "testB" / f"{name}.png", (h, w), rng)
        random_png(root / "paired" / "test" / f"{name}.png", (2 * w, h), rng)  # A|B side by side
    save_run(root / "ckpt", "c", CYCLE)
    save_run(root / "ckpt", "p", PIX)
    (root / "ckpt" / "ref").mkdir()
    torch.manual_seed(1)
    net = networks.define_G(3, 3, 8, "resnet_9blocks", "batch", init_type="xavier", init_gain=1.0)
    give_batch_norm_running_statistics(net)
    torch.save(net.state_dict(), root / "ckpt" / "ref" / "latest_net_G.pth")
    return root


def results(work: Path, name: str) -> Path:
    return work / "results" / name / "test_latest" / "images"


# ---------------------------------------------------------------------------------- equals test.py
def test_cycle_gan_translator_equals_test_py_in_both_directions_at_any_size_and_tiled(work):
    run_test_py("--dataroot", str(work / "unpaired"), "--name", "c", *CYCLE, "--checkpoints_dir",
                str(work / "ckpt"), "--results_dir", str(work / "results"), "--tile", "48", "--tile_overlap", "16")
    forward = Translator.load(work / "ckpt" / "c", device="cpu")  # no architecture flags
    backward = Translator.load(work / "ckpt" / "c", direction="BtoA", device="cpu")
    for name in SIZES:
        tile = TILE if name == "big" else {}
        fake_B = forward.translate(work / "unpaired" / "testA" / f"{name}.png", **tile)
        fake_A = backward.translate(str(work / "unpaired" / "testB" / f"{name}.png"), **tile)
        assert np.abs(fake_B - png(results(work, "c") / f"{name}_fake_B.png")).max() <= 1, name
        assert np.abs(fake_A - png(results(work, "c") / f"{name}_fake_A.png")).max() <= 1, name
        assert fake_B.std() > 20 and fake_A.std() > 20  # outputs vary, so equality means something


def test_pix2pix_translator_equals_test_py_eval_in_its_trained_direction(work):
    run_test_py("--dataroot", str(work / "paired"), "--name", "p", *PIX, "--eval", "--checkpoints_dir",
                str(work / "ckpt"), "--results_dir", str(work / "results"))
    translator = Translator.load(work / "ckpt" / "p", device="cpu")  # BtoA, from architecture.json
    training_mode = Translator.load(work / "ckpt" / "p", device="cpu", eval_mode=False)
    for name, (w, h) in SIZES.items():
        b_half = Image.open(work / "paired" / "test" / f"{name}.png").crop((w, 0, 2 * w, h))
        fake = np.asarray(translator.translate(b_half)).astype(int)
        assert np.abs(fake - png(results(work, "p") / f"{name}_fake_B.png")).max() <= 1, name
        # Batch statistics and dropout (the reference's test.py without --eval) give other images,
        # each image its own whatever else is in its batch (test.py translates one at a time).
        alone = training_mode.translate(np.asarray(b_half))
        assert np.abs(alone.astype(int) - fake).mean() > 5
        assert np.array_equal(training_mode.translate(np.stack([np.asarray(b_half)[::-1], b_half]))[1], alone)
    with pytest.raises(UserError, match="trained --direction BtoA"):
        Translator.load(work / "ckpt" / "p", direction="AtoB")


def test_reference_checkpoint_without_architecture_json_equals_test_py_without_eval(work):
    run_test_py("--dataroot", str(work / "unpaired" / "testA"), "--name", "ref", "--model", "test", *REFERENCE,
                "--checkpoints_dir", str(work / "ckpt"), "--results_dir", str(work / "results"))
    inferred = Translator.load(work / "ckpt" / "ref", device="cpu", eval_mode=False)
    explicit = Translator.load(work / "ckpt" / "ref" / "latest_net_G.pth", device="cpu", eval_mode=False,
                               netG="resnet_9blocks", ngf=8, norm="batch", no_dropout=True)
    for name in ("sq", "wide"):
        expected = png(results(work, "ref") / f"{name}_fake.png")
        for translator in (inferred, explicit):
            assert np.abs(translator.translate(work / "unpaired" / "testA" / f"{name}.png") - expected).max() <= 1
    with pytest.raises(UserError, match=r"latest_net_G\.pth does not fit --netG resnet_6blocks.*look like "
                                        r"--netG resnet_9blocks --norm batch --ngf 8"):
        Translator.load(work / "ckpt" / "ref", netG="resnet_6blocks")


def test_architecture_is_read_from_generator_weights_of_every_kind():
    for netG in networks.generators():
        for norm in ("batch", "instance", "none"):
            for dropout in (False, True):
                state = networks.define_G(1, 3, 8, netG, norm, dropout).state_dict()
                expected = {"netG": netG, "norm": norm, "ngf": 8, "input_nc": 1, "output_nc": 3}
                if netG.startswith("resnet"):  # a U-Net's dropout leaves no trace in its weights
                    expected["no_dropout"] = not dropout
                assert infer_architecture(state) == expected
    assert infer_architecture(networks.define_D(3, 8, "basic").state_dict()) == {}


# ---------------------------------------------------------------------------------- kinds of input
def test_translate_returns_the_kind_and_precision_it_was_given(work):
    translator = Translator.load(work / "ckpt" / "c", device="cpu")
    path = work / "unpaired" / "testA" / "wide.png"
    rgb = np.asarray(Image.open(path))
    expected = translator.translate(path)
    assert expected.dtype == np.uint8 and expected.shape == rgb.shape

    image = translator.translate(Image.open(path))
    assert isinstance(image, Image.Image) and image.mode == "RGB" and np.array_equal(np.asarray(image), expected)
    wide = translator.translate(rgb.astype(np.uint16) * 257)
    assert wide.dtype == np.uint16 and np.abs(wide / 257 - expected).max() <= 1
    floats = translator.translate(rgb.astype(np.float32) / 255)
    assert floats.dtype == np.float32 and np.abs(floats * 255 - expected).max() <= 1
    tensor = torch.from_numpy(rgb.copy()).permute(2, 0, 1).double() / 127.5 - 1
    out = translator.translate(tensor)
    assert out.dtype == torch.float64 and out.shape == tensor.shape and not out.is_inference()
    assert out.min() >= -1 and np.abs((out.permute(1, 2, 0).numpy() + 1) * 127.5 - expected).max() <= 1
    batch = translator.translate(torch.stack([tensor, tensor.flip(-1)]).half())
    assert batch.dtype == torch.float16 and batch.shape == (2, 3, 28, 44)
    assert (batch[0].double() - out).abs().max() < 1e-2  # a batch gives each image's own output
    gray = translator.translate(rgb[:, :, 0])  # HxW gray into the RGB generator, as test.py reads gray files
    assert gray.shape == rgb.shape
    listed = translator.translate([path, rgb[:20, :30]])
    assert np.array_equal(listed[0], expected) and listed[1].shape == (20, 30, 3)
    with pytest.raises(UserError, match="int32 array"):
        translator.translate(rgb.astype(np.int32))
    with pytest.raises(UserError, match="4 channels"):
        translator.translate(np.zeros((8, 8, 4), np.uint8))
    with pytest.raises(UserError, match="translates in one pass"):  # steps are a bridge's (--model sb)
        translator.translate(rgb, steps=2)


def test_bf16_runs_on_the_cpu_close_to_fp32_and_fp16_asks_for_a_gpu(work):
    path = work / "unpaired" / "testA" / "sq.png"
    fp32 = Translator.load(work / "ckpt" / "c", device="cpu").translate(path).astype(int)
    bf16 = Translator.load(work / "ckpt" / "c", device="cpu", precision="bf16").translate(path).astype(int)
    assert 0 < np.abs(bf16 - fp32).mean() < 8
    with pytest.raises(UserError, match="fp16 needs a CUDA GPU"):
        Translator.load(work / "ckpt" / "c", device="cpu", precision="fp16")


def tiny_translator(input_nc: int = 3) -> Translator:
    """An untrained resnet generator (ngf 4) in eval mode: enough to see what translate accepts."""
    torch.manual_seed(0)
    return Translator.from_generator(networks.define_G(input_nc, 3, 4, "resnet_6blocks", "instance"), "resnet_6blocks",
                                     input_nc, 3, device="cpu")


@pytest.mark.parametrize("image, shape", [
    (np.zeros((0, 0, 3), np.uint8), "(0, 0, 3)"),
    (np.zeros((0, 16), np.float32), "(0, 16)"),
    (np.zeros((16, 16, 0), np.uint16), "(16, 16, 0)"),
    (np.zeros((2, 16, 0, 3), np.uint8), "(2, 16, 0, 3)"),
    (torch.zeros(3, 0, 16), "(3, 0, 16)"),
    (torch.zeros(1, 0, 16, 16), "(1, 0, 16, 16)"),
    (Image.new("RGB", (0, 0)), "0x0 PIL image"),
], ids=["array HxWxC", "array HxW", "no channels", "batch of empty images", "tensor CxHxW", "tensor no channels",
        "PIL"])
def test_translate_of_an_image_without_pixels_raises_the_documented_error_naming_its_shape(image, shape):
    with pytest.raises(UserError, match="holds no pixels") as refused:
        tiny_translator().translate(image)
    assert shape in str(refused.value)


def test_translate_of_an_empty_batch_is_an_empty_batch():
    translator = tiny_translator()
    assert translator.translate(np.zeros((0, 16, 20, 3), np.uint8)).shape == (0, 16, 20, 3)
    assert translator.translate(torch.zeros(0, 3, 16, 20)).shape == (0, 3, 16, 20)
    assert translator.translate([]) == []


def test_translate_of_float_data_holding_nan_or_infinity_names_it(tmp_path):
    translator = tiny_translator()
    pixels = np.random.default_rng(0).random((16, 16, 3), dtype=np.float32)
    pixels[2, 5, 1] = np.nan
    with pytest.raises(UserError, match=r"this array holds non-finite values: 1 NaN \(the first at row 2, column 5"):
        translator.translate(pixels)
    pixels[2, 5, 1] = np.inf
    np.save(tmp_path / "x.npy", pixels)
    with pytest.raises(UserError, match="1 infinite") as refused:
        translator.translate(tmp_path / "x.npy")
    assert f"image {tmp_path / 'x.npy'}" in str(refused.value)


def test_translate_of_a_tiff_whose_rows_tifffile_stored_as_pages_says_how_to_write_it(tmp_path):
    import tifffile

    tifffile.imwrite(tmp_path / "bands.tif", np.zeros((24, 20, 5), np.uint16))  # H x W x C, stored as 24 pages
    with pytest.raises(UserError, match="24 pages of 20x5 pixels") as refused:
        tiny_translator().translate(tmp_path / "bands.tif")
    assert 'photometric="minisblack", planarconfig="contig"' in str(refused.value)


# ---------------------------------------------------------------------------------- 16-bit, float, bands
GRAY16 = ["--model", "cycle_gan", "--ngf", "8", "--input_nc", "1", "--output_nc", "1"]
# Domain A: 6-band float32 TIFFs in [-50, 50]; domain B: 2-band .npy in [-25, 25]; trained B -> A.
BANDS = ["--model", "pix2pix", "--ngf", "8", "--netG", "resnet_6blocks", "--direction", "BtoA", "--input_nc", "2",
         "--output_nc", "6", "--data_range", "-50", "50", "-25", "25"]


@pytest.fixture(scope="module")
def deep(tmp_path_factory) -> Path:
    """Data beyond 8 bits and runs for them, each with test.py's results: `g16`, a gray CycleGAN on 16-bit
    PNGs (unaligned), and `bands`, a pix2pix trained BtoA from 2-band .npy to 6-band float TIFFs with
    per-domain --data_range (two folders paired by name)."""
    root = tmp_path_factory.mktemp("deep")
    rng = np.random.default_rng(0)
    for domain in "AB":
        (root / "g16" / f"test{domain}").mkdir(parents=True)
        write_image(str(root / "g16" / f"test{domain}" / "x.png"),
                    rng.integers(20000, 40000, (28, 36, 1)).astype(np.uint16))
    (root / "bands" / "testA").mkdir(parents=True)
    (root / "bands" / "testB").mkdir(parents=True)
    bands = (rng.random((28, 36, 6)) * 100 - 50).astype(np.float32)
    write_image(str(root / "bands" / "testA" / "0000.tif"), bands)
    np.save(root / "bands" / "testB" / "0000.npy", bands[:, :, :2] * 0.5)
    for name, flags in (("g16", GRAY16), ("bands", BANDS)):
        save_run(root / "ckpt", name, flags)
        run_test_py("--dataroot", str(root / name), "--name", name, *flags, "--eval", "--checkpoints_dir",
                    str(root / "ckpt"), "--results_dir", str(root / "results"))
    return root


def full_precision(deep: Path, name: str, file: str) -> np.ndarray:
    return read_image(str(deep / "results" / name / "test_latest" / "full_precision" / file))


def test_16bit_png_translates_at_16_bits_equal_to_test_py_full_precision_output(deep):
    image = deep / "g16" / "testA" / "x.png"
    forward = Translator.load(deep / "ckpt" / "g16", device="cpu")
    backward = Translator.load(deep / "ckpt" / "g16", direction="BtoA", device="cpu")
    fake_B = forward.translate(image)
    assert fake_B.dtype == np.uint16 and fake_B.shape == (28, 36, 1)
    assert np.array_equal(fake_B, full_precision(deep, "g16", "x_fake_B.png"))
    assert np.array_equal(backward.translate(deep / "g16" / "testB" / "x.png"),
                          full_precision(deep, "g16", "x_fake_A.png"))
    assert (fake_B % 257 != 0).mean() > 0.9 and fake_B.std() > 1000  # not 8-bit values, and they vary
    # A uint16 array is the same data as its file; a 16-bit PIL image gives a 16-bit PIL image.
    assert np.array_equal(forward.translate(read_image(str(image))), fake_B)
    pil = forward.translate(Image.open(image))
    assert pil.mode == "I;16" and np.array_equal(np.asarray(pil), fake_B[:, :, 0])


def test_multiband_float_run_translates_through_its_trained_data_range_equal_to_test_py(deep):
    translator = Translator.load(deep / "ckpt" / "bands", device="cpu")  # BtoA and the ranges from the run
    source = deep / "bands" / "testB" / "0000.npy"
    fake = translator.translate(source)
    expected = full_precision(deep, "bands", "0000_fake_B.tif")  # test.py names the model's output fake_B
    assert fake.dtype == np.float32 and fake.shape == (28, 36, 6) and expected.shape == fake.shape
    assert np.array_equal(fake, expected)
    assert np.abs(fake).max() > 1  # not [0, 1]
    assert np.array_equal(translator.translate(np.load(source)), fake)  # a float array: values in that range
    # BtoA: the output scales with domain A's range; domain B's maps the input.
    def with_range(*data_range: float) -> np.ndarray:
        return Translator.load(deep / "ckpt" / "bands", device="cpu", data_range=data_range).translate(source)
    assert np.allclose(with_range(-100, 100, -25, 25), 2 * fake, rtol=1e-6, atol=1e-4)
    assert np.abs(with_range(-50, 50, -50, 50) - fake).max() > 0.1


def test_translate_command_keeps_dtype_band_count_and_format_of_each_file(deep, tmp_path, capsys):
    inputs = tmp_path / "in"
    inputs.mkdir()
    two_bands = np.load(deep / "bands" / "testB" / "0000.npy")
    np.save(inputs / "a.npy", two_bands)
    write_image(str(inputs / "b.tif"), two_bands[:20, :24])
    write_image(str(inputs / "c.png"), np.full((16, 20, 2), 30000, np.uint16))  # 16-bit gray + alpha
    status = translate_py.main([str(inputs), "--checkpoint", str(deep / "ckpt" / "bands"), "--output",
                                str(tmp_path / "out"), "--device", "cpu"])
    assert status == 0, capsys.readouterr()
    assert "translated 3 of 3 files" in capsys.readouterr().out
    translator = Translator.load(deep / "ckpt" / "bands", device="cpu")
    assert np.array_equal(np.load(tmp_path / "out" / "a.npy"), translator.translate(inputs / "a.npy"))
    b = read_image(str(tmp_path / "out" / "b.tif"))
    assert b.dtype == np.float32 and b.shape == (20, 24, 6)
    c = read_image(str(tmp_path / "out" / "c.tif"))  # a PNG cannot hold 6 bands: a TIFF instead
    assert c.dtype == np.uint16 and c.shape == (16, 20, 6)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.npy", "b.tif", "c.tif"]
    # 16 bits in, 16-bit PNG out, equal to test.py's full-precision output
    assert translate_py.main([str(deep / "g16" / "testA" / "x.png"), "--checkpoint", str(deep / "ckpt" / "g16"),
                              "--output", str(tmp_path / "out16"), "--device", "cpu"]) == 0
    with Image.open(tmp_path / "out16" / "x.png") as written:
        assert written.format == "PNG" and written.mode.startswith("I;16")
    assert np.array_equal(read_image(str(tmp_path / "out16" / "x.png")), full_precision(deep, "g16", "x_fake_B.png"))


# ---------------------------------------------------------------------------------- threads
@pytest.mark.parametrize("run, eval_mode", [("c", True), ("p", False)])
def test_four_threads_sharing_a_translator_get_what_one_thread_gets(work, run, eval_mode):
    folder = "unpaired/testA" if run == "c" else "unpaired/testB"
    translator = Translator.load(work / "ckpt" / run, device="cpu", eval_mode=eval_mode)
    images = [np.asarray(Image.open(p)) for p in sorted((work / folder).glob("*.png"))] * 2
    alone = [translator.translate(image) for image in images]
    shared: dict[tuple[int, int], np.ndarray] = {}

    def worker(thread: int) -> None:
        for i in np.random.default_rng(thread).permutation(len(images)):
            shared[thread, int(i)] = translator.translate(images[i])

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(shared) == 4 * len(images)
    for (_, i), output in shared.items():
        assert np.array_equal(output, alone[i])


# ---------------------------------------------------------------------------------- the command
def test_translate_command_translates_a_folder_keeping_names_and_formats_and_reports_what_it_skipped(work, tmp_path):
    inputs = tmp_path / "in"
    (inputs / "sub").mkdir(parents=True)
    Image.open(work / "unpaired" / "testA" / "wide.png").save(inputs / "photo.jpg", quality=95)
    Image.open(work / "unpaired" / "testA" / "sq.png").save(inputs / "sub" / "sq.png")
    (inputs / "broken.png").write_bytes((work / "unpaired" / "testA" / "sq.png").read_bytes()[:120])
    (inputs / "notes.txt").write_text("not a picture")
    result = run_script("scripts/translate.py", str(inputs), "--checkpoint", str(work / "ckpt" / "c"),
                        "--output", str(tmp_path / "out"), "--device", "cpu")
    assert result.returncode == 0, result.stderr[-3000:]
    with Image.open(tmp_path / "out" / "photo.jpg") as photo:
        assert photo.format == "JPEG" and photo.size == (44, 28)
    translator = Translator.load(work / "ckpt" / "c", device="cpu")
    assert np.array_equal(png(tmp_path / "out" / "sub" / "sq.png"), translator.translate(inputs / "sub" / "sq.png"))
    assert sorted(p.name for p in (tmp_path / "out").rglob("*")) == ["photo.jpg", "sq.png", "sub"]
    assert "translated 2 of 4 files" in result.stdout
    assert re.search(r"broken\.png: cannot read image .*damaged", result.stdout)
    assert re.search(r"notes\.txt: not an image file \(\.txt\)", result.stdout)


def test_translate_command_exits_2_naming_a_folder_with_nothing_translatable(work, tmp_path, capsys):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "readme.txt").write_text("hello")
    status = translate_py.main([str(tmp_path / "docs"), "--checkpoint", str(work / "ckpt" / "c"),
                                "--output", str(tmp_path / "out"), "--device", "cpu"])
    err = capsys.readouterr().err
    assert status == 2
    assert f"nothing could be translated from {tmp_path / 'docs'}" in err and "readme.txt" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_translate_command_refuses_a_tile_its_generator_cannot_take_once_before_translating(work, tmp_path, capsys):
    (tmp_path / "in").mkdir()
    for name in ("wide.png", "sq.png"):
        Image.open(work / "unpaired" / "testA" / name).save(tmp_path / "in" / name)
    status = translate_py.main([str(tmp_path / "in"), "--checkpoint", str(work / "ckpt" / "c"), "--output",
                                str(tmp_path / "out"), "--device", "cpu", "--tile", "34"])
    err = capsys.readouterr().err
    assert status == 2 and err.count("--tile 34 does not suit") == 1 and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flags, named", [
    (["--output", "{file}/out"], ("--output", "{file} is a file")),
    (["--output", "{file}"], ("--output", "{file} is a file")),
    (["--output", "{tmp}/out", "--tile", "-8"], ("--tile", ">= 0", "'-8'")),
    (["--output", "{tmp}/out", "--ngf", "0"], ("--ngf", ">= 1")),
    (["--output", "{tmp}/out", "--data_range", "0", "inf"], ("--data_range", "'inf'")),
    (["--output", "{tmp}/out", "--scratch", "{file}"], ("--scratch", "{file} is not a folder")),
], ids=["output under a file", "output is a file", "negative tile", "ngf 0", "infinite data range", "scratch a file"])
def test_translate_command_refuses_its_flags_and_output_before_loading_anything(tmp_path, capsys, flags, named):
    (tmp_path / "notes.txt").write_text("a file where a folder is expected")
    fill = {"file": str(tmp_path / "notes.txt"), "tmp": str(tmp_path)}
    with pytest.raises(SystemExit) as stopped:  # the checkpoint does not exist: nothing was loaded
        translate_py.main(["in.png", "--checkpoint", str(tmp_path / "no_such_run"),
                           *(flag.format(**fill) for flag in flags)])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and len(err.strip().splitlines()) == 1 and err.startswith("error: argument ")
    for text in named:
        assert text.format(**fill) in err, err
    assert "no_such_run" not in err and not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------- HTTP example
def serve_example() -> str:
    """The example server's code, exactly as docs/inference.md shows it."""
    text = (ROOT / "docs" / "inference.md").read_text()
    return re.search(r"<!-- serve-example -->\n```python\n(.*?)```", text, re.S).group(1)


@pytest.mark.slow
def test_http_example_of_the_docs_serves_translations_on_127_0_0_1(work, tmp_path):
    (tmp_path / "serve.py").write_text(serve_example())
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    server = subprocess.Popen([sys.executable, str(tmp_path / "serve.py"), str(work / "ckpt" / "c"), "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        started = re.search(r"http://127\.0\.0\.1:\d+", server.stdout.readline())
        assert started, f"the server did not start: {server.stderr.read() if server.poll() is not None else ''}"
        url = started.group(0)
        picture = (work / "unpaired" / "testA" / "wide.png").read_bytes()
        with urllib.request.urlopen(urllib.request.Request(url, data=picture), timeout=60) as response:
            assert response.headers["Content-Type"] == "image/png"
            served = np.asarray(Image.open(io.BytesIO(response.read())))
        expected = Translator.load(work / "ckpt" / "c", device="cpu").translate(Image.open(io.BytesIO(picture)))
        assert np.array_equal(served, np.asarray(expected))
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(url, data=b"no picture"), timeout=60)
        assert refused.value.code == 400
    finally:
        server.terminate()
        server.wait(timeout=30)
