"""A network is built once and stays itself (issue 44): the options of the run decide its layers when
it is built (reflection pads from slices for --deterministic, blocks that recompute their activations
for --checkpoint_activations, CUT's antialiased discriminator and feature-reading generator), its
layers choose their kernels themselves (--channels_last, --compile), and nothing changes the class of
any of its modules afterwards. The networks built for a training run still script for export."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from conftest import training_engine
from helpers import batches
from models import create_model, cut_model, networks
from models.networks.blur import Downsample
from options.train_options import TrainOptions
from util.distributed import DistContext
from util.errors import UserError
from util.seeding import seed_everything

RUN_FLAGS = ["--channels_last", "--deterministic", "--checkpoint_activations"]


def module_classes(net: nn.Module) -> list[tuple[str, type]]:
    return [(name, type(module)) for name, module in net.named_modules()]


def built_model(model_name: str, *flags: str):
    opt = TrainOptions().parse(["--dataroot", "unused", "--model", model_name, "--ngf", "8", "--ndf", "8",
                                "--pool_size", "0", "--netG", "resnet_6blocks", *flags])
    seed_everything(0)
    return opt, create_model(opt, DistContext())


@pytest.mark.parametrize("model_name,flags", [
    ("cycle_gan", RUN_FLAGS),
    ("cut", RUN_FLAGS),
    ("pix2pix", [*RUN_FLAGS, "--netG", "unet_128", "--netD", "multiscale", "--num_D", "2", "--n_layers_D", "2"]),
    # (--compile: tests/test_fast_path.py's compiled training checks the same of the networks it compiles)
])
def test_a_training_step_changes_the_class_of_no_module(model_name, flags):
    opt, m = built_model(model_name, *flags)
    built = dict(m.named_networks())
    before = {name: module_classes(net) for name, net in built.items()}
    batch = batches(1, 128 if "unet_128" in flags else 32)[0]
    m.setup(opt, first_batch=batch)
    training_engine(m).train_step([batch])
    for name, net in built.items():
        assert getattr(m, "net" + name) is net, name  # the model still holds what it built
        after = dict(module_classes(net))  # (CUT's netF adds its MLPs at the first batch, by design)
        assert all(after[module] is cls for module, cls in before[name]), name
    layers = [module for net in built.values() for module in net.modules()]
    assert all(pad.sliced for pad in layers if isinstance(pad, nn.ReflectionPad2d))  # --deterministic
    assert any(getattr(block, "recompute", False) for block in layers) == ("--checkpoint_activations" in flags)
    assert all(type(norm) is networks.ChannelsLastSafeInstanceNorm2d for norm in layers
               if isinstance(norm, nn.InstanceNorm2d))


def test_cut_builds_its_antialiased_discriminator_and_a_generator_that_gives_its_features():
    opt, m = built_model("cut")
    assert type(m.netG) is networks.ResnetGenerator and type(m.netD) is networks.NLayerDiscriminator
    assert sum(isinstance(layer, Downsample) for layer in m.netD.model) == 3
    assert all(conv.stride == (1, 1) for conv in m.netD.model if isinstance(conv, nn.Conv2d))
    x = torch.randn(1, 3, 32, 32)
    feats = m.netG(x, (0, 4, 8), encode_only=True)
    assert [feat.shape[1] for feat in feats] == [3, 16, 32]  # the padded input, then the two widening convs
    assert torch.equal(m.netG.model[:9](x), feats[-1])
    _, plain = built_model("cut", "--no_antialias")
    assert not any(isinstance(layer, Downsample) for layer in plain.netD.modules())


def test_a_generator_family_declares_whether_it_gives_features_and_cut_refuses_one_that_does_not():
    flags = SimpleNamespace(no_antialias=False, no_antialias_up=False, isTrain=True, netG="unet_128", ngf=4)
    assert networks.family_of("resnet_9blocks").feature_layers(flags) == 32  # with CUT's blur layers (28 without)
    assert networks.family_of("unet_256").feature_layers(flags) == 0
    with pytest.raises(UserError, match="--netG resnet_9blocks or resnet_6blocks"):
        cut_model.check_generator(flags, (0, 4))


def run_flags(**changes) -> SimpleNamespace:
    return SimpleNamespace(**{"ngf": 2, "norm": "instance", "no_dropout": False, "upsample": "transpose",
                              "init_type": "normal", "init_gain": 0.02, "deterministic": True,
                              "checkpoint_activations": True, **changes})


@pytest.mark.parametrize("netG,side", [("resnet_6blocks", 32), ("unet_128", 128), ("resnet_6blocks_3d", 8)])
def test_a_generator_built_for_a_training_run_scripts_and_translates_as_it_does_eagerly(netG, side):
    net = networks.build_generator(run_flags(netG=netG), 1, 1).eval()
    x = torch.randn(1, 1, *(side,) * networks.size_rule(netG).dims)
    scripted = torch.jit.script(net)
    with torch.no_grad():
        assert torch.allclose(scripted(x), net(x), rtol=0, atol=1e-6)
