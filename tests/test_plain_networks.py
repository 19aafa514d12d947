"""A network is built once and stays itself: a model's attributes hold the modules its constructor
built, whatever runs them. What wraps them for a use (DDP, the compiled twin, the moving averages,
padding, tiles and sliding windows) is held by that use (the training engine, inference), so a reader
knows at every line what `model.netG` is: the plain module, with the classes it was built with."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.utils.parametrize import type_before_parametrizations

from conftest import inference_nets, training_engine
from models import create_model, networks
from models.inference.windows import Windows
from models.network_views import NetworkViews
from options.train_options import TrainOptions
from util.distributed import DistContext
from util.seeding import seed_everything


def network_attributes(model) -> dict[str, nn.Module]:
    """Every attribute of `model` that holds a module, by name."""
    return {name: value for name, value in vars(model).items() if isinstance(value, nn.Module)}


def module_classes(model) -> dict[str, list[type]]:
    """The class of every submodule of every network of `model`, in order (--D_spectral's
    parametrization, PyTorch's own, aside)."""
    return {name: [type_before_parametrizations(module) for module in net.modules()]
            for name, net in model.named_networks().items()}


class Twin(nn.Module):
    """Stands in for torch.compile's wrapper (no inductor needed): a module around the network."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.inner = net

    def forward(self, *args, **kwargs):
        return self.inner(*args, **kwargs)


def batch(size: int, volume: bool = False) -> dict:
    shape = (1, 1, size, size, size) if volume else (1, 3, size, size)
    generator = torch.Generator().manual_seed(0)
    return {"A": torch.rand(*shape, generator=generator) * 2 - 1, "B": torch.rand(*shape, generator=generator) * 2 - 1,
            "A_paths": ["a"], "B_paths": ["b"]}


def set_up(model_name: str, *flags: str, first: dict):
    opt = TrainOptions().parse(["--dataroot", "unused", "--model", model_name, "--ngf", "4", "--ndf", "4",
                                "--netG", "resnet_6blocks", "--display_id", "0", *flags])
    seed_everything(0)
    model = create_model(opt, DistContext())
    built, classes = network_attributes(model), module_classes(model)
    model.setup(opt, first_batch=first)
    return model, built, classes


@pytest.mark.parametrize("model_name, flags", [
    ("cycle_gan", ["--compile", "--compile_probe", "0", "--ema_decay", "0.5", "--pool_size", "0"]),
    ("cut", ["--compile", "--compile_probe", "0"]),  # netF is built from the first batch
    ("pix2pix", ["--channels_last", "--checkpoint_activations", "--deterministic", "--D_spectral"]),
])
def test_a_models_networks_are_the_same_objects_through_setup_training_validation_and_inference(
        model_name, flags, monkeypatch):
    monkeypatch.setattr(networks, "compile_network", lambda net, name: Twin(net))
    first = batch(32)
    model, built, classes = set_up(model_name, *flags, first=first)
    after_setup = network_attributes(model)
    assert all(after_setup[name] is net for name, net in built.items())  # CUT's netF is added, nothing replaced
    classes.update({name: classes_now for name, classes_now in module_classes(model).items() if name not in classes})
    # a network built from the first batch (CUT's netF) may grow there: it keeps what it had, in order
    grown = module_classes(model)
    assert all(grown[name][:len(before)] == before for name, before in classes.items())
    classes = grown

    engine = training_engine(model)  # DDP (under torchrun) and compiled variants beside the plain modules
    engine.train_step([first])
    with engine.inference_networks(eval_mode=True, ema=engine.ema is not None) as nets:  # validation
        model.set_input(first)
        model.test(nets)
    model.set_input(batch(48))  # larger than a tile: test.py --tile
    model.test(inference_nets(model, Windows.for_tiles(16, 4)))

    assert network_attributes(model).keys() == after_setup.keys()
    assert all(network_attributes(model)[name] is net for name, net in after_setup.items())
    assert module_classes(model) == classes  # no layer changed class (compile, checkpointing, pads, norms)
    assert all(type(net) is not Twin for net in model.named_networks().values())


def test_a_volume_models_networks_stay_themselves_through_sliding_window_inference(monkeypatch):
    pytest.importorskip("monai")
    first = batch(16, volume=True)
    model, built, _ = set_up("pix2pix", "--dataset_mode", "aligned_volume", "--netG", "resnet_6blocks_3d",
                             "--netD", "pixel_3d", "--input_nc", "1", "--output_nc", "1", "--patch_size", "16",
                             "--norm", "instance", first=first)
    engine = training_engine(model)
    engine.train_step([first])
    with engine.inference_networks() as nets:  # validation: whole volumes in sliding windows
        model.set_input(batch(24, volume=True))
        model.test(nets)
    assert all(network_attributes(model)[name] is net for name, net in built.items())


def test_the_networks_a_use_calls_are_held_by_that_use_under_names_of_their_own():
    model, _, _ = set_up("pix2pix", "--norm", "instance", first=batch(32))
    nets = inference_nets(model, Windows.for_tiles(16, 4))
    assert isinstance(nets, NetworkViews) and set(nets) == {"G", "D"}
    assert nets.G is not model.netG and nets.G.net is model.netG  # the generator, padded and tiled
    assert nets.D is model.netD  # a discriminator is called as it is
    with pytest.raises(AttributeError):
        nets.G = model.netG  # views are read-only: a use builds its own


def test_the_synchronised_twin_trains_the_plain_networks_weights_and_statistics():
    """Under torchrun with --norm syncbatch the engine trains a twin of each network whose batch norms
    synchronise across processes: it must share every Parameter and buffer with the model's network,
    so that the optimizer (made with the model's parameters), the checkpoints and the running
    statistics are those of what was trained, while the model's network keeps its own classes."""
    from models.training.network_variants import synchronised_twin

    torch.manual_seed(0)
    plain = networks.build_discriminator(TrainOptions().parse(
        ["--dataroot", "unused", "--model", "pix2pix", "--ndf", "4", "--norm", "syncbatch", "--D_spectral"]), 3)
    classes = [type(module) for module in plain.modules()]
    twin = synchronised_twin(plain, torch.device("cpu"))
    assert [id(p) for p in twin.parameters()] == [id(p) for p in plain.parameters()]
    assert [id(b) for b in twin.buffers()] == [id(b) for b in plain.buffers()]  # running stats, counts, u and v
    assert any(type(module).__name__.startswith("CPUSyncBatchNorm") for module in twin.modules())
    optimizer = torch.optim.Adam(plain.parameters(), lr=0.1)
    before = {name: value.clone() for name, value in plain.state_dict().items()}
    twin(torch.rand(2, 3, 32, 32)).mean().backward()
    optimizer.step()
    changed = [name for name, value in plain.state_dict().items() if not torch.equal(value, before[name])]
    assert any(name.endswith("running_mean") for name in changed) and any("original" in name for name in changed)
    assert any(name.endswith("num_batches_tracked") for name in changed) and any("_u" in name for name in changed)
    assert [type(module) for module in plain.modules()] == classes
