"""Issue 21's options: --diff_augment (with --ada_target), --D_spectral, --gan_mode hinge and
--upsample resize. The augmentation reaches the generator's gradients, gives a pix2pix pair one
transform, draws per image of the global batch (so 2 processes train the weights of 1 with twice the
batch, for real in 2 processes) and resumes exactly; with every option off a training step is the
plain step of dev/straightforward_step.py, bit for bit."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from conftest import load_script, ranks, train_on
from helpers import ok
from helpers_weights import assert_identical, assert_trained_alike, final_weights
from models import networks
from models.losses.diff_augment import ADA_INTERVAL, DiscriminatorAugment, augment_policy

POLICY = "color,translation,cutout"
# Acceptance check 2's flags. ndf 16 and --lr 0.002 let D grow confident within the run, so that ADA's
# p rises above 0 (and falls again): the augmentation is applied, not only drawn.
EVERY_OPTION = ["--diff_augment", POLICY, "--ada_target", "0.6", "--ada_kimg", "0.02", "--D_spectral",
                "--gan_mode", "hinge", "--upsample", "resize"]
RUN = ["--model", "pix2pix", "--netG", "resnet_6blocks", "--norm", "instance", "--no_dropout", "--ngf", "4",
       "--ndf", "16", "--lr", "0.002", "--dtype", "float64", "--load_size", "36", "--crop_size", "32",
       "--n_epochs", "2", "--n_epochs_decay", "0", "--save_epoch_freq", "1", "--print_freq", "2",
       "--display_id", "0", "--num_threads", "0", "--seed", "0", "--no_html", "--no_progress", *EVERY_OPTION]


def run_args(root: Path, ckpt: Path, name: str, batch: int) -> list[str]:
    return ["--dataroot", str(root), "--checkpoints_dir", str(ckpt), "--name", name, "--batch_size", str(batch), *RUN]


@pytest.fixture(scope="module")
def train():
    return load_script("train.py")


@pytest.fixture(scope="module")
def one_process(train, paired_root, tmp_path_factory) -> Path:
    """Every option on: one process, batch 2, two epochs of 8 pairs."""
    ckpt = tmp_path_factory.mktemp("every_option")
    assert train.main(run_args(paired_root, ckpt, "one", 2)) == 0
    return ckpt / "one"


def augmentation_state(run_dir: Path, label: str) -> dict:
    return torch.load(run_dir / f"{label}_train_state.pth", weights_only=True)["model"]["diff_augment"]


# ---------------------------------------------------------------- the augmentation itself
def test_gradients_reach_the_generator_through_the_augmented_discriminator_input():
    torch.manual_seed(0)
    netG = networks.define_G(3, 3, 4, "resnet_6blocks", "instance", upsample="resize")
    netD = networks.apply_spectral_norm(networks.define_D(3, 4, "basic", 3, "instance"))
    augment = DiscriminatorAugment(POLICY)
    augment.seed(0)
    fake = netG(torch.randn(2, 3, 32, 32))
    augmented = augment(fake)
    assert not torch.equal(augmented, fake)
    networks.GANLoss("hinge")(netD(augmented), True, for_discriminator=False).backward()
    gradients = [p.grad for p in netG.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in gradients)
    assert all(g.abs().sum() > 0 for g in gradients[:1] + gradients[-2:])  # first and last layers learn


def test_a_pix2pix_pair_gets_one_transform_for_both_halves():
    augment = DiscriminatorAugment(POLICY)
    augment.seed(1)
    image = torch.rand(4, 3, 32, 32) * 2 - 1
    first, second = augment(image, image.clone())
    assert torch.equal(first, second) and not torch.equal(first, image)
    # one channel beside three: the same shift and the same erased square
    one, three = augment(image[:, :1], image)
    assert torch.equal(one == 0, three[:, :1] == 0)


@pytest.mark.parametrize("policy", ["color", "translation", "cutout"])
def test_each_policy_changes_images_but_not_their_shape(policy):
    augment = DiscriminatorAugment(policy)
    augment.seed(2)
    image = torch.rand(3, 2, 16, 24) * 2 - 1
    out = augment(image)
    assert out.shape == image.shape and not torch.equal(out, image)
    if policy == "cutout":
        assert ((out == 0).flatten(1).sum(1) >= 8 * 12 * 2 // 4).all()  # a part of the square inside


def test_each_image_is_transformed_alike_whatever_the_split_across_processes(monkeypatch):
    from util import distributed

    image = torch.rand(4, 3, 16, 16) * 2 - 1
    whole = DiscriminatorAugment(POLICY)
    whole.seed(3)
    expected = whole(image)
    monkeypatch.setattr(distributed, "world_size", lambda: 2)
    for rank in (0, 1):  # rank r holds images r and r + 2 of the global batch
        monkeypatch.setattr(distributed, "global_batch_positions", lambda n, r=rank: [j * 2 + r for j in range(n)])
        part = DiscriminatorAugment(POLICY)
        part.seed(3)
        assert torch.equal(part(image[rank::2]), expected[rank::2])


def test_ada_raises_p_while_d_is_confident_on_reals_and_lowers_it_otherwise():
    augment = DiscriminatorAugment(POLICY, ada_target=0.6, ada_kimg=0.01)  # 10 images from 0 to 1
    assert augment.p == 0.0
    for _ in range(ADA_INTERVAL):
        augment.observe_real(torch.ones(2, 1, 3, 3))  # every verdict "real": overconfident
    assert augment.p == pytest.approx(0.8)  # 8 images seen
    for _ in range(ADA_INTERVAL):
        augment.observe_real(-torch.ones(2, 1, 3, 3))
    assert augment.p == pytest.approx(0.0)
    for _ in range(ADA_INTERVAL):  # a multi-scale discriminator's list of verdict maps counts whole
        augment.observe_real([torch.ones(2, 1, 3, 3), torch.ones(2, 1, 1, 1)])
    assert augment.p == pytest.approx(0.8)
    augment.p = 0.0  # p = 0: no transform applies, though the same numbers are drawn
    image = torch.rand(2, 3, 8, 8)
    assert torch.equal(augment(image), image)


def test_policy_flag_accepts_any_order_and_refuses_unknown_names():
    assert augment_policy(" cutout,color ") == "color,cutout"
    with pytest.raises(Exception, match="color, translation, cutout"):
        augment_policy("colour")


# ---------------------------------------------------------------- hinge, spectral norm, resize upsampling
def test_hinge_loss_has_a_margin_for_d_and_none_for_g():
    loss = networks.GANLoss("hinge")
    scores = torch.tensor([-2.0, 0.0, 0.5, 2.0])
    assert loss(scores, True).item() == pytest.approx((3 + 1 + 0.5 + 0) / 4)
    assert loss(scores, False).item() == pytest.approx((0 + 1 + 1.5 + 3) / 4)
    assert loss(scores, True, for_discriminator=False).item() == pytest.approx(-0.125)


def test_spectral_norm_keeps_the_parameters_and_bounds_the_weights():
    netD = networks.define_D(6, 4, "basic", 3, "instance", init_gain=1.0)
    before = list(netD.parameters())
    networks.apply_spectral_norm(netD)
    assert {id(p) for p in netD.parameters()} == {id(p) for p in before}  # optimizers made earlier keep working
    keys = list(netD.state_dict())
    assert "model.0.parametrizations.weight.original" in keys and "model.0.parametrizations.weight.0._u" in keys
    for _ in range(20):  # power iterations
        netD(torch.randn(1, 6, 32, 32))
    conv = netD.model[0]
    assert torch.linalg.matrix_norm(conv.weight.flatten(1), ord=2).item() == pytest.approx(1.0, rel=0.05)
    reloaded = networks.apply_spectral_norm(networks.define_D(6, 4, "basic", 3, "instance"))
    reloaded.load_state_dict(netD.state_dict())  # with it on, checkpoints load here


@pytest.mark.parametrize("netG", ["resnet_6blocks", "unet_128"])
def test_resize_upsampling_replaces_every_transposed_convolution_and_keeps_the_size(netG):
    net = networks.define_G(3, 2, 4, netG, "instance", upsample="resize")
    assert not any(isinstance(m, nn.ConvTranspose2d) for m in net.modules())
    assert net(torch.randn(1, 3, 128, 128)).shape == (1, 2, 128, 128)
    reference = networks.define_G(3, 2, 4, netG, "instance")
    assert any(isinstance(m, nn.ConvTranspose2d) for m in reference.modules())  # transpose stays the default


# ---------------------------------------------------------------- off: nothing changes
@pytest.mark.parametrize("model", ["pix2pix", "cycle_gan"])
def test_with_every_option_off_a_training_step_is_the_plain_step_bit_for_bit(model, paired_root):
    from models import create_model
    from options.train_options import TrainOptions
    from util import distributed

    straightforward = load_script("dev/straightforward_step.py")
    opt = TrainOptions().parse(["--dataroot", str(paired_root), "--model", model, "--netG", "resnet_6blocks",
                                "--ngf", "4", "--ndf", "4", "--dataset_mode", "aligned", "--display_id", "0"])
    ctx = distributed.current_context()
    model_ = create_model(opt, ctx, 0)
    model_.setup(opt)
    plain = straightforward.build_straightforward(opt, torch.device("cpu"))
    plain_nets = {"G": plain.G, "D": plain.D} if model == "pix2pix" else \
        {"G_A": plain.G_A, "G_B": plain.G_B, "D_A": plain.D_A, "D_B": plain.D_B}
    for name, net in plain_nets.items():
        net.load_state_dict(getattr(model_, "net" + name).state_dict())
    generator = torch.Generator().manual_seed(0)
    for step in range(3):  # dropout (pix2pix) draws from the global generator: both must draw alike
        batch = {"A": torch.rand(1, 3, 32, 32, generator=generator) * 2 - 1,
                 "B": torch.rand(1, 3, 32, 32, generator=generator) * 2 - 1, "A_paths": ["a"], "B_paths": ["b"]}
        torch.manual_seed(step)
        train_on(model_, batch)
        torch.manual_seed(step)
        plain.set_input(batch)
        plain.optimize_parameters()
    for name, net in plain_nets.items():
        assert_identical({name: net.state_dict()}, {name: getattr(model_, "net" + name).state_dict()})


# ---------------------------------------------------------------- every option on, trained for real
def test_every_option_shows_in_train_opt_and_p_rose_and_fell(one_process):
    options = (one_process / "train_opt.txt").read_text()
    for line in ("diff_augment: color,translation,cutout", "ada_target: 0.6", "D_spectral: True",
                 "gan_mode: hinge", "upsample: resize"):
        assert line in " ".join(options.split()).replace(" : ", ": "), line
    # the transforms were applied, not only drawn: ADA raised p at the end of epoch 1 (and lowered it after)
    assert augmentation_state(one_process, "1")["p"] > 0 and augmentation_state(one_process, "2")["p"] == 0
    assert "model.0.parametrizations.weight.original" in torch.load(one_process / "latest_net_D.pth")
    assert "ada_p: 0.400" in (one_process / "loss_log.txt").read_text()  # logged with the losses


def test_the_translator_rebuilds_a_resize_generator_from_the_run_folder_and_from_its_weights(one_process):
    from models.inference.saved_generator import infer_architecture
    from models.inference.translator import Translator

    image = torch.rand(3, 32, 32)
    for source in (one_process, one_process / "latest_net_G.pth"):
        assert Translator.load(source, device="cpu").translate(image).shape == (3, 32, 32)
    state = torch.load(one_process / "latest_net_G.pth", weights_only=True)
    assert infer_architecture(state)["upsample"] == "resize"


@pytest.mark.slow
def test_two_processes_train_the_same_weights_as_one_with_every_option_on(one_process, paired_root, tmp_path):
    ok(ranks("train.py", *run_args(paired_root, tmp_path, "two", 1)))
    for label in ("1", "latest"):
        assert_trained_alike(one_process, tmp_path / "two", label)
        assert augmentation_state(tmp_path / "two", label)["p"] == augmentation_state(one_process, label)["p"]


def test_a_run_stopped_mid_interval_continues_bit_identical_with_every_option_on(train, one_process, paired_root,
                                                                                 tmp_path, monkeypatch):
    plain_stop = train.stop_requested
    # stop after the 3rd step (of 4 in an epoch): mid-epoch, and mid ADA interval (4 verdicts)
    monkeypatch.setattr(train, "stop_requested", lambda run, step: step == 3 or plain_stop(run, step))
    args = run_args(paired_root, tmp_path, "stopped", 2)
    assert train.main(args) == 128  # stopped and saved, as after a signal
    monkeypatch.setattr(train, "stop_requested", plain_stop)
    assert train.main(args + ["--continue_train"]) == 0
    assert_identical(final_weights(tmp_path / "stopped"), final_weights(one_process))
    assert augmentation_state(tmp_path / "stopped", "latest")["p"] == augmentation_state(one_process, "latest")["p"]
