"""Networks: the reference's architectures (parameter counts, state_dict keys, output sizes),
size checks, normalisation layers, weight initialisation, GAN losses, the WGAN-GP penalty and
learning-rate schedules as seen through BaseModel.update_learning_rate."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from models import networks
from models.base_model import BaseModel
from models.training.engine import TrainingEngine
from options.train_options import TrainOptions
from util.distributed import DistContext
from util.errors import UserError


def n_params(net: nn.Module) -> int:
    return sum(p.numel() for p in net.parameters())


def printed(count: int) -> str:
    """How the reference prints a parameter count."""
    return f"{count / 1e6:.3f} M"


# ---------------------------------------------------------------- parameter counts by formula
def conv(cin: int, cout: int, k: int, bias: bool) -> int:
    return cin * cout * k * k + (cout if bias else 0)


def resnet_count(in_nc, out_nc, ngf, n_blocks, norm):
    bias = norm == "instance"
    bn = (lambda c: 2 * c) if norm in ("batch", "syncbatch") else (lambda c: 0)
    total = conv(in_nc, ngf, 7, bias) + bn(ngf)
    total += conv(ngf, 2 * ngf, 3, bias) + bn(2 * ngf) + conv(2 * ngf, 4 * ngf, 3, bias) + bn(4 * ngf)
    total += n_blocks * 2 * (conv(4 * ngf, 4 * ngf, 3, bias) + bn(4 * ngf))
    total += conv(4 * ngf, 2 * ngf, 3, bias) + bn(2 * ngf) + conv(2 * ngf, ngf, 3, bias) + bn(ngf)
    return total + conv(ngf, out_nc, 7, True)


def unet_count(in_nc, out_nc, ngf, num_downs, norm):
    bias = norm == "instance"
    bn = (lambda c: 2 * c) if norm in ("batch", "syncbatch") else (lambda c: 0)
    # (outer, inner) channels of each level, outermost first
    levels = [(ngf, 2 * ngf), (2 * ngf, 4 * ngf), (4 * ngf, 8 * ngf)] + [(8 * ngf, 8 * ngf)] * (num_downs - 5)
    total = conv(in_nc, ngf, 4, bias) + conv(2 * ngf, out_nc, 4, True)  # outermost down, up
    for outer, inner in levels:
        total += conv(outer, inner, 4, bias) + bn(inner) + conv(2 * inner, outer, 4, bias) + bn(outer)
    return total + conv(8 * ngf, 8 * ngf, 4, bias) + conv(8 * ngf, 8 * ngf, 4, bias) + bn(8 * ngf)  # innermost


def nlayers_count(in_nc, ndf, n_layers, norm):
    bias = norm == "instance"
    bn = (lambda c: 2 * c) if norm in ("batch", "syncbatch") else (lambda c: 0)
    total, prev = conv(in_nc, ndf, 4, True), ndf
    for n in list(range(1, n_layers)) + [n_layers]:
        cur = ndf * min(2 ** n, 8)
        total += conv(prev, cur, 4, bias) + bn(cur)
        prev = cur
    return total + conv(prev, 1, 4, True)


def pixel_count(in_nc, ndf, norm):
    bias = norm == "instance"
    bn = 4 * ndf if norm in ("batch", "syncbatch") else 0
    return conv(in_nc, ndf, 1, True) + conv(ndf, 2 * ndf, 1, bias) + bn + conv(2 * ndf, 1, 1, bias)


# Counts the reference prints ("[Network G_A] Total number of parameters : 11.378 M").
@pytest.mark.parametrize("netG,norm,reference", [
    ("resnet_9blocks", "instance", "11.378 M"),   # CycleGAN G_A / G_B
    ("resnet_6blocks", "instance", "7.838 M"),
    ("unet_256", "batch", "54.414 M"),            # pix2pix G
    ("unet_128", "batch", "41.829 M"),
])
def test_generator_parameter_count_matches_reference(netG, norm, reference):
    net = networks.define_G(3, 3, 64, netG, norm, use_dropout=False)
    count = n_params(net)
    if netG.startswith("resnet"):
        assert count == resnet_count(3, 3, 64, int(netG[7]), norm)
    else:
        assert count == unet_count(3, 3, 64, int(netG[5:]).bit_length() - 1, norm)
    assert printed(count) == reference


@pytest.mark.parametrize("netD,in_nc,norm,n_layers,reference", [
    ("basic", 3, "instance", 3, "2.765 M"),       # CycleGAN D_A / D_B
    ("basic", 6, "batch", 3, "2.769 M"),          # pix2pix D on concat(A, B)
    ("n_layers", 3, "instance", 5, None),
    ("n_layers", 3, "batch", 1, None),
    ("pixel", 3, "instance", 3, None),
    ("pixel", 6, "batch", 3, None),
])
def test_discriminator_parameter_count_matches_reference(netD, in_nc, norm, n_layers, reference):
    net = networks.define_D(in_nc, 64, netD, n_layers, norm)
    if netD == "pixel":
        expected = pixel_count(in_nc, 64, norm)
    else:
        expected = nlayers_count(in_nc, 64, 3 if netD == "basic" else n_layers, norm)
    assert n_params(net) == expected
    if reference:
        assert printed(n_params(net)) == reference


def test_dropout_adds_no_parameters():
    assert n_params(networks.define_G(3, 3, 8, "resnet_6blocks", "instance", use_dropout=True)) == \
        resnet_count(3, 3, 8, 6, "instance")
    assert n_params(networks.define_G(3, 3, 8, "unet_256", "batch", use_dropout=True)) == \
        unet_count(3, 3, 8, 8, "batch")


# ---------------------------------------------------------------- state_dict keys
BN_KEYS = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")


def expected_resnet_keys(n_blocks: int, norm: str, dropout: bool = False) -> list[str]:
    """Keys of the reference ResnetGenerator: pad 0, conv 1, norm 2, relu 3, conv 4, ..."""
    keys: list[str] = []

    def c(name, bias):
        keys.extend([f"{name}.weight"] + ([f"{name}.bias"] if bias else []))

    def n(name):
        if norm == "batch":
            keys.extend(f"{name}.{k}" for k in BN_KEYS)

    bias = norm == "instance"
    for conv_i in (1, 4, 7):
        c(f"model.{conv_i}", bias)
        n(f"model.{conv_i + 1}")
    second = 6 if dropout else 5  # pad 0, conv 1, norm 2, relu 3, [dropout 4], pad, conv, norm
    for b in range(10, 10 + n_blocks):
        c(f"model.{b}.conv_block.1", bias)
        n(f"model.{b}.conv_block.2")
        c(f"model.{b}.conv_block.{second}", bias)
        n(f"model.{b}.conv_block.{second + 1}")
    base = 10 + n_blocks
    for conv_i in (base, base + 3):
        c(f"model.{conv_i}", bias)
        n(f"model.{conv_i + 1}")
    c(f"model.{base + 7}", True)
    return keys


def expected_unet_keys(num_downs: int, norm: str) -> list[str]:
    """Keys of the reference UnetGenerator (nested UnetSkipConnectionBlocks under model.model)."""
    bias = norm == "instance"
    keys: list[str] = []

    def c(name, with_bias):
        keys.extend([f"{name}.weight"] + ([f"{name}.bias"] if with_bias else []))

    def n(name):
        if norm == "batch":
            keys.extend(f"{name}.{k}" for k in BN_KEYS)

    def block(prefix: str, depth: int):
        if depth == num_downs - 1:  # innermost: downrelu, downconv, uprelu, upconv, upnorm
            c(f"{prefix}.1", bias)
            c(f"{prefix}.3", bias)
            n(f"{prefix}.4")
            return
        # downrelu, downconv, downnorm, submodule, uprelu, upconv, upnorm
        c(f"{prefix}.1", bias)
        n(f"{prefix}.2")
        block(f"{prefix}.3.model", depth + 1)
        c(f"{prefix}.5", bias)
        n(f"{prefix}.6")

    c("model.model.0", bias)          # outermost: downconv, submodule, uprelu, upconv, tanh
    block("model.model.1.model", 1)
    c("model.model.3", True)
    return keys


def test_resnet_9blocks_keys_match_reference_checkpoints():
    state = networks.define_G(3, 3, 8, "resnet_9blocks", "instance", use_dropout=False).state_dict()
    keys = list(state)
    assert keys[:4] == ["model.1.weight", "model.1.bias", "model.4.weight", "model.4.bias"]
    assert "model.10.conv_block.1.weight" in keys and "model.18.conv_block.5.bias" in keys
    assert keys[-2:] == ["model.26.weight", "model.26.bias"]
    assert keys == expected_resnet_keys(9, "instance")
    assert state["model.1.weight"].shape == (8, 3, 7, 7)
    assert state["model.19.weight"].shape == (32, 16, 3, 3)  # ConvTranspose2d: (in, out, k, k)
    assert state["model.26.weight"].shape == (3, 8, 7, 7)


@pytest.mark.parametrize("n_blocks,norm,dropout", [(6, "instance", False), (9, "batch", False),
                                                    (9, "instance", True), (6, "none", False)])
def test_resnet_keys_follow_reference_layout(n_blocks, norm, dropout):
    net = networks.define_G(3, 3, 8, f"resnet_{n_blocks}blocks", norm, use_dropout=dropout)
    assert list(net.state_dict()) == expected_resnet_keys(n_blocks, norm, dropout)


@pytest.mark.parametrize("netG,num_downs,norm", [("unet_256", 8, "batch"), ("unet_128", 7, "batch"),
                                                 ("unet_256", 8, "instance")])
def test_unet_keys_match_reference_checkpoints(netG, num_downs, norm):
    state = networks.define_G(3, 3, 8, netG, norm, use_dropout=True).state_dict()
    assert list(state) == expected_unet_keys(num_downs, norm)
    assert state["model.model.0.weight"].shape == (8, 3, 4, 4)
    assert state["model.model.1.model.1.weight"].shape == (16, 8, 4, 4)
    assert state["model.model.3.weight"].shape == (16, 3, 4, 4)
    innermost = "model.model.1" + ".model.3" * (num_downs - 2) + ".model.1.weight"
    assert state[innermost].shape == (64, 64, 4, 4)
    if norm == "batch":
        assert "model.model.1.model.2.running_mean" in state
        assert "model.model.0.bias" not in state


@pytest.mark.parametrize("norm,expected", [
    ("instance", ["model.0.weight", "model.0.bias", "model.2.weight", "model.2.bias", "model.5.weight",
                  "model.5.bias", "model.8.weight", "model.8.bias", "model.11.weight", "model.11.bias"]),
    ("batch", ["model.0.weight", "model.0.bias", "model.2.weight"] + [f"model.3.{k}" for k in BN_KEYS]
     + ["model.5.weight"] + [f"model.6.{k}" for k in BN_KEYS] + ["model.8.weight"]
     + [f"model.9.{k}" for k in BN_KEYS] + ["model.11.weight", "model.11.bias"]),
])
def test_basic_discriminator_keys_match_reference(norm, expected):
    assert list(networks.define_D(3, 8, "basic", 3, norm).state_dict()) == expected


@pytest.mark.parametrize("norm,expected", [
    ("instance", ["net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias", "net.5.weight", "net.5.bias"]),
    ("batch", ["net.0.weight", "net.0.bias", "net.2.weight"] + [f"net.3.{k}" for k in BN_KEYS]
     + ["net.5.weight"]),
])
def test_pixel_discriminator_keys_match_reference(norm, expected):
    assert list(networks.define_D(3, 8, "pixel", 3, norm).state_dict()) == expected


@pytest.mark.parametrize("netG,use_dropout,expected", [
    ("resnet_9blocks", True, 9), ("resnet_6blocks", False, 0), ("unet_256", True, 3),
    ("unet_128", True, 2), ("unet_256", False, 0)])
def test_dropout_sits_where_the_reference_puts_it(netG, use_dropout, expected):
    net = networks.define_G(3, 3, 4, netG, "batch", use_dropout=use_dropout)
    dropouts = [m for m in net.modules() if isinstance(m, nn.Dropout)]
    assert len(dropouts) == expected
    assert all(m.p == 0.5 for m in dropouts)


# ---------------------------------------------------------------- sizes
@pytest.mark.parametrize("netG,height,width", [
    ("resnet_9blocks", 32, 48), ("resnet_6blocks", 36, 20), ("resnet_9blocks", 8, 12),
    ("unet_128", 128, 128), ("unet_128", 256, 128), ("unet_256", 256, 256),
])
def test_generator_keeps_image_size_for_accepted_sizes(netG, height, width):
    networks.family_of(netG).check_input_size(None, height, width)  # accepted
    net = networks.define_G(1, 2, 4, netG, "instance", use_dropout=False).eval()
    with torch.no_grad():
        out = net(torch.rand(2, 1, height, width) * 2 - 1)
    assert out.shape == (2, 2, height, width)
    assert out.abs().max() <= 1.0  # tanh output, the image range


@pytest.mark.parametrize("netG,height,width,mentions", [
    ("unet_256", 100, 100, ["256", "--crop_size", "100x100"]),
    ("unet_256", 256, 128, ["256", "--crop_size"]),
    ("unet_128", 192, 128, ["128", "--crop_size"]),
    ("resnet_9blocks", 30, 30, ["4", "30x30"]),
    ("resnet_6blocks", 32, 34, ["4", "32x34"]),
    ("resnet_9blocks", 4, 8, ["8", "4x8"]),  # a multiple of 4, but too small for the residual blocks
])
def test_check_input_size_rejects_sizes_generator_cannot_take(netG, height, width, mentions):
    with pytest.raises(UserError) as exc:
        networks.family_of(netG).check_input_size(None, height, width)
    for text in mentions:
        assert text in str(exc.value)
    assert netG in str(exc.value)
    # ...and the generator really cannot translate such an image to the same size.
    net = networks.define_G(3, 3, 2, netG, "instance", use_dropout=False)
    try:
        with torch.no_grad():
            out = net(torch.zeros(1, 3, height, width))
    except (RuntimeError, ValueError):
        return
    assert out.shape[-2:] != (height, width)


def patchgan_side(size: int, n_layers: int) -> int:
    for _ in range(n_layers):          # k4 s2 p1 convs
        size = (size + 2 - 4) // 2 + 1
    return size - 2                     # two k4 s1 p1 convs


@pytest.mark.parametrize("netD,n_layers,size,side", [
    ("basic", 3, 256, 30), ("basic", 3, 64, 6), ("n_layers", 1, 64, 30), ("n_layers", 5, 256, 6),
])
def test_patchgan_output_grid(netD, n_layers, size, side):
    assert patchgan_side(size, n_layers) == side
    net = networks.define_D(6, 4, netD, n_layers, "batch")
    assert net(torch.rand(2, 6, size, size)).shape == (2, 1, side, side)


def test_pixel_discriminator_gives_one_logit_per_pixel():
    net = networks.define_D(3, 4, "pixel", 3, "instance")
    assert net(torch.rand(2, 3, 20, 36)).shape == (2, 1, 20, 36)


def test_basic_discriminator_judges_70x70_patches():
    # Output cell (0, 0) of the 70x70 PatchGAN sees input rows/cols -23..46 (with padding).
    net = networks.define_D(1, 4, "basic", 3, "none").eval()
    x = torch.rand(1, 1, 128, 128)
    base = net(x)[0, 0, 0, 0]
    inside, outside = x.clone(), x.clone()
    inside[..., 46, 46] += 5.0
    outside[..., 47, 20] += 5.0
    outside[..., 20, 47] += 5.0
    assert net(inside)[0, 0, 0, 0] != base
    assert torch.equal(net(outside)[0, 0, 0, 0], base)


# ---------------------------------------------------------------- normalisation
def test_instance_norm_has_no_affine_parameters_and_convs_keep_bias():
    layer = networks.get_norm_layer("instance")(8)
    assert isinstance(layer, nn.InstanceNorm2d)
    assert not layer.affine and not layer.track_running_stats
    assert list(layer.parameters()) == [] and list(layer.buffers()) == []
    net = networks.define_G(3, 3, 4, "resnet_6blocks", "instance")
    convs = [m for m in net.modules() if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d))]
    assert all(m.bias is not None for m in convs)


@pytest.mark.parametrize("norm", ["batch", "syncbatch"])
def test_batch_norms_are_batchnorm2d_and_convs_before_them_have_no_bias(norm):
    layer = networks.get_norm_layer(norm)(8)
    assert type(layer) is nn.BatchNorm2d
    assert layer.affine and layer.track_running_stats
    net = networks.define_G(3, 3, 4, "resnet_6blocks", norm)
    convs = [m for m in net.modules() if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d))]
    assert all(m.bias is None for m in convs[:-1])
    assert convs[-1].bias is not None  # the output convolution keeps its bias


def test_norm_none_is_identity():
    layer = networks.get_norm_layer("none")(8)
    x = torch.randn(2, 8, 3, 3)
    assert torch.equal(layer(x), x)
    net = networks.define_G(3, 3, 4, "resnet_6blocks", "none")
    assert not any(isinstance(m, (nn.BatchNorm2d, nn.InstanceNorm2d)) for m in net.modules())


# ---------------------------------------------------------------- initialisation
def init_net(init_type: str, gain: float) -> nn.Sequential:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(64, 64, 3), nn.ConvTranspose2d(64, 64, 3), nn.Linear(256, 128),
                        nn.BatchNorm2d(4096))
    for m in net:
        with torch.no_grad():
            m.bias.fill_(0.7)
    networks.init_weights(net, init_type, gain)
    return net


@pytest.mark.parametrize("gain", [0.02, 0.1])
@pytest.mark.parametrize("init_type", networks.INIT_TYPES)
def test_init_zeroes_biases_and_draws_batchnorm_scales_around_one_with_std_gain(init_type, gain):
    net = init_net(init_type, gain)
    for m in net:
        assert torch.count_nonzero(m.bias) == 0
    bn = net[3].weight.detach()
    assert abs(bn.mean().item() - 1.0) < gain * 0.1
    assert bn.std().item() == pytest.approx(gain, rel=0.1)


@pytest.mark.parametrize("gain", [0.02, 0.5])
def test_normal_init_has_std_gain(gain):
    for m in list(init_net("normal", gain))[:3]:
        w = m.weight.detach()
        assert w.std().item() == pytest.approx(gain, rel=0.05)
        assert abs(w.mean().item()) < gain * 0.05


def test_xavier_init_scales_with_fan_in_and_fan_out():
    gain = 0.5
    net = init_net("xavier", gain)
    conv_std = gain * math.sqrt(2.0 / (64 * 9 + 64 * 9))
    linear_std = gain * math.sqrt(2.0 / (256 + 128))
    assert net[0].weight.std().item() == pytest.approx(conv_std, rel=0.05)
    assert net[2].weight.std().item() == pytest.approx(linear_std, rel=0.05)


def test_kaiming_init_uses_fan_in():
    net = init_net("kaiming", 0.02)
    assert net[0].weight.std().item() == pytest.approx(math.sqrt(2.0 / (64 * 9)), rel=0.05)
    assert net[2].weight.std().item() == pytest.approx(math.sqrt(2.0 / 256), rel=0.05)


@pytest.mark.parametrize("gain", [0.02, 1.0])
def test_orthogonal_init_gives_orthogonal_rows_scaled_by_gain(gain):
    net = init_net("orthogonal", gain)
    for m in (net[0], net[2]):
        w = m.weight.detach().reshape(m.weight.shape[0], -1)
        eye = torch.eye(w.shape[0])
        assert torch.allclose(w @ w.T, gain ** 2 * eye, atol=gain ** 2 * 1e-4)


def test_define_g_and_d_apply_the_requested_init():
    g = networks.define_G(3, 3, 16, "resnet_6blocks", "batch", init_type="normal", init_gain=0.1)
    conv = g.model[4]
    assert isinstance(conv, nn.Conv2d) and conv.weight.std().item() == pytest.approx(0.1, rel=0.1)
    d = networks.define_D(3, 16, "basic", 3, "instance", init_type="orthogonal", init_gain=1.0)
    w = d.model[2].weight.detach().reshape(32, -1)
    assert torch.allclose(w @ w.T, torch.eye(32), atol=1e-4)
    assert torch.count_nonzero(d.model[2].bias) == 0


def test_unknown_init_type_is_a_user_error():
    with pytest.raises(UserError, match="init_type"):
        networks.init_weights(nn.Conv2d(1, 1, 1), "uniform", 0.02)


# ---------------------------------------------------------------- GAN losses
PRED = torch.tensor([[[[-2.0, 0.0], [0.5, 3.0]]]])


def test_lsgan_is_mean_squared_error_to_one_and_zero():
    loss = networks.GANLoss("lsgan")
    values = [-2.0, 0.0, 0.5, 3.0]
    assert loss(PRED, True).item() == pytest.approx(sum((v - 1) ** 2 for v in values) / 4)
    assert loss(PRED, False).item() == pytest.approx(sum(v ** 2 for v in values) / 4)


def test_vanilla_is_binary_cross_entropy_on_logits():
    loss = networks.GANLoss("vanilla")
    values = [-2.0, 0.0, 0.5, 3.0]
    real = sum(math.log(1 + math.exp(-v)) for v in values) / 4  # -log(sigmoid(v))
    fake = sum(math.log(1 + math.exp(v)) for v in values) / 4   # -log(1 - sigmoid(v))
    assert loss(PRED, True).item() == pytest.approx(real, rel=1e-6)
    assert loss(PRED, False).item() == pytest.approx(fake, rel=1e-6)


def test_wgangp_loss_is_minus_mean_for_real_and_mean_for_fake():
    loss = networks.GANLoss("wgangp")
    assert loss(PRED, True).item() == pytest.approx(-0.375)
    assert loss(PRED, False).item() == pytest.approx(0.375)


@pytest.mark.parametrize("mode", networks.GAN_MODES)
def test_gan_loss_handles_any_patch_grid_and_gives_gradients(mode):
    loss = networks.GANLoss(mode)
    pred = torch.randn(3, 1, 5, 7, requires_grad=True)
    value = loss(pred, True) + loss(pred, False)
    value.backward()
    assert value.dim() == 0 and pred.grad is not None and torch.isfinite(pred.grad).all()


def test_unknown_gan_mode_is_a_user_error():
    with pytest.raises(UserError, match="gan_mode"):
        networks.GANLoss("wgan")


# ---------------------------------------------------------------- gradient penalty
class LinearD(nn.Module):
    """D(x) = sum(w * x) per sample: its input gradient is w everywhere."""

    def __init__(self, w: torch.Tensor):
        super().__init__()
        self.w = nn.Parameter(w)

    def forward(self, x):
        return (x * self.w).flatten(1).sum(1)


def weight_with_norm(norm: float) -> torch.Tensor:
    w = torch.randn(3, 4, 4, generator=torch.Generator().manual_seed(1))
    return w / w.norm() * norm


@pytest.mark.parametrize("kind", ["real", "fake", "mixed"])
@pytest.mark.parametrize("norm,lambda_gp,expected", [(1.0, 10.0, 0.0), (2.0, 10.0, 10.0), (3.0, 5.0, 20.0),
                                                     (0.5, 10.0, 2.5)])
def test_gradient_penalty_is_lambda_times_squared_gradient_norm_gap(kind, norm, lambda_gp, expected):
    netD = LinearD(weight_with_norm(norm))
    real, fake = torch.rand(4, 3, 4, 4), torch.rand(4, 3, 4, 4)
    penalty, grads = networks.cal_gradient_penalty(netD, real, fake, type=kind, lambda_gp=lambda_gp)
    assert penalty.item() == pytest.approx(expected, abs=1e-4)
    assert grads.shape == (4, 48)


def test_gradient_penalty_is_evaluated_at_the_requested_points():
    class SquareD(nn.Module):
        def forward(self, x):  # gradient 2x
            return (x ** 2).flatten(1).sum(1)

    real, fake = torch.full((2, 1, 2, 2), 0.25), torch.full((2, 1, 2, 2), 1.0)
    # ||2x|| over 4 equal pixels = 2 * v * 2
    p_real, _ = networks.cal_gradient_penalty(SquareD(), real, fake, type="real", lambda_gp=1.0)
    p_fake, _ = networks.cal_gradient_penalty(SquareD(), real, fake, type="fake", lambda_gp=1.0)
    assert p_real.item() == pytest.approx((1.0 - 1) ** 2, abs=1e-6)
    assert p_fake.item() == pytest.approx((4.0 - 1) ** 2, abs=1e-5)


def test_gradient_penalty_trains_the_discriminator():
    netD = LinearD(weight_with_norm(2.0))
    penalty, _ = networks.cal_gradient_penalty(netD, torch.rand(2, 3, 4, 4), torch.rand(2, 3, 4, 4))
    penalty.backward()
    w = netD.w.detach()
    expected = 10.0 * 2 * (w.norm() - 1) * w / w.norm()  # d/dw lambda * (||w|| - 1)^2
    assert torch.allclose(netD.w.grad, expected, atol=1e-4)


def test_gradient_penalty_is_off_for_non_positive_lambda():
    penalty, grads = networks.cal_gradient_penalty(LinearD(weight_with_norm(2.0)), torch.rand(1, 3, 4, 4),
                                                   torch.rand(1, 3, 4, 4), lambda_gp=0.0)
    assert penalty == 0.0 and grads is None


# ---------------------------------------------------------------- learning-rate schedules
class TwoOptimizerModel(BaseModel):
    """A model with a generator and a discriminator optimizer, stepped like a real model: its step
    applies the losses `self.losses` (generator, discriminator)."""

    def __init__(self, opt):
        super().__init__(opt, DistContext())
        self.w_g, self.w_d = nn.Parameter(torch.zeros(1)), nn.Parameter(torch.zeros(1))
        self.optimizers = [torch.optim.Adam([self.w_g], lr=opt.lr), torch.optim.Adam([self.w_d], lr=opt.lr)]
        self.losses = (1.0, 1.0)

    def set_input(self, input):
        pass

    def forward(self, nets):
        pass

    def optimize_parameters(self, step):
        step.update_weights(self.optimizers[0], self.w_g.sum() * 0 + self.losses[0])
        step.update_weights(self.optimizers[1], self.w_d.sum() * 0 + self.losses[1])


def lrs_per_epoch(*flags: str, validation=None, generator_loss=None) -> tuple[list[float], TwoOptimizerModel]:
    """The learning rate each epoch trains at, with the scheduler stepped at the end of each epoch
    as train.py does: `validation(epoch_index)` is the validation metric handed to it (if given);
    the epoch's two steps update both optimizers with losses `generator_loss(epoch_index, step)` and 1."""
    opt = TrainOptions().parse(["--dataroot", "unused", "--model", "template", "--lr", "0.1", *flags])
    model = TwoOptimizerModel(opt)
    model.setup(opt)
    engine = TrainingEngine(model, opt, DistContext())
    lrs = []
    for i, epoch in enumerate(range(opt.epoch_count, opt.n_epochs + opt.n_epochs_decay + 1)):
        lr_g, lr_d = (o.param_groups[0]["lr"] for o in model.optimizers)
        assert lr_g == lr_d  # both optimizers follow the schedule
        lrs.append(lr_g / 0.1)
        for step in range(2):  # the epoch's training steps
            model.losses = (generator_loss(i, step) if generator_loss else 1.0, 1.0)
            engine.train_step([{}])
        old, new = engine.update_learning_rate(validation(i) if validation else None)
        assert old == pytest.approx(lr_g)
        assert new == pytest.approx(model.optimizers[0].param_groups[0]["lr"])
    return lrs, model


def test_linear_policy_keeps_lr_for_n_epochs_then_decays_linearly():
    lrs, model = lrs_per_epoch("--n_epochs", "3", "--n_epochs_decay", "3")
    assert lrs == pytest.approx([1, 1, 1, 0.75, 0.5, 0.25])  # last epoch at lr / (n_epochs_decay + 1)
    assert model.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.0)


def test_linear_policy_resumed_at_epoch_count_continues_the_same_schedule():
    lrs, _ = lrs_per_epoch("--n_epochs", "3", "--n_epochs_decay", "3", "--epoch_count", "5")
    assert lrs == pytest.approx([0.5, 0.25])


def test_step_policy_multiplies_by_a_tenth_every_lr_decay_iters_epochs():
    lrs, _ = lrs_per_epoch("--lr_policy", "step", "--lr_decay_iters", "2", "--n_epochs", "4",
                           "--n_epochs_decay", "2")
    assert lrs == pytest.approx([1, 1, 0.1, 0.1, 0.01, 0.01])


def test_cosine_policy_anneals_to_zero_over_n_epochs():
    lrs, model = lrs_per_epoch("--lr_policy", "cosine", "--n_epochs", "4", "--n_epochs_decay", "0")
    assert lrs == pytest.approx([(1 + math.cos(math.pi * k / 4)) / 2 for k in range(4)])
    assert model.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-12)


def test_plateau_policy_keeps_lr_while_validation_metric_improves():
    lrs, _ = lrs_per_epoch("--lr_policy", "plateau", "--n_epochs", "10", "--n_epochs_decay", "0",
                           validation=lambda i: 0.9 ** i)
    assert lrs == pytest.approx([1.0] * 10)


def test_plateau_policy_divides_lr_by_five_after_patience_epochs_without_improvement():
    lrs, model = lrs_per_epoch("--lr_policy", "plateau", "--n_epochs", "7", "--n_epochs_decay", "0",
                               validation=lambda i: 1.0)
    assert lrs == pytest.approx([1.0] * 7)  # the first 6 stalled epochs are within patience 5
    assert model.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.1 * 0.2)


def test_plateau_policy_without_validation_follows_the_epochs_mean_generator_loss():
    # The generator's loss falls from epoch to epoch (within an epoch it goes up and down, so only
    # its epoch mean falls): the rate is kept. A flat generator loss lowers it after the patience.
    falling = lambda i, step: (10.0 - i) + (1.0 if step == 0 else -1.0)  # noqa: E731
    lrs, _ = lrs_per_epoch("--lr_policy", "plateau", "--n_epochs", "8", "--n_epochs_decay", "0",
                           generator_loss=falling)
    assert lrs == pytest.approx([1.0] * 8)
    lrs, model = lrs_per_epoch("--lr_policy", "plateau", "--n_epochs", "8", "--n_epochs_decay", "0",
                               generator_loss=lambda i, step: 3.0)
    assert lrs == pytest.approx([1.0] * 7 + [0.2])


def test_the_gradient_penalty_takes_channels_last_discriminators_and_images():
    # --channels_last --gan_mode wgangp: the penalty's gradients come back channels-last.
    torch.manual_seed(0)
    netD = networks.define_D(6, 8, "basic", norm="instance")
    real, fake = torch.randn(2, 6, 32, 32), torch.randn(2, 6, 32, 32)
    torch.manual_seed(1)
    plain, _ = networks.cal_gradient_penalty(netD, real, fake)
    netD = netD.to(memory_format=torch.channels_last)
    torch.manual_seed(1)
    fast, _ = networks.cal_gradient_penalty(netD, real.contiguous(memory_format=torch.channels_last),
                                            fake.contiguous(memory_format=torch.channels_last))
    assert torch.allclose(fast, plain, rtol=1e-4)
