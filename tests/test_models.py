"""Models: each one learns a tiny fixed batch, shows the documented visuals, keeps D and G
gradients apart, is reproducible from its seed, and saves/loads checkpoints in the reference's
format (including old ones and with clear errors for ones that do not fit)."""
from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import models
from conftest import inference_nets, train_on, training_engine
from data.colorization_dataset import AB_SCALE, L_SCALE, rgb_to_lab
from models.losses import gan
from models.networks import checkpoint_files
from models.training.step import TrainingStep
from options.test_options import TestOptions
from options.train_options import TrainOptions
from util.distributed import DistContext
from util.errors import UserError
from util.seeding import seed_everything

SMALL = ["--ngf", "8", "--ndf", "8"]


def train_opt(model: str, *flags: str, tmp=None):
    extra = ["--checkpoints_dir", str(tmp), "--name", "exp"] if tmp is not None else []
    return TrainOptions().parse(["--dataroot", "unused", "--model", model, *SMALL, *extra, *flags])


def build(model: str, *flags: str, seed: int = 0, tmp=None, setup: bool = True):
    """What train.py does: seed every generator, create the model, set it up."""
    opt = train_opt(model, *flags, tmp=tmp)
    seed_everything(seed)
    m = models.create_model(opt, DistContext(), seed)
    if setup:
        m.setup(opt)
    return m


def load_test_model(tmp, *flags: str):
    opt = TestOptions().parse(["--dataroot", "unused", "--checkpoints_dir", str(tmp), "--name", "exp",
                               "--ngf", "8", *flags])
    m = models.create_model(opt, DistContext(), 0)
    m.setup(opt)
    return m




def smooth(channels: int, size: int, seed: int, batch: int = 1) -> torch.Tensor:
    """A smooth image in [-1, 1] (low-frequency colour blobs)."""
    g = torch.Generator().manual_seed(seed)
    coarse = torch.rand(batch, channels, 4, 4, generator=g) * 2 - 1
    return F.interpolate(coarse, size=(size, size), mode="bilinear", align_corners=False)


def pair(size: int, in_nc: int = 3, out_nc: int = 3, batch: int = 1) -> dict:
    return {"A": smooth(in_nc, size, 1, batch), "B": smooth(out_nc, size, 2, batch),
            "A_paths": [f"a{i}.png" for i in range(batch)], "B_paths": [f"b{i}.png" for i in range(batch)]}


def lab_pair(size: int) -> dict:
    rgb = ((smooth(3, size, 3)[0].permute(1, 2, 0).numpy() + 1) * 127.5).round().astype(np.uint8)
    lab = torch.from_numpy(rgb_to_lab(rgb).astype(np.float32)).permute(2, 0, 1)
    return {"A": (lab[[0]] / L_SCALE - 1.0)[None], "B": (lab[1:] / AB_SCALE)[None],
            "A_paths": ["c.png"], "B_paths": ["c.png"]}


def state(net) -> dict:
    return {k: v.detach().clone() for k, v in net.state_dict().items()}


def same_state(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ---------------------------------------------------------------- learning a fixed batch
# (model, flags, batch, the loss it must reduce, visuals: name -> shape)
S = 32
OVERFIT = [
    ("cycle_gan", [], lambda: pair(S), ("cycle_A", "cycle_B"),
     {n: (1, 3, S, S) for n in ["real_A", "fake_B", "rec_A", "idt_B", "real_B", "fake_A", "rec_B", "idt_A"]}),
    ("pix2pix", ["--lr", "0.001"], lambda: pair(256), ("G_L1",),   # the default unet_256 needs 256x256
     {n: (1, 3, 256, 256) for n in ["real_A", "fake_B", "real_B"]}),
    ("colorization", ["--lr", "0.001"], lambda: lab_pair(256), ("G_L1",),
     {"real_A": (1, 1, 256, 256), "real_B_rgb": (1, 3, 256, 256), "fake_B_rgb": (1, 3, 256, 256)}),
    ("template", ["--lr", "0.001"], lambda: pair(S), ("G",),
     {n: (1, 3, S, S) for n in ["data_A", "data_B", "output"]}),
]
LOSS_NAMES = {
    "cycle_gan": ["D_A", "G_A", "cycle_A", "idt_A", "D_B", "G_B", "cycle_B", "idt_B"],
    "pix2pix": ["G_GAN", "G_L1", "D_real", "D_fake"],
    "colorization": ["G_GAN", "G_L1", "D_real", "D_fake"],
    "template": ["G"],
}


@pytest.mark.parametrize("model,flags,make_batch,main_losses,visuals", OVERFIT, ids=[o[0] for o in OVERFIT])
def test_model_learns_a_fixed_batch_and_shows_documented_visuals(model, flags, make_batch, main_losses, visuals):
    m = build(model, *flags)
    batch = make_batch()
    history = []
    for _ in range(20):
        train_on(m, batch)
        losses = m.get_current_losses()
        assert list(losses) == LOSS_NAMES[model]
        assert all(math.isfinite(v) for v in losses.values()), losses
        history.append(sum(losses[name] for name in main_losses))
    first, last = np.mean(history[:3]), np.mean(history[-3:])
    assert last < 0.9 * first, history

    m.compute_visuals()
    shown = m.get_current_visuals()
    assert list(shown) == list(visuals)
    for name, shape in visuals.items():
        assert tuple(shown[name].shape) == shape, name
        assert shown[name].min() >= -1.0 and shown[name].max() <= 1.0, name
    assert m.get_image_paths() == batch["A_paths"]


def test_cycle_gan_without_identity_loss_shows_no_identity_images():
    m = build("cycle_gan", "--lambda_identity", "0")
    assert m.visual_names == ["real_A", "fake_B", "rec_A", "real_B", "fake_A", "rec_B"]
    train_on(m, pair(S))
    losses = m.get_current_losses()
    assert losses["idt_A"] == 0.0 and losses["idt_B"] == 0.0


def test_cycle_gan_identity_loss_needs_equal_channel_counts(capsys):
    with pytest.raises(SystemExit) as refused:  # known from the flags: refused when parsed
        build("cycle_gan", "--input_nc", "1", setup=False)
    assert refused.value.code == 2 and "--lambda_identity 0" in capsys.readouterr().err
    build("cycle_gan", "--input_nc", "1", "--lambda_identity", "0", setup=False)


@pytest.mark.parametrize("model", ["pix2pix", "cycle_gan"])
def test_direction_btoa_swaps_the_domains(model):
    m = build(model, "--netG", "resnet_6blocks", "--direction", "BtoA", setup=False)
    batch = pair(S)
    m.set_input(batch)
    assert torch.equal(m.real_A, batch["B"]) and torch.equal(m.real_B, batch["A"])
    assert m.get_image_paths() == batch["B_paths"]


# ---------------------------------------------------------------- gradients kept apart
def grads(*nets) -> list:
    return [None if p.grad is None else p.grad.clone() for net in nets for p in net.parameters()]


def same_grads(a: list, b: list) -> bool:
    return len(a) == len(b) and all((x is None and y is None) or (x is not None and y is not None and torch.equal(x, y))
                                    for x, y in zip(a, b))


def guard_updates(model, trains: dict, calls: list, monkeypatch) -> None:
    """Wrap the training step's update_weights so that each update checks that it changed the
    gradients of the networks its optimizer trains (`trains`: optimizer name -> networks) and of no other."""
    original = TrainingStep.update_weights
    optimizers = {id(getattr(model, name)): name for name in trains}
    every_net = [net for nets in trains.values() for net in nets]

    def checked(step, optimizer, loss):
        name = optimizers[id(optimizer)]
        others = [net for net in every_net if not any(net is mine for mine in trains[name])]
        before_others, before_mine = grads(*others), grads(*trains[name])
        original(step, optimizer, loss)
        assert same_grads(grads(*others), before_others), f"the {name} update changed gradients it must not touch"
        after = grads(*trains[name])
        assert all(g is not None for g in after), f"the {name} update left a network without gradients"
        assert not same_grads(after, before_mine)
        calls.append(name)

    monkeypatch.setattr(TrainingStep, "update_weights", checked)


def test_pix2pix_steps_give_gradients_only_to_the_network_they_train(monkeypatch):
    m = build("pix2pix", "--netG", "resnet_6blocks")
    calls: list = []
    guard_updates(m, {"optimizer_D": [m.netD], "optimizer_G": [m.netG]}, calls, monkeypatch)
    for _ in range(2):
        train_on(m, pair(S))
    assert calls == ["optimizer_D", "optimizer_G"] * 2


def test_cycle_gan_steps_give_gradients_only_to_the_networks_they_train(monkeypatch):
    m = build("cycle_gan", "--netG", "resnet_6blocks")
    calls: list = []
    guard_updates(m, {"optimizer_G": [m.netG_A, m.netG_B], "optimizer_D": [m.netD_A, m.netD_B]}, calls, monkeypatch)
    for _ in range(2):
        train_on(m, pair(S))
    assert calls == ["optimizer_G", "optimizer_D"] * 2


def test_cycle_gan_training_step_leaves_discriminators_trainable():
    m = build("cycle_gan", "--netG", "resnet_6blocks")
    before = state(m.netD_A)
    train_on(m, pair(S))
    assert all(p.requires_grad for p in m.netD_A.parameters())
    assert not same_state(before, state(m.netD_A))  # the D step updated D_A


# ---------------------------------------------------------------- seeds
@pytest.mark.parametrize("model", ["cycle_gan", "pix2pix"])
def test_same_seed_gives_identical_initial_weights(model):
    flags = ["--netG", "resnet_6blocks"]
    a, b, c = build(model, *flags, seed=5), build(model, *flags, seed=5), build(model, *flags, seed=6)
    for name in a.model_names:
        net_a, net_b, net_c = (getattr(m, "net" + name) for m in (a, b, c))
        assert same_state(state(net_a), state(net_b)), name
        assert not same_state(state(net_a), state(net_c)), name


# ---------------------------------------------------------------- WGAN-GP
def record_penalties(monkeypatch) -> list:
    seen = []
    original = gan.cal_gradient_penalty

    def recording(*args, **kwargs):
        penalty, gradients = original(*args, **kwargs)
        seen.append(penalty.detach().item())
        return penalty, gradients

    monkeypatch.setattr(gan, "cal_gradient_penalty", recording)
    return seen


def test_pix2pix_trains_with_wgangp_and_its_d_loss_includes_the_penalty(monkeypatch):
    seen = record_penalties(monkeypatch)
    m = build("pix2pix", "--gan_mode", "wgangp", "--netG", "resnet_6blocks")
    for step in range(3):
        train_on(m, pair(S))
        assert len(seen) == step + 1
        assert all(math.isfinite(v) for v in m.get_current_losses().values())
        assert m.loss_D.item() == pytest.approx(0.5 * (m.loss_D_real + m.loss_D_fake).item() + seen[-1], rel=1e-5)
    assert all(p > 0 for p in seen)


def test_cycle_gan_trains_with_wgangp_penalising_both_discriminators(monkeypatch):
    seen = record_penalties(monkeypatch)
    m = build("cycle_gan", "--gan_mode", "wgangp", "--netG", "resnet_6blocks")
    for step in range(2):
        train_on(m, pair(S))
        assert len(seen) == 2 * (step + 1)  # D_A and D_B
        assert all(math.isfinite(v) for v in m.get_current_losses().values())
    assert all(p > 0 for p in seen)


# ---------------------------------------------------------------- checkpoints
def test_save_networks_writes_plain_reference_state_dicts(tmp_path):
    m = build("cycle_gan", "--netG", "resnet_6blocks", tmp=tmp_path)
    m.save_networks("latest")
    m.save_networks(5)
    for epoch in ("latest", "5"):
        for name in ("G_A", "G_B", "D_A", "D_B"):
            path = tmp_path / "exp" / f"{epoch}_net_{name}.pth"
            saved = torch.load(path, weights_only=True)
            assert not any(k.startswith("module.") for k in saved)
            assert same_state(saved, state(getattr(m, "net" + name)))
            assert all(v.device.type == "cpu" for v in saved.values())
    arch = json.loads((tmp_path / "exp" / "architecture.json").read_text())
    assert arch["netG"] == "resnet_6blocks" and arch["ngf"] == 8 and arch["norm"] == "instance"


def test_architecture_json_records_every_flag_that_shapes_a_network(tmp_path):
    """Besides the reference's flags: --num_D (with any --netD: a continued run may not change it),
    --D_spectral, and the flags of the model's own networks (CUT's), which scripts and a mismatch
    message read back."""
    m = build("pix2pix", "--netD", "multiscale", "--num_D", "3", "--D_spectral", tmp=tmp_path)
    m.save_networks("latest")
    arch = json.loads((tmp_path / "exp" / "architecture.json").read_text())
    assert (arch["netD"], arch["num_D"], arch["D_spectral"], arch["model"], arch["direction"]) == \
        ("multiscale", 3, True, "pix2pix", "AtoB")
    checkpoint_files.write_networks(str(tmp_path / "cut"), "latest", {},
                                    train_opt("cut", "--normD", "batch", "--no_antialias", "--netF_nc", "64"))
    arch = json.loads((tmp_path / "cut" / "architecture.json").read_text())
    shapes = ("netD", "num_D", "normD", "no_antialias", "no_antialias_up", "netF", "netF_nc", "nce_layers")
    assert {key: arch[key] for key in shapes} == {"netD": "basic", "num_D": 2, "normD": "batch", "no_antialias": True,
                                                  "no_antialias_up": False, "netF": "mlp_sample", "netF_nc": 64,
                                                  "nce_layers": "0,4,8,12,16"}
    assert "lr" not in arch and "lambda_NCE" not in arch  # what trains the networks is not their shape


def test_load_networks_restores_saved_weights(tmp_path):
    m = build("pix2pix", "--netG", "resnet_6blocks", tmp=tmp_path)
    saved_G, saved_D = state(m.netG), state(m.netD)
    m.save_networks("latest")
    with torch.no_grad():
        for p in list(m.netG.parameters()) + list(m.netD.parameters()):
            p.zero_()
    m.load_networks("latest")
    assert same_state(state(m.netG), saved_G) and same_state(state(m.netD), saved_D)


def test_continue_train_loads_latest_or_the_given_iteration(tmp_path):
    first = build("pix2pix", "--netG", "resnet_6blocks", tmp=tmp_path, seed=1)
    first.save_networks("latest")
    latest = state(first.netG)
    train_on(first, pair(S))
    first.save_networks("iter_100")
    later = state(first.netG)

    resumed = build("pix2pix", "--netG", "resnet_6blocks", "--continue_train", tmp=tmp_path, seed=2)
    assert same_state(state(resumed.netG), latest)
    resumed = build("pix2pix", "--netG", "resnet_6blocks", "--continue_train", "--load_iter", "100",
                    tmp=tmp_path, seed=2)
    assert same_state(state(resumed.netG), later)


def test_test_model_loads_one_cycle_gan_generator_and_reproduces_it(tmp_path):
    trained = build("cycle_gan", tmp=tmp_path)
    train_on(trained, pair(S))
    trained.save_networks("latest")
    x = smooth(3, S, 9)
    for suffix, net in (("_A", trained.netG_A), ("_B", trained.netG_B)):
        m = load_test_model(tmp_path, "--model_suffix", suffix, "--no_dropout")
        assert m.model_names == ["G" + suffix]
        m.eval()
        m.set_input({"A": x, "A_paths": ["x.png"]})
        m.test(inference_nets(m))
        with torch.no_grad():
            expected = net(x)
        assert torch.allclose(m.fake, expected, atol=1e-6)
        assert list(m.get_current_visuals()) == ["real", "fake"]
        assert m.get_image_paths() == ["x.png"]


def test_checkpoint_from_another_architecture_names_the_file_and_flags(tmp_path):
    build("cycle_gan", tmp=tmp_path).save_networks("latest")  # resnet_9blocks, no dropout
    with pytest.raises(UserError) as exc:
        load_test_model(tmp_path, "--model_suffix", "_A", "--no_dropout", "--netG", "resnet_6blocks")
    message = str(exc.value)
    assert "latest_net_G_A.pth" in message
    assert "--netG resnet_9blocks" in message
    with pytest.raises(UserError) as exc:
        load_test_model(tmp_path, "--model_suffix", "_A", "--ngf", "16", "--no_dropout")
    assert "--ngf 8" in str(exc.value)
    with pytest.raises(UserError) as exc:  # forgot --no_dropout: the resnet blocks' layers shift
        load_test_model(tmp_path, "--model_suffix", "_A")
    assert "--no_dropout" in str(exc.value) and "latest_net_G_A.pth" in str(exc.value)


def test_missing_checkpoint_is_a_user_error_listing_available_ones(tmp_path):
    build("cycle_gan", "--netG", "resnet_6blocks", tmp=tmp_path).save_networks("latest")
    with pytest.raises(UserError) as exc:
        load_test_model(tmp_path, "--model_suffix", "_A", "--no_dropout", "--netG", "resnet_6blocks", "--epoch", "7")
    message = str(exc.value)
    assert "7_net_G_A.pth" in message and "latest_net_G_A.pth" in message and "--epoch" in message


def test_old_checkpoint_with_instance_norm_running_stats_still_loads(tmp_path):
    m = build("cycle_gan", "--netG", "resnet_6blocks", tmp=tmp_path)
    m.save_networks("latest")
    path = tmp_path / "exp" / "latest_net_G_A.pth"
    old = torch.load(path, weights_only=True)
    # PyTorch < 0.4 saved running statistics for InstanceNorm2d layers (model.2, a block's norm, ...)
    for layer in ("model.2", "model.5", "model.10.conv_block.2", "model.15.conv_block.6", "model.17"):
        old[f"{layer}.running_mean"] = torch.zeros(1)
        old[f"{layer}.running_var"] = torch.ones(1)
    torch.save(old, path)
    loaded = load_test_model(tmp_path, "--model_suffix", "_A", "--no_dropout", "--netG", "resnet_6blocks")
    assert same_state(state(loaded.netG), state(m.netG_A))


def test_unknown_extra_keys_in_a_checkpoint_are_still_refused(tmp_path):
    m = build("cycle_gan", "--netG", "resnet_6blocks", tmp=tmp_path)
    m.save_networks("latest")
    path = tmp_path / "exp" / "latest_net_G_A.pth"
    bad = torch.load(path, weights_only=True)
    bad["model.1.extra"] = torch.zeros(1)
    torch.save(bad, path)
    with pytest.raises(UserError, match="latest_net_G_A.pth"):
        load_test_model(tmp_path, "--model_suffix", "_A", "--no_dropout", "--netG", "resnet_6blocks")


def test_print_networks_reports_reference_parameter_counts(capsys):
    m = build("cycle_gan", "--ngf", "64", "--ndf", "64", setup=False)
    capsys.readouterr()
    m.print_networks(verbose=False)
    out = capsys.readouterr().out
    assert "[Network G_A] Total number of parameters : 11.378 M" in out
    assert "[Network G_B] Total number of parameters : 11.378 M" in out
    assert "[Network D_A] Total number of parameters : 2.765 M" in out
    assert "[Network D_B] Total number of parameters : 2.765 M" in out


# ---------------------------------------------------------------- moving averages (--ema_decay)
def test_ema_generators_follow_the_moving_average_formula_and_discriminators_have_none(tmp_path):
    m = build("pix2pix", "--netG", "resnet_6blocks", "--ema_decay", "0.75", tmp=tmp_path)
    engine = training_engine(m)
    assert list(engine.ema.networks()) == ["G"]  # D is not averaged
    expected = None
    for _ in range(3):
        train_on(m, pair(S))
        weights = {k: v.clone() for k, v in m.netG.named_parameters()}
        # The first step copies the weights; later ones move 25% of the way towards them.
        expected = weights if expected is None else {k: 0.75 * expected[k] + 0.25 * w for k, w in weights.items()}
    averaged = dict(engine.ema.networks()["G"].named_parameters())
    assert all(torch.allclose(averaged[k], expected[k], rtol=1e-5, atol=1e-7) for k in expected)
    assert not all(torch.equal(averaged[k], w) for k, w in m.netG.named_parameters())
    engine.save_networks("latest")
    saved = torch.load(tmp_path / "exp" / "latest_ema_net_G.pth", weights_only=True)
    assert saved.keys() == m.netG.state_dict().keys()  # the reference's format, loadable by test.py
    assert torch.equal(saved["model.1.weight"], averaged["model.1.weight"])
    assert not (tmp_path / "exp" / "latest_ema_net_D.pth").exists()


def test_test_model_applies_the_moving_average_as_epoch_latest_ema(tmp_path):
    m = build("cycle_gan", "--netG", "resnet_6blocks", "--ema_decay", "0.5", tmp=tmp_path)
    for _ in range(2):
        train_on(m, pair(S))
    training_engine(m).save_networks("latest")
    loaded = load_test_model(tmp_path, "--model_suffix", "_A", "--no_dropout", "--netG", "resnet_6blocks",
                             "--epoch", "latest_ema")
    assert same_state(state(loaded.netG), state(training_engine(m).ema.networks()["G_A"]))


def test_ema_decay_outside_zero_to_one_is_a_user_error(capsys):
    with pytest.raises(SystemExit) as stop:  # refused by the option parser (util/flag_types.py), exit 2
        build("pix2pix", "--netG", "resnet_6blocks", "--ema_decay", "1.5")
    assert stop.value.code == 2 \
        and "error: argument --ema_decay: must be a number >= 0 and < 1" in capsys.readouterr().err


# ---------------------------------------------------------------- the registry: a new model is one file
OWN_MODEL = '''
import torch
from models import networks
from models.template_model import TemplateModel


class ProjectedModel(TemplateModel):
    """The template plus a head built from the first batch (as CUT's data_dependent_initialize)."""

    network_roles = {"G": "generator", "F": "head"}

    def data_dependent_initialize(self, first_batch):
        self.set_input(first_batch)
        features = self.netG(self.data_A).shape[1]
        self.netF = torch.nn.Conv2d(features, 4, 1).to(self.device)
        self.model_names.append("F")
        self.optimizer_F = self.make_adam(self.netF.parameters())
        self.optimizers.append(self.optimizer_F)
'''


def test_a_model_of_your_own_is_found_by_its_module_path_and_sees_the_first_batch(tmp_path, monkeypatch):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "__init__.py").write_text("")
    (tmp_path / "mine" / "projected_model.py").write_text(OWN_MODEL)
    monkeypatch.chdir(tmp_path)  # importable from the current directory, as for `python train.py` run there
    opt = train_opt("mine.projected_model", "--netG", "resnet_6blocks", tmp=tmp_path)
    assert models.find_model_using_name("mine.projected_model").__name__ == "ProjectedModel"
    m = models.create_model(opt, DistContext())
    m.setup(opt, first_batch=pair(S))
    # the head is scheduled and saved like every other network
    assert m.model_names == ["G", "F"] and len(m.schedulers) == len(m.optimizers) == 2
    m.save_networks("latest")
    assert (tmp_path / "exp" / "latest_net_F.pth").is_file()


def test_a_network_without_a_declared_role_is_refused_naming_it(tmp_path, monkeypatch):
    """EMA, --D_spectral, tiling and export go by the roles a model declares, not by names: a network
    the model forgot is refused before anything is trained or written, with the roles to choose from."""
    (tmp_path / "forgetful").mkdir()
    (tmp_path / "forgetful" / "__init__.py").write_text("")
    (tmp_path / "forgetful" / "unroled_model.py").write_text(OWN_MODEL.replace(
        'network_roles = {"G": "generator", "F": "head"}', 'network_roles = {"G": "generator"}'))
    monkeypatch.chdir(tmp_path)
    opt = train_opt("forgetful.unroled_model", "--netG", "resnet_6blocks", tmp=tmp_path)
    m = models.create_model(opt, DistContext())
    with pytest.raises(UserError) as refused:
        m.setup(opt, first_batch=pair(S))
    message = str(refused.value)
    assert "ProjectedModel" in message and "network(s) F" in message \
        and "generator, encoder, discriminator, head" in message
    assert not (tmp_path / "exp").exists() or not list((tmp_path / "exp").glob("*.pth"))


def test_built_in_models_are_found_by_file_and_class_name():
    assert models.builtin_model_names() == ["bicycle_gan", "colorization", "cut", "cycle_gan", "pix2pix", "sb",
                                            "template", "test"]
    assert models.find_model_using_name("cycle_gan").__name__ == "CycleGANModel"
    assert models.find_model_using_name("sb").__name__ == "SBModel"


@pytest.mark.parametrize("name", ["cyclegan", "nowhere.my_model"])
def test_an_unknown_model_exits_2_naming_the_models_and_how_to_name_a_module(capsys, name):
    with pytest.raises(SystemExit) as stop:
        train_opt(name)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and name in err
    assert "cycle_gan, pix2pix, sb, template, test" in err and "module" in err


OLD_CONTRACT_MODEL = '''
from models.template_model import TemplateModel


class OldModel(TemplateModel):
    """Written for the contract before the training engine: forward() calls self.netG."""

    def forward(self):
        self.output = self.netG(self.data_A)

    def optimize_parameters(self):
        self.forward()
        self.update_weights(self.optimizer, (self.output - self.data_B).abs().mean())
'''


def test_a_model_written_for_the_contract_before_the_engine_is_refused_saying_how_to_update_it(tmp_path, monkeypatch,
                                                                                               capsys):
    (tmp_path / "older").mkdir()
    (tmp_path / "older" / "__init__.py").write_text("")
    (tmp_path / "older" / "old_model.py").write_text(OLD_CONTRACT_MODEL)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:  # while the options are parsed: before a run writes anything
        train_opt("older.old_model", tmp=tmp_path)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1
    assert "OldModel.forward() takes no argument" in err and "def forward(self, nets)" in err
    assert "step.update_weights(optimizer, loss)" in err and "docs/extending.md" in err
    assert not (tmp_path / "exp").exists()


HALF_UPDATED_MODEL = '''
from models.template_model import TemplateModel


class HalfModel(TemplateModel):
    """Takes the step, but still applies its loss and judges as models did before the training engine."""

    def optimize_parameters(self, step):
        self.forward(step.nets)
        with self.{called}:
            self.update_weights(self.optimizer, (self.output - self.data_B).abs().mean())
'''


@pytest.mark.parametrize("package, called, where", [
    ("judging", "frozen(self.netG)", "self.frozen.*now the training step's.*step.frozen"),
    ("updating", "autocast()", "self.update_weights.*now the training step's.*step.update_weights")])
def test_a_model_calling_what_moved_to_the_step_is_told_where_it_went(tmp_path, monkeypatch, capsys, package, called,
                                                                      where):
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / package / "half_model.py").write_text(HALF_UPDATED_MODEL.format(called=called))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:  # while the options are parsed: before a run writes anything
        train_opt(f"{package}.half_model", tmp=tmp_path)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and re.search(where, err)
    assert not (tmp_path / "exp").exists()
