"""Exact translation of large inputs (models/inference/exact/, docs/inference.md): a picture or volume too large
for its whole forward within the memory budget is translated layer by layer in tiles, and the output equals the
generator applied to the whole input at once, to float rounding, for every generator family and normalisation.

Every case here runs with a budget small enough that its maps are cut into many tiles and kept in scratch files,
so a normalisation computed on a tile's own statistics (what cross-faded tiles do) would fail it."""
from __future__ import annotations

import copy
import functools
import subprocess

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from conftest import run_script
from helpers import smooth_image
from models import networks
from models.inference.application import InferenceGenerator, reflect_pad, split_padding
from models.inference.exact import ExactBudget, translate_exactly
from models.losses import bridge
from models.networks.layers import get_norm_layer, init_weights
from models.networks.resnet import ResnetGenerator
from models.networks.resnet_cond import TimeConditionedResnetGenerator
from models.networks.unet_latent import LatentUnetGenerator
from util.errors import UserError

TOLERANCE = 1e-5  # max abs in [-1, 1] units, where the network's own rounding is below it (normalised networks)
SMALL = ExactBudget(memory=3 << 20)  # 3 MiB: every case below is cut into tens of tiles


def varied(net: nn.Module, seed: int = 0) -> nn.Module:
    """`net` with kaiming weights and, for batch norm, running statistics that are not the identity: outputs that
    vary across the image (the default init gives a nearly constant one)."""
    torch.manual_seed(seed)
    init_weights(net, "kaiming")
    for module in net.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
    return net


def exact_and_whole(net: nn.Module, *inputs: torch.Tensor, budget: ExactBudget = SMALL,
                    seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(exact output, whole-input output, tiles computed), both from the same weights and running statistics
    and the same random seed."""
    state = {key: value.clone() for key, value in net.state_dict().items()}
    tiles = []
    with torch.no_grad():
        torch.manual_seed(seed)
        exact = translate_exactly(net, *inputs, budget=budget, progress=lambda done, total: tiles.append(total))
        after_exact = {key: value.clone() for key, value in net.state_dict().items()}
        net.load_state_dict(state)
        torch.manual_seed(seed)
        whole = net(*inputs)
    for key, value in net.state_dict().items():  # batch norm in training mode: the same running statistics
        assert torch.allclose(after_exact[key].double(), value.double(), rtol=1e-5, atol=1e-6), key
    return exact, whole, tiles[-1] if tiles else 0


def assert_as_exact_as_the_whole_forward(exact: torch.Tensor, whole: torch.Tensor, net: nn.Module,
                                         *inputs: torch.Tensor) -> None:
    """`exact` equals the whole forward `whole` within float32's rounding: within 1e-5 where the whole forward's
    own error is below it, and never more than twice as far from the float64 forward as the whole one is (a
    network without normalisation grows its maps, and with them the rounding of every sum, whatever the order)."""
    precise = copy.deepcopy(net).double()
    with torch.no_grad():
        reference = precise(*(x.double() if x.is_floating_point() else x for x in inputs))
    own_error = (whole.double() - reference).abs().max().item()
    assert (exact.double() - reference).abs().max().item() <= max(2 * own_error, TOLERANCE / 2)
    if own_error < TOLERANCE / 4:
        assert (exact - whole).abs().max() < TOLERANCE


@pytest.mark.parametrize("netG", ["resnet_6blocks", "unet_128"])
@pytest.mark.parametrize("norm, training", [("instance", False), ("batch", False), ("batch", True), ("none", False)])
def test_the_exact_output_equals_the_whole_pictures_for_every_norm(netG, norm, training):
    # An odd, non-square picture, padded to the generator's multiple as test.py pads it; tiles that divide nothing.
    net = varied(networks.define_G(3, 3, 8, netG, norm=norm)).train(training)
    rule = networks.size_rule(netG)
    picture = smooth_image(203, 301) + 0.1 * torch.randn(1, 3, 203, 301, generator=torch.Generator().manual_seed(1))
    top, bottom = split_padding(203, rule.multiple, rule.minimum)
    left, right = split_padding(301, rule.multiple, rule.minimum)
    padded = reflect_pad(picture, top, bottom, left, right)
    state = {key: value.clone() for key, value in net.state_dict().items()}
    exact, whole, tiles = exact_and_whole(net, padded)
    assert tiles > 20
    net.load_state_dict(state)
    assert_as_exact_as_the_whole_forward(exact, whole, net, padded)
    with torch.no_grad():  # and through the view test.py and the Translator use: the picture's own size back
        exact_view = InferenceGenerator(net, rule, exact=SMALL)(picture)
        net.load_state_dict(state)
    assert exact_view.shape == picture.shape
    assert torch.equal(exact_view, exact[..., top:top + 203, left:left + 301])


@pytest.mark.parametrize("family", ["cut", "bicycle_gan", "time_conditioned", "unet_with_dropout"])
def test_every_generator_family_translates_exactly(family):
    instance = functools.partial(nn.InstanceNorm2d, affine=False)
    picture = smooth_image(180, 244)
    if family == "cut":  # CUT's blur-subsampling and blur-upsampling
        net, inputs = ResnetGenerator(3, 3, 8, instance, n_blocks=2, antialias=True, antialias_up=True), (picture,)
    elif family == "bicycle_gan":  # the code joins every level of the U-Net
        net = LatentUnetGenerator(3, 3, 8, 7, 8, norm_layer=instance, where_add="all")
        inputs = (smooth_image(256, 384), torch.randn(1, 8))
    elif family == "time_conditioned":  # UNSB's: a time index and a noise code
        net = TimeConditionedResnetGenerator(3, 3, 8, norm_layer=instance, n_blocks=2)
        inputs = (picture, torch.tensor([2]), torch.randn(1, 32))
    else:  # pix2pix's default at test time without --eval: dropout draws masks, in the whole forward's order
        net = networks.define_G(3, 3, 8, "unet_256", norm="batch", use_dropout=True).train()
        inputs = (smooth_image(512, 256),)
    exact, whole, tiles = exact_and_whole(varied(net), *inputs, budget=ExactBudget(memory=4 << 20), seed=3)
    assert tiles > 20
    if family == "unet_with_dropout":  # float64 would draw other masks: the float32 forward is the reference
        assert (exact - whole).abs().max() < TOLERANCE
    else:
        assert_as_exact_as_the_whole_forward(exact, whole, net.eval(), *inputs)


def test_unsb_steps_walked_with_a_seed_translate_exactly():
    net = varied(TimeConditionedResnetGenerator(3, 3, 8, norm_layer=get_norm_layer("instance"), n_blocks=2)).eval()
    rule = networks.size_rule("resnet_9blocks_cond")
    picture = smooth_image(150, 230)
    with torch.no_grad():
        exact, whole = (bridge.walk_each(InferenceGenerator(net, rule, exact=budget), picture, 3, 0.01, 32, [7])[-1]
                        for budget in (SMALL, None))
        reference = bridge.walk_each(InferenceGenerator(copy.deepcopy(net).double(), rule), picture.double(), 3,
                                     0.01, 32, [7])[-1]
    own_error = (whole.double() - reference).abs().max().item()
    assert (exact.double() - reference).abs().max().item() <= max(2 * own_error, TOLERANCE / 2)


def test_a_volume_translates_exactly_with_instance_norm_over_the_whole_volume():
    net = varied(networks.define_G(1, 1, 8, "resnet_6blocks_3d", norm="instance")).eval()
    volume = torch.randn(1, 1, 38, 45, 41, generator=torch.Generator().manual_seed(2))
    exact, whole, tiles = exact_and_whole(net, volume, budget=ExactBudget(memory=6 << 20))
    assert tiles > 20
    assert_as_exact_as_the_whole_forward(exact, whole, net, volume)


class GlobalContrast(nn.Module):
    """A user's layer with a global operation the executor does not know: it needs its input whole."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - x.mean(dim=(2, 3), keepdim=True)


def test_an_unknown_global_operation_runs_whole_within_the_budget_and_is_refused_beyond_it():
    net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), GlobalContrast(), nn.Conv2d(16, 3, 3, padding=1))
    picture = smooth_image(200, 260)
    exact, whole, _ = exact_and_whole(net, picture, budget=ExactBudget(memory=12 << 20))
    assert_as_exact_as_the_whole_forward(exact, whole, net, picture)
    with pytest.raises(UserError, match=r"`call_method mean`.*exceed --exact_memory"):
        translate_exactly(net, picture, budget=ExactBudget(memory=2 << 20))


def test_a_budget_too_small_for_one_tiles_halo_is_refused_naming_the_flag():
    net = networks.define_G(3, 3, 64, "resnet_6blocks", norm="instance")
    with pytest.raises(UserError, match=r"--exact_memory 64 KiB is too small .* Give at least"):
        translate_exactly(net, smooth_image(256, 256), budget=ExactBudget(memory=64 << 10))


def test_maps_beyond_the_memory_go_to_scratch_files_that_are_removed_after(tmp_path):
    net = varied(networks.define_G(3, 3, 8, "resnet_6blocks", norm="instance")).eval()
    seen = []
    budget = ExactBudget(memory=2 << 20, scratch=tmp_path)
    with torch.no_grad():
        translate_exactly(net, smooth_image(240, 320), budget=budget,
                          progress=lambda done, total: seen.append(sum(1 for _ in tmp_path.rglob("*.bin"))))
    assert max(seen) > 0 and list(tmp_path.iterdir()) == []


def test_a_scratch_folder_that_cannot_hold_the_maps_is_refused_naming_the_flag(tmp_path):
    (tmp_path / "a_file").write_text("not a folder")
    # (the flag refuses such a folder before anything is loaded: tests/test_translator.py)
    for folder in (tmp_path / "a_file", tmp_path / "missing"):
        net = networks.define_G(3, 3, 8, "resnet_6blocks", norm="instance")
        with pytest.raises(UserError, match=f"in {folder}: .* give --scratch"), torch.no_grad():
            translate_exactly(net, smooth_image(240, 320), budget=ExactBudget(memory=2 << 20, scratch=folder))


@pytest.mark.slow
def test_test_py_translates_a_large_picture_exactly_within_its_memory_flag(resnet_checkpoint, tmp_path):
    # Without --eval, as the reference's test.py: batch norm normalises by the picture's own statistics.
    (tmp_path / "in").mkdir()
    picture = ((smooth_image(300, 410)[0].permute(1, 2, 0).numpy() + 1) * 127.5).round().astype(np.uint8)
    Image.fromarray(picture).save(tmp_path / "in" / "big.png")
    outputs = []
    for memory in ("0", "2"):
        done: subprocess.CompletedProcess = run_script(
            "test.py", "--dataroot", str(tmp_path / "in"), "--name", "r", "--model", "test", "--netG",
            "resnet_6blocks", "--norm", "batch", "--ngf", "8", "--no_dropout", "--num_threads", "0",
            "--checkpoints_dir", str(resnet_checkpoint), "--results_dir", str(tmp_path / memory),
            "--preprocess", "none", "--exact_memory", memory)
        assert done.returncode == 0, done.stderr[-3000:]
        outputs.append(np.asarray(Image.open(tmp_path / memory / "r" / "test_latest" / "images" / "big_fake.png")))
    # 8-bit: a value within float rounding of a level's boundary may round either way, never further
    assert outputs[0].shape == picture.shape
    assert np.abs(outputs[0].astype(int) - outputs[1]).max() <= 1

