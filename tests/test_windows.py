"""Inputs translated in blended windows (models/inference/windows.py): one routine for pictures' tiles and volumes'
sliding windows, in any number of dimensions. What a user relies on is that windows change nothing a
whole pass would give where they can, and leave no seams where they cannot."""
from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn

import models.inference.application
from models import networks
from models.inference.application import InferenceGenerator
from models.inference.windows import Windows, in_windows

pytest.importorskip("monai")


def volume_windows(net: nn.Module, window: tuple[int, ...], overlap: float = 0.5, batch: int = 4):
    """`net` over whole volumes in blended windows, as test.py applies a volume generator."""
    return lambda volume: in_windows(net, volume, Windows.for_volumes(window, overlap, batch))


def pointwise_network() -> nn.Module:
    """A translation-equivariant network whose output voxel depends on its input voxel alone (size rule:
    any size, multiple 1): windows can and must give exactly what one pass gives."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv3d(2, 8, 1), nn.Tanh(), nn.Conv3d(8, 1, 1)).double().eval()


@pytest.mark.parametrize("overlap", [0.0, 0.25, 0.5, 0.75])
def test_windows_over_a_volume_of_any_size_equal_one_pass_for_a_pointwise_network(overlap):
    net = pointwise_network()
    volume = torch.randn(2, 2, 21, 13, 10, dtype=torch.float64)  # not a multiple of the window on any axis
    with torch.no_grad():
        whole = net(volume)
        windowed = volume_windows(net, (8, 8, 8), overlap, batch=3)(volume)
    assert windowed.shape == whole.shape
    assert torch.allclose(windowed, whole, rtol=0, atol=1e-12)


def test_a_volume_smaller_than_the_window_is_translated_in_one_pass():
    net = pointwise_network()
    volume = torch.randn(1, 2, 6, 5, 7, dtype=torch.float64)
    with torch.no_grad():
        assert torch.allclose(volume_windows(net, (8, 8, 8))(volume), net(volume), rtol=0, atol=1e-12)


def kinks(output: torch.Tensor) -> float:
    """The largest second difference of `output` along any axis, away from the volume's own borders: 0
    for the whole-pass output of a linear filter on a linear ramp; a seam where windows meet shows as a kink."""
    inner = output[..., 2:-2, 2:-2, 2:-2]
    largest = 0.0
    for dim in (2, 3, 4):
        n = inner.shape[dim]
        curvature = inner.narrow(dim, 2, n - 2) - 2 * inner.narrow(dim, 1, n - 2) + inner.narrow(dim, 0, n - 2)
        largest = max(largest, float(curvature.abs().max()))
    return largest


def test_windows_leave_no_seams_where_they_meet_on_a_smooth_volume():
    """A network that sees zero padding at every window's border (a 5x5x5 mean filter: its output at a
    window's edge is darker than a whole pass gives) on a linear ramp: windows put side by side show
    kinks and errors where they meet; the Gaussian blend keeps the whole pass's output, up to the
    contributions of window borders it weights almost to nothing, also at the volume's edges and corners
    where no window is centred."""
    net = nn.Conv3d(1, 1, 5, padding=2, bias=False).double()
    nn.init.constant_(net.weight, 1 / 125)
    axis = torch.linspace(-1, 1, 32, dtype=torch.float64)
    volume = (0.6 * axis[:, None, None] + 0.3 * axis[None, :, None] - 0.2 * axis[None, None, :] + 0.5)
    volume = volume.expand(1, 1, 32, 32, 32).contiguous()
    with torch.no_grad():
        whole = net(volume)
        blended = volume_windows(net, (16, 16, 16))(volume)
        side_by_side = torch.zeros_like(volume)  # windows of 16 without overlap or blending
        for start in itertools.product((0, 16), repeat=3):
            box = (..., *(slice(s, s + 16) for s in start))
            side_by_side[box] = net(volume[box])
    interior = (..., slice(2, -2), slice(2, -2), slice(2, -2))  # where the whole pass saw no padding
    assert kinks(whole) < 1e-12
    assert kinks(side_by_side) > 0.2 and (side_by_side - whole)[interior].abs().max() > 0.5  # seams
    assert kinks(blended) < 0.01 and (blended - whole)[interior].abs().max() < 0.01


@pytest.mark.parametrize("tile, overlap", [(8, 0), (12, 4), (16, 8)])
def test_tiles_over_a_picture_equal_one_pass_for_a_pointwise_network(tile, overlap):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(2, 8, 1), nn.Tanh(), nn.Conv2d(8, 1, 1)).double().eval()
    picture = torch.randn(2, 2, 36, 28, dtype=torch.float64)  # several tiles on both axes
    with torch.no_grad():
        assert torch.allclose(in_windows(net, picture, Windows.for_tiles(tile, overlap)), net(picture), rtol=0,
                              atol=1e-12)


def test_pictures_tiles_and_volumes_windows_go_through_the_one_routine(monkeypatch):
    """test.py, validation and the Translator apply generators through InferenceGenerator, which cuts both
    large pictures and volumes with `in_windows`: one implementation, whatever the dimensions."""
    seen = []

    def recording(predictor, x, windows, *codes):
        seen.append((x.ndim - 2, windows.blend))
        return in_windows(predictor, x, windows, *codes)

    monkeypatch.setattr(models.inference.application, "in_windows", recording)
    picture_net = networks.define_G(3, 3, 4, "resnet_6blocks", "instance").eval()
    volume_net = networks.define_G(1, 1, 4, "resnet_6blocks_3d", "instance").eval()
    with torch.no_grad():
        InferenceGenerator(picture_net, networks.size_rule("resnet_6blocks"), Windows.for_tiles(32, 8))(
            torch.rand(1, 3, 40, 72))
        InferenceGenerator(volume_net, networks.size_rule("resnet_6blocks_3d"), Windows.for_volumes((8, 8, 8), 0.5, 2))(
            torch.rand(1, 1, 12, 8, 10))
    assert seen == [(2, "ramp"), (3, "gaussian")]


@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16])
def test_half_precision_outputs_are_blended_in_the_inputs_precision_up_to_the_borders(half):
    """Under fp16/bf16 autocast the generator's output is half precision; the windows' weights fall to
    1e-12 at a tile's border, which fp16 rounds to 0: blended in the output's precision the image's
    borders would come out as 0 (mid-gray)."""
    picture = torch.rand(1, 3, 60, 100) * 2 - 1
    doubled = in_windows(lambda window: (2 * window).to(half), picture, Windows.for_tiles(32, 8))
    assert doubled.dtype == picture.dtype
    assert torch.allclose(doubled, 2 * picture, rtol=2 ** -7, atol=2 ** -7)  # half's own rounding only


@pytest.mark.parametrize("batch", [1, 4])
def test_an_identity_network_leaves_the_input_it_reads_as_it_was(batch):
    """MONAI weights each window's output in place; an output that is the input window itself, or a view
    of MONAI's padded copy of a volume smaller than the window, must not be rewritten under the windows
    still to come."""
    volume = torch.rand(1, 1, 8, 40, 40, dtype=torch.float64)
    kept = volume.clone()
    out = in_windows(lambda window: window, volume, Windows.for_volumes((16, 16, 16), 0.5, batch))
    assert torch.equal(volume, kept)
    assert torch.allclose(out, volume, rtol=0, atol=1e-12)
