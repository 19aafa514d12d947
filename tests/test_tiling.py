"""Images of any size at test time (models/inference/application.py, models/inference/windows.py): padding to the
generator's multiple and back, tiled translation (the windowing routine volumes use too) that equals whole-image
translation for batch-norm (eval) and no-norm resnets, no visible seams for instance norm, and
test.py's --preprocess none / --tile on real files."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from conftest import ROOT
from helpers import run_test_py, smooth_image
from models import networks
from models.inference.application import InferenceGenerator, reflect_pad, split_padding
from models.inference.windows import WEIGHT_FLOOR, Windows, check_tiling, in_windows, ramp_weights, receptive_radius
from util.errors import UserError

# The tolerance docs/evaluation.md states for tiles vs. whole image (float32 rounding).
EXACT_TOL = 1e-5


def small_resnet(norm: str, n_blocks: int = 1, ngf: int = 4, seed: int = 1) -> torch.nn.Module:
    """A resnet generator whose output varies: kaiming init keeps the signal's scale through the
    layers (the default normal(0, 0.02) init gives a nearly constant image)."""
    torch.manual_seed(seed)
    net = networks.ResnetGenerator(3, 3, ngf, networks.get_norm_layer(norm), n_blocks=n_blocks)
    networks.init_weights(net, "kaiming")
    if norm == "batch":  # running statistics that are not the identity, as after training
        for m in net.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    return net.eval()


def resnet_radius(n_blocks: int) -> int:
    return 12 + 8 * n_blocks  # receptive_radius's formula, for block counts without a --netG name


# ---------------------------------------------------------------------------- building blocks
@pytest.mark.parametrize("size, multiple, minimum, expected", [
    (37, 4, 8, (1, 2)), (40, 4, 8, (0, 0)), (5, 4, 8, (1, 2)), (100, 256, 256, (78, 78)), (257, 256, 256, (127, 128))])
def test_split_padding_reaches_the_next_allowed_size_split_evenly(size, multiple, minimum, expected):
    assert split_padding(size, multiple, minimum) == expected


def test_reflect_pad_handles_padding_larger_than_the_image_and_keeps_it_centred():
    x = torch.arange(5.0).view(1, 1, 1, 5).expand(1, 1, 3, 5).contiguous()
    padded = reflect_pad(x, 100, 100, 120, 131)
    assert padded.shape[-2:] == (203, 256)
    assert torch.equal(padded[..., 100:103, 120:125], x)
    assert torch.equal(padded[0, 0, 100, 119:126], torch.tensor([1.0, 0, 1, 2, 3, 4, 3]))  # mirrored, not repeated


def window_starts(height: int, width: int, windows: Windows) -> tuple[list[int], list[int]]:
    """The rows and columns at which the windows `in_windows` visits on a height x width image start
    (read from an image whose two channels are each pixel's row and column)."""
    rows, cols = torch.meshgrid(torch.arange(height, dtype=torch.float64), torch.arange(width, dtype=torch.float64),
                                indexing="ij")
    seen = set()

    def record(window: torch.Tensor) -> torch.Tensor:
        seen.update((int(w[0, 0, 0]), int(w[1, 0, 0])) for w in window)
        return window

    in_windows(record, torch.stack([rows, cols])[None], windows)
    return sorted({top for top, _ in seen}), sorted({left for _, left in seen})


@pytest.mark.parametrize("length, tile, overlap", [(1024, 512, 64), (768, 512, 64), (2000, 512, 128), (516, 512, 64),
                                                   (512, 512, 64), (1000, 256, 30)])
def test_tiles_cover_the_image_evenly_on_the_4_pixel_grid_with_at_least_the_overlap(length, tile, overlap):
    starts, _ = window_starts(length, 32, Windows.for_tiles(tile, overlap))
    overlap = -(-overlap // 4) * 4  # on the grid
    assert starts[0] == 0 and starts[-1] + tile == length
    assert all(s % 4 == 0 for s in starts)
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    assert all(gap <= tile - overlap for gap in gaps)
    assert len(starts) == (-(-(length - tile) // (tile - overlap)) + 1 if length > tile else 1)  # the fewest tiles
    assert all(gap == gaps[0] for gap in gaps[:-1]) and all(gaps[0] - gap < 4 * len(gaps) for gap in gaps)  # evenly


def test_tile_weights_of_neighbours_add_up_to_one_across_the_overlap():
    overlap = 64
    weights = ramp_weights((512,), overlap, torch.float64, torch.device("cpu"))
    left, right = weights[-overlap:], weights[:overlap]  # a tile's end over its right neighbour's start
    middle = slice(overlap // 4, overlap - overlap // 4)
    assert torch.allclose(left[middle] + right[middle], torch.ones(overlap // 2, dtype=torch.float64))
    assert left[-overlap // 4:].le(WEIGHT_FLOOR).all() and right[:overlap // 4].le(WEIGHT_FLOOR).all()  # unused
    assert weights[overlap:-overlap].eq(1).all()


def test_receptive_radius_matches_a_gradient_probe():
    netG = "resnet_6blocks"
    net = networks.define_G(3, 3, 2, netG, "none", init_type="normal", init_gain=1.0).double()
    x = torch.randn(1, 3, 192, 192, dtype=torch.float64, requires_grad=True)
    y = net.model[:-1](x)  # before tanh, which saturates
    reach = 0
    for phase in range(4):  # output positions at every offset of the 4-pixel grid
        c = 96 + phase
        (grad,) = torch.autograd.grad(y[0, 0, c, c], x, retain_graph=True)
        rows = grad[0].abs().sum(0).sum(1).nonzero().flatten()
        reach = max(reach, (rows - c).abs().max().item())
    assert reach == receptive_radius(netG)


# ---------------------------------------------------------------------------- any size
@pytest.mark.parametrize("netG, size", [("resnet_6blocks", (37, 53)), ("resnet_6blocks", (5, 7)),
                                        ("unet_128", (100, 211))])
def test_any_size_returns_the_input_size_and_equals_the_padded_translation(netG, size):
    net = networks.define_G(3, 3, 4, netG, "batch", init_gain=0.5).eval()
    x = torch.rand(1, 3, *size) * 2 - 1
    adapter = InferenceGenerator(net, networks.size_rule(netG))
    with torch.no_grad():
        y = adapter(x)
        multiple, minimum = networks.size_rule(netG).multiple, networks.size_rule(netG).minimum
        top, bottom = split_padding(size[0], multiple, minimum)
        left, right = split_padding(size[1], multiple, minimum)
        expected = net(reflect_pad(x, top, bottom, left, right))[..., top:top + size[0], left:left + size[1]]
    assert y.shape == x.shape
    assert torch.equal(y, expected)


# ---------------------------------------------------------------------------- tiles vs whole image
@pytest.mark.parametrize("norm", ["none", "batch"])
def test_tiled_1024x768_equals_whole_image_when_a_quarter_overlap_covers_the_receptive_field(norm):
    net = small_resnet(norm, n_blocks=1)
    overlap = 4 * resnet_radius(1)
    image = smooth_image()
    with torch.no_grad():
        whole = net(image)
        tiled = InferenceGenerator(net, networks.size_rule("resnet_6blocks"), Windows.for_tiles(512, overlap))(image)
    assert whole.std() > 0.1  # a real signal, not a constant
    assert (tiled - whole).abs().max().item() <= EXACT_TOL


def border_jumps(image: torch.Tensor, starts: list[int], tile: int) -> tuple[float, float]:
    """Largest jump between neighbouring 8x8-averaged columns inside the tiles' overlaps, and
    elsewhere. Averaging removes the random network's pixel-scale texture; a seam is a step in the
    averaged image that the content around it does not have."""
    pooled = F.avg_pool2d(image, 8)
    jumps = pooled.diff(dim=3).abs().amax(dim=(0, 1, 2))
    in_overlap = torch.zeros_like(jumps, dtype=torch.bool)
    for previous, start in zip(starts, starts[1:]):
        in_overlap[start // 8 - 1:(previous + tile) // 8] = True
    return jumps[in_overlap].max().item(), jumps[~in_overlap].max().item()


def test_instance_norm_tiles_show_no_seam_where_hard_tiles_do():
    net = small_resnet("instance", n_blocks=1, seed=1)
    networks.init_weights(net, "normal", 0.02)
    image = smooth_image()
    rule = networks.size_rule("resnet_6blocks")
    with torch.no_grad():
        blended = InferenceGenerator(net, rule, Windows.for_tiles(512, 64))(image)
        hard = InferenceGenerator(net, rule, Windows.for_tiles(512, 0))(image)
    seam, elsewhere = border_jumps(blended, window_starts(768, 1024, Windows.for_tiles(512, 64))[1], 512)
    assert seam <= elsewhere, (seam, elsewhere)  # the overlaps are as smooth as the rest
    hard_seam, hard_elsewhere = border_jumps(hard, window_starts(768, 1024, Windows.for_tiles(512, 0))[1], 512)
    assert hard_seam > 1.2 * hard_elsewhere, (hard_seam, hard_elsewhere)  # the measure does see seams


def test_check_tiling_refuses_sizes_the_generator_cannot_take():
    check_tiling("resnet_9blocks", 512, 64)
    check_tiling("unet_256", 512, 64)
    for netG, tile, overlap, flag in [("resnet_9blocks", 510, 64, "--tile 510"), ("unet_256", 384, 64, "--tile 384"),
                                      ("resnet_9blocks", 512, 300, "--tile_overlap 300"),
                                      ("resnet_6blocks", -1, 0, "--tile -1")]:
        with pytest.raises(UserError, match=flag):
            check_tiling(netG, tile, overlap)


# ---------------------------------------------------------------------------- test.py
def png_size(path) -> tuple[int, int]:
    with Image.open(path) as img:
        return img.size


@pytest.mark.slow
def test_test_py_keeps_image_sizes_with_preprocess_none_and_tiles_large_images(resnet_checkpoint, tmp_path):
    images = tmp_path / "in"
    images.mkdir()
    rng = np.random.default_rng(0)
    sizes = {"wide": (53, 37), "tall": (30, 50), "big": (230, 150)}  # (width, height)
    for name in ("wide", "tall"):
        w, h = sizes[name]
        Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(images / f"{name}.png")
    picture = ((smooth_image(150, 230)[0].permute(1, 2, 0).numpy() + 1) * 127.5).round().astype(np.uint8)
    Image.fromarray(picture).save(images / "big.png")
    result = run_test_py(images, resnet_checkpoint, tmp_path / "out", "--preprocess", "none", "--tile", "64",
                         "--tile_overlap", "32")
    assert result.returncode == 0, result.stderr[-3000:]
    out = tmp_path / "out" / "r" / "test_latest" / "images"
    for name, size in sizes.items():  # nothing resized: the outputs have the inputs' sizes
        assert png_size(out / f"{name}_fake.png") == size
        assert png_size(out / f"{name}_real.png") == size
    # The big image went through 64-pixel tiles; the whole-image translation differs only a little
    # (overlap 32 is far below 4 x the receptive radius 60, so tiles are close, not exact).
    net = networks.define_G(3, 3, 8, "resnet_6blocks", "batch")
    net.load_state_dict(torch.load(resnet_checkpoint / "r" / "latest_net_G.pth", weights_only=True))
    with torch.no_grad():
        x = torch.from_numpy(picture).permute(2, 0, 1)[None].float() / 127.5 - 1
        whole = InferenceGenerator(net.eval(), networks.size_rule("resnet_6blocks"))(x)[0].permute(1, 2, 0).numpy()
    tiled = np.asarray(Image.open(out / "big_fake.png"), dtype=float) / 127.5 - 1
    assert np.abs(tiled - whole).mean() < 0.05


@pytest.mark.filterwarnings("ignore:Unable to enable fault handler")
def test_test_py_refuses_a_tile_size_the_generator_cannot_take(resnet_checkpoint, tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("test_py_script", ROOT / "test.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    (tmp_path / "data").mkdir()
    Image.new("RGB", (32, 32)).save(tmp_path / "data" / "a.png")
    status = script.main(["--dataroot", str(tmp_path / "data"), "--name", "r", "--model", "test",
                          "--netG", "resnet_6blocks", "--checkpoints_dir", str(resnet_checkpoint),
                          "--results_dir", str(tmp_path / "out"), "--device", "cpu", "--tile", "50"])
    assert status == 2
    assert "--tile 50" in capsys.readouterr().err
