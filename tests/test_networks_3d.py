"""The 3-D network families (volumes, N x C x depth x height x width): resnet_*blocks_3d, unet_*_3d,
basic_3d / n_layers_3d / pixel_3d. Sizes they take and refuse, the 2-D layout of their weights and
what the weights show, activation checkpointing, 3-D normalisation and its synchronised CPU form,
and CUT's feature reading. Tiny widths (ngf/ndf 2) and 8-64 voxel sides, in float64."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from conftest import ROOT, ranks
from models import networks
from models.networks.sync_batchnorm import CPUSyncBatchNorm, CPUSyncBatchNorm3d, convert_sync_batchnorm
from util.errors import UserError

GENERATORS_3D = ["resnet_9blocks_3d", "resnet_6blocks_3d", "unet_8_3d", "unet_16_3d", "unet_32_3d", "unet_64_3d",
                 "unet_128_3d"]
# each 3-D generator's 2-D twin, of the same depth (the same layers, one dimension fewer)
TWIN_2D = {"resnet_9blocks_3d": "resnet_9blocks", "resnet_6blocks_3d": "resnet_6blocks", "unet_128_3d": "unet_128"}


def generator(netG: str, norm: str = "instance", dropout: bool = False, upsample: str = "transpose",
              input_nc: int = 1, output_nc: int = 2) -> nn.Module:
    torch.manual_seed(0)
    return networks.define_G(input_nc, output_nc, 2, netG, norm, use_dropout=dropout, upsample=upsample).double()


def volume(*sides: int, channels: int = 1, batch: int = 2) -> torch.Tensor:
    return torch.rand(batch, channels, *sides, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 2 - 1


# ---------------------------------------------------------------- sizes
@pytest.mark.parametrize("netG,sides", [
    ("resnet_6blocks_3d", (16, 24, 32)), ("resnet_9blocks_3d", (8, 12, 20)),
    ("unet_8_3d", (32, 32, 24)), ("unet_16_3d", (16, 48, 32)),
    ("unet_32_3d", (32, 64, 32)), ("unet_64_3d", (64, 64, 64)),
])
@pytest.mark.parametrize("upsample", ["transpose", "resize"])
def test_3d_generators_keep_the_volume_size_of_sizes_their_rule_takes_deterministically(netG, sides, upsample):
    family = networks.family_of(netG)
    assert family.size_rule(None).dims == 3 and family.size_rule(None).fits(*sides)
    family.check_input_size(None, *sides)  # accepted
    net = generator(netG, upsample=upsample).eval()
    x = volume(*sides)
    with torch.no_grad():
        out, again = net(x), net(x)
    assert out.shape == (2, 2, *sides) and out.dtype == torch.float64
    assert out.abs().max() <= 1.0  # tanh output, the image range
    assert torch.equal(out, again)  # deterministic on the CPU


@pytest.mark.parametrize("netG,sides,mentions", [
    ("resnet_6blocks_3d", (16, 24, 30), ["multiples of 4", "16x24x30", "--patch_size"]),
    ("resnet_9blocks_3d", (4, 8, 8), ["at least 8", "4x8x8"]),  # multiples of 4, too small for the blocks
    ("unet_16_3d", (32, 32, 24), ["multiples of 16", "32x32x24"]),
    ("unet_32_3d", (32, 48, 32), ["multiples of 32", "32x48x32"]),
    ("unet_64_3d", (32, 64, 64), ["at least 64", "32x64x64"]),
])
def test_3d_generators_refuse_sizes_they_cannot_translate_naming_netG(netG, sides, mentions):
    with pytest.raises(UserError) as exc:
        networks.family_of(netG).check_input_size(None, *sides)
    assert f"--netG {netG}" in str(exc.value)
    for text in mentions:
        assert text in str(exc.value)
    # ...and the generator really cannot translate such a volume to the same size.
    try:
        with torch.no_grad():
            out = generator(netG)(volume(*sides, batch=1))
    except (RuntimeError, ValueError):
        return
    assert out.shape[2:] != sides


@pytest.mark.parametrize("name,role", [("resnet_6blocks_3d", "generator"), ("unet_32_3d", "generator"),
                                       ("basic_3d", "discriminator"), ("pixel_3d", "discriminator")])
def test_3d_networks_refuse_images_and_2d_networks_are_not_ruled_for_volumes(name, role):
    with pytest.raises(UserError, match=r"takes volumes \(depth x height x width\), but got the 2-D input 64x64"):
        networks.family_of(name, role).check_input_size(None, 64, 64)
    assert networks.family_of("resnet_9blocks").size_rule(None).dims == 2


def patchgan_side(size: int, n_layers: int) -> int:
    for _ in range(n_layers):          # k4 s2 p1 convs
        size = (size + 2 - 4) // 2 + 1
    return size - 2                     # two k4 s1 p1 convs


@pytest.mark.parametrize("netD,n_layers,sides", [("basic_3d", 3, (24, 32, 48)), ("n_layers_3d", 2, (12, 16, 20)),
                                                 ("n_layers_3d", 1, (6, 10, 12))])
def test_3d_patchgan_returns_a_5d_grid_of_patch_logits(netD, n_layers, sides):
    family = networks.family_of(netD, networks.DISCRIMINATOR)
    flags = SimpleNamespace(n_layers_D=n_layers)
    family.check_input_size(flags, *sides)
    net = networks.define_D(3, 2, netD, n_layers, "batch").double()
    assert net(volume(*sides, channels=3)).shape == (2, 1, *(patchgan_side(side, n_layers) for side in sides))
    too_small = (sides[0] - 1, *sides[1:])
    with pytest.raises(UserError, match=f"--netD {netD} .*{'x'.join(map(str, too_small))}"):
        family.check_input_size(flags, *too_small)


def test_pixel_3d_discriminator_gives_one_logit_per_voxel():
    net = networks.define_D(3, 2, "pixel_3d", 3, "instance").double()
    assert net(volume(5, 7, 9, channels=3)).shape == (2, 1, 5, 7, 9)


def test_basic_3d_discriminator_judges_70_voxel_blocks():
    # Output cell (0, 0, 0) sees input voxels -23..46 along each axis, as the 2-D 70x70 PatchGAN.
    net = networks.define_D(1, 2, "basic_3d", 3, "none").double().eval()
    x = volume(48, 48, 48, batch=1)
    base = net(x)[0, 0, 0, 0, 0]
    inside, outside = x.clone(), x.clone()
    inside[..., 46, 46, 46] += 5.0
    outside[..., 47, 20, 20] += 5.0
    outside[..., 20, 20, 47] += 5.0
    assert net(inside)[0, 0, 0, 0, 0] != base
    assert torch.equal(net(outside)[0, 0, 0, 0, 0], base)


def test_3d_resnet_receptive_radius_is_how_far_the_gradient_of_one_output_voxel_reaches():
    # along the width (the same along every axis), the farthest of four neighbouring output voxels
    net = networks.define_G(1, 1, 1, "resnet_6blocks_3d", "none").double()
    reach = 0
    for position in range(76, 80):
        x = volume(8, 8, 152, batch=1).requires_grad_()
        net(x)[0, 0, 4, 4, position].backward()
        seen = (x.grad[0, 0].abs().sum((0, 1)) > 0).nonzero().flatten()
        reach = max(reach, position - seen.min().item(), seen.max().item() - position)
    assert reach == networks.family_of("resnet_6blocks_3d").receptive_radius(None) == 60

# ---------------------------------------------------------------- weights: the 2-D layout, and what they show
TWINS = ([(*pair, networks.GENERATOR) for pair in TWIN_2D.items()]
         + [("basic_3d", "basic", networks.DISCRIMINATOR), ("pixel_3d", "pixel", networks.DISCRIMINATOR)])


@pytest.mark.parametrize("net3d,net2d,role", TWINS)
@pytest.mark.parametrize("norm", ["batch", "instance"])
def test_3d_weights_have_the_2d_keys_with_one_more_kernel_dimension(net3d, net2d, role, norm):
    if role == networks.GENERATOR:
        three, two = (networks.define_G(3, 2, 2, name, norm, use_dropout=True).state_dict() for name in (net3d, net2d))
    else:
        three, two = (networks.define_D(3, 2, name, 3, norm).state_dict() for name in (net3d, net2d))
    assert list(three) == list(two)
    for key, weight in two.items():
        kernel = weight.shape[2:]
        assert three[key].shape == (weight.shape[:2] + kernel[:1] + kernel if len(kernel) == 2 else weight.shape), key


@pytest.mark.parametrize("netG,norm,dropout,upsample", [
    ("resnet_6blocks_3d", "instance", True, "transpose"), ("resnet_9blocks_3d", "batch", False, "resize"),
    ("resnet_6blocks_3d", "none", False, "transpose"), ("unet_32_3d", "batch", True, "transpose"),
    ("unet_64_3d", "instance", False, "resize"), ("unet_128_3d", "none", False, "transpose"),
])
def test_3d_weights_alone_give_back_the_generator_and_2d_families_do_not_claim_them(netG, norm, dropout, upsample):
    net = networks.define_G(3, 1, 4, netG, norm, use_dropout=dropout, upsample=upsample)
    state = net.state_dict()
    seen = networks.family_of(netG).from_weights(state)
    expected = {"netG": netG, "norm": norm, "ngf": 4, "input_nc": 3, "output_nc": 1,
                **({"no_dropout": not dropout} if netG.startswith("resnet") else {}),
                **({"upsample": "resize"} if upsample == "resize" else {})}
    assert seen == expected
    assert networks.recognise_network(state) == expected  # no other family claims them first
    for name in networks.generators():
        if name not in GENERATORS_3D:
            assert networks.family_of(name).from_weights(state) is None, name
    # the weights rebuild a network they load into
    flags = SimpleNamespace(**{"no_dropout": True, **seen})  # a U-Net's dropout has no weights to show it
    rebuilt = networks.rebuild_generator(flags, state, 3, 1)
    rebuilt.load_state_dict(state)


@pytest.mark.parametrize("netG", ["resnet_6blocks", "unet_128"])
def test_3d_families_do_not_claim_2d_weights(netG):
    state = networks.define_G(3, 3, 2, netG, "batch").state_dict()
    assert all(networks.family_of(name).from_weights(state) is None for name in GENERATORS_3D)
    assert networks.recognise_network(state)["netG"] == netG


# the layer classes a 3-D network has where its 2-D twin has each of these
IN_3D = {nn.Conv2d: nn.Conv3d, nn.ConvTranspose2d: nn.ConvTranspose3d, nn.BatchNorm2d: nn.BatchNorm3d,
         networks.ChannelsLastSafeInstanceNorm2d: nn.InstanceNorm3d, networks.ReflectionPad2d: networks.ReflectionPad3d}


@pytest.mark.parametrize("role,name_2d,name_3d", [("generator", "resnet_6blocks", "resnet_6blocks_3d"),
                                                  ("generator", "unet_128", "unet_128_3d"),
                                                  ("discriminator", "basic", "basic_3d"),
                                                  ("discriminator", "pixel", "pixel_3d")])
@pytest.mark.parametrize("norm", ["instance", "batch"])
def test_a_3d_family_builds_its_2d_twins_classes_with_3d_layers(role, name_2d, name_3d, norm):
    """One implementation per idea: the 3-D families build resnet.py's, unet.py's and patchgan.py's
    classes with `dims=3`, module for module, key for key."""
    flags = SimpleNamespace(ngf=2, ndf=2, norm=norm, no_dropout=False, upsample="transpose", n_layers_D=3,
                            init_type="normal", init_gain=0.02, deterministic=True, checkpoint_activations=True)
    def build(name: str) -> nn.Module:
        if role == "generator":
            return networks.build_generator(SimpleNamespace(**vars(flags), netG=name), 1, 2)
        return networks.build_discriminator(SimpleNamespace(**vars(flags), netD=name), 1)

    net_2d, net_3d = build(name_2d), build(name_3d)
    assert type(net_3d) is type(net_2d)
    modules_2d, modules_3d = dict(net_2d.named_modules()), dict(net_3d.named_modules())
    assert modules_2d.keys() == modules_3d.keys()
    for name, module in modules_2d.items():
        assert type(modules_3d[name]) is IN_3D.get(type(module), type(module)), name
    assert net_2d.state_dict().keys() == net_3d.state_dict().keys()
    weights = [(net_2d.state_dict()[key], value) for key, value in net_3d.state_dict().items() if value.ndim > 1]
    assert weights and all(value.ndim == flat.ndim + 1 for flat, value in weights)


# ---------------------------------------------------------------- --checkpoint_activations
@pytest.mark.parametrize("netG,sides,blocks", [("resnet_6blocks_3d", (8, 12, 16), 6), ("unet_64_3d", (64, 64, 64), 5)])
def test_checkpointed_3d_blocks_give_the_same_outputs_gradients_and_statistics(netG, sides, blocks):
    """Dropout on, batch norm in training mode: the recomputation replays the random draws and leaves
    the running statistics as one pass does (float64, 1e-12)."""
    plain = generator(netG, norm="batch", dropout=True)
    checkpointed = built_for_run(plain, netG, norm="batch", dropout=True, checkpoint_activations=True)
    # residual blocks; levels below the outermost
    assert sum(getattr(block, "recompute", False) for block in checkpointed.modules()) == blocks
    x = volume(*sides, batch=2).requires_grad_()
    results = []
    for net in (plain, checkpointed):
        x.grad = None
        torch.manual_seed(1)
        out = net(x)
        (out ** 2).mean().backward()
        results.append((out, [x.grad] + [p.grad for p in net.parameters()], list(net.buffers())))
    (out_a, grads_a, buffers_a), (out_b, grads_b, buffers_b) = results
    assert torch.allclose(out_a, out_b, rtol=0, atol=1e-12)
    assert all(torch.allclose(a, b, rtol=0, atol=1e-12) for a, b in zip(grads_a, grads_b))
    assert all(torch.equal(a, b) for a, b in zip(buffers_a, buffers_b))
    assert plain.state_dict().keys() == checkpointed.state_dict().keys()


def built_for_run(plain: nn.Module, netG: str, norm: str = "instance", dropout: bool = False, **run) -> nn.Module:
    """The network `generator(netG, norm, dropout)` built as a run with the options `run` builds it
    (e.g. deterministic=True), with `plain`'s weights."""
    flags = SimpleNamespace(netG=netG, ngf=2, norm=norm, no_dropout=not dropout, upsample="transpose",
                            init_type="normal", init_gain=0.02, **run)
    net = networks.build_generator(flags, 1, 2).double()
    net.load_state_dict(plain.state_dict())
    return net


def test_deterministic_runs_pad_volumes_with_slices_giving_the_same_output_and_gradients():
    plain = generator("resnet_6blocks_3d", norm="instance")
    sliced = built_for_run(plain, "resnet_6blocks_3d", deterministic=True)
    pads = [m for m in sliced.modules() if isinstance(m, nn.ReflectionPad3d)]
    assert pads and all(pad.sliced for pad in pads)
    assert not any(m.sliced for m in plain.modules() if isinstance(m, nn.ReflectionPad3d))
    x = volume(8, 12, 16)
    grads = []
    for net in (plain, sliced):
        out = net(x)
        (out ** 2).mean().backward()
        grads.append((out, [p.grad for p in net.parameters()]))
    assert torch.equal(grads[0][0], grads[1][0])
    assert all(torch.allclose(a, b, rtol=0, atol=1e-12) for a, b in zip(grads[0][1], grads[1][1]))


# ---------------------------------------------------------------- normalisation
@pytest.mark.parametrize("dims,batch_norm,instance_norm", [(2, nn.BatchNorm2d, nn.InstanceNorm2d),
                                                           (3, nn.BatchNorm3d, nn.InstanceNorm3d)])
def test_get_norm_layer_gives_the_norms_of_the_requested_dimensions(dims, batch_norm, instance_norm):
    instance = networks.get_norm_layer("instance", dims=dims)(8)  # 2-D: channels-last-safe (test_fast_path.py)
    assert isinstance(instance, instance_norm) and not instance.affine and not instance.track_running_stats
    assert networks.uses_bias(networks.get_norm_layer("instance", dims=dims))
    for norm in ("batch", "syncbatch"):
        layer = networks.get_norm_layer(norm, dims=dims)(8)
        assert type(layer) is batch_norm and layer.affine and layer.track_running_stats
        assert not networks.uses_bias(networks.get_norm_layer(norm, dims=dims))
    assert isinstance(networks.get_norm_layer("none", dims=dims)(8), networks.Identity)
    assert type(networks.get_norm_layer("batch")(8)) is nn.BatchNorm2d  # 2-D by default


def test_3d_networks_use_only_3d_layers_and_initialise_their_batch_norm_scales():
    nets = [networks.define_G(1, 1, 4, name, "batch", init_gain=0.1) for name in ("resnet_6blocks_3d", "unet_32_3d")]
    nets.append(networks.define_D(1, 4, "basic_3d", 3, "batch", init_gain=0.1))
    two_d = (nn.Conv2d, nn.ConvTranspose2d, nn.BatchNorm2d, nn.InstanceNorm2d, nn.ReflectionPad2d)
    for net in nets:
        assert not any(isinstance(m, two_d) for m in net.modules())
        scales = torch.cat([m.weight.detach() for m in net.modules() if isinstance(m, nn.BatchNorm3d)])
        assert scales.std().item() == pytest.approx(0.1, rel=0.5) and abs(scales.mean().item() - 1) < 0.1


def test_3d_batch_norm_nets_convert_to_the_cpu_sync_batch_norm_keeping_their_parameters():
    net = generator("resnet_6blocks_3d", norm="batch").train()
    parameters = list(net.parameters())
    x = volume(8, 8, 8)
    before = net(x)
    converted = convert_sync_batchnorm(net, torch.device("cpu"))
    norms = [m for m in converted.modules() if isinstance(m, nn.BatchNorm3d)]
    assert norms and all(type(m) is CPUSyncBatchNorm3d for m in norms)
    kept = list(converted.parameters())  # the same Parameter objects: optimizers made before stay valid
    assert len(kept) == len(parameters) and all(a is b for a, b in zip(kept, parameters))
    assert torch.equal(converted(x), before)  # one process: plain batch norm
    two_d = convert_sync_batchnorm(networks.define_G(3, 3, 2, "resnet_6blocks", "batch"), torch.device("cpu"))
    assert all(type(m) is CPUSyncBatchNorm for m in two_d.modules() if isinstance(m, nn.BatchNorm2d))


SYNC_SCRIPT = """
import sys
sys.path.insert(0, {root!r})
import torch
from torch import nn
from models.networks.sync_batchnorm import CPUSyncBatchNorm3d, convert_sync_batchnorm
from util import distributed
ctx = distributed.init_distributed("cpu")
whole = torch.randn(4, 3, 4, 5, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
weights = torch.randn(4, 3, 4, 5, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
torch.manual_seed(2)
plain = nn.BatchNorm3d(3).double()
nn.init.normal_(plain.weight)
nn.init.normal_(plain.bias)
synced = convert_sync_batchnorm(nn.Sequential(nn.BatchNorm3d(3).double()), torch.device("cpu"))[0]
assert type(synced) is CPUSyncBatchNorm3d
synced.load_state_dict(plain.state_dict())
x = whole.clone().requires_grad_()
expected = plain(x)
(expected * weights).sum().backward()
rows = slice(2 * ctx.rank, 2 * ctx.rank + 2)
mine = whole[rows].clone().requires_grad_()
out = synced(mine)
(out * weights[rows]).sum().backward()
grads = distributed.all_reduce_sum_(torch.cat([synced.weight.grad, synced.bias.grad]))
close = lambda a, b: torch.allclose(a, b, rtol=0, atol=1e-10)
assert close(out, expected[rows]) and close(mine.grad, x.grad[rows])
assert close(grads, torch.cat([plain.weight.grad, plain.bias.grad]))
assert close(synced.running_mean, plain.running_mean) and close(synced.running_var, plain.running_var)
print("rank", ctx.rank, "matches")
distributed.shutdown()
"""


@pytest.mark.slow
def test_two_processes_normalise_volumes_with_the_statistics_of_the_whole_batch(tmp_path):
    script = tmp_path / "sync3d.py"
    script.write_text(SYNC_SCRIPT.format(root=str(ROOT)))
    result = ranks(str(script), timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("matches") == 2


# ---------------------------------------------------------------- CUT
def cut_flags(**changes) -> SimpleNamespace:
    return SimpleNamespace(**{"netG": "resnet_6blocks_3d", "ngf": 2, "norm": "instance", "no_dropout": True,
                              "upsample": "transpose", "no_antialias": True, "no_antialias_up": True,
                              "isTrain": True, **changes})


def test_cut_reads_5d_features_from_the_3d_resnet_and_samples_patches_of_them():
    from models import cut_model
    from models.losses import patchnce as cut_networks
    family = networks.family_of("resnet_6blocks_3d")
    flags = cut_flags()
    layers = (0, 4, 8, 12, 16)  # CUT's default --nce_layers
    cut_model.check_generator(flags, layers)  # the family gives features
    net = family.build(flags, 1, 1).double()
    assert family.feature_layers(flags) == len(net.model) == 25
    x = volume(8, 12, 16, batch=2)
    feats = net(x, layers, encode_only=True)
    assert [f.shape for f in feats] == [(2, 1, 14, 18, 22), (2, 4, 4, 6, 8), (2, 8, 2, 3, 4), (2, 8, 2, 3, 4),
                                        (2, 4, 4, 6, 8)]  # input, downsamplings, a block, the first upsampling
    assert net(x).shape == x.shape  # the plain forward is unchanged
    with pytest.raises(UserError, match="--nce_layers"):
        cut_model.check_generator(flags, (0, 25))
    netF = cut_networks.PatchSampleF("mlp_sample", 8)
    netF.create_mlp([f.shape[1] for f in feats])
    netF.double()
    picked = netF(feats, [torch.arange(4).repeat(2, 1) for _ in feats])
    assert all(p.shape == (8, 8) and torch.allclose(p.norm(dim=1), torch.ones(8, dtype=torch.float64)) for p in picked)


def test_cuts_2d_antialiasing_is_refused_for_3d_networks_with_the_flags_to_pass():
    with pytest.raises(UserError, match="--no_antialias --no_antialias_up"):
        networks.family_of("resnet_9blocks_3d").build(cut_flags(no_antialias=False), 1, 1)
    with pytest.raises(UserError, match="no_antialias_up"):
        networks.family_of("resnet_9blocks_3d").build(cut_flags(no_antialias_up=False), 1, 1)
    for netD in ("basic_3d", "n_layers_3d", "pixel_3d"):
        family = networks.family_of(netD, networks.DISCRIMINATOR)
        assert family.check_flags(SimpleNamespace(no_antialias=False))[0] == "no_antialias"
        assert family.check_flags(SimpleNamespace(lambda_feat=10.0))[0] == "lambda_feat"
        assert family.check_flags(SimpleNamespace(no_antialias=True, lambda_feat=0.0)) is None


def test_spectral_norm_reaches_every_3d_convolution():
    net = networks.apply_spectral_norm(networks.define_D(1, 2, "basic_3d", 3, "instance"))
    convs = [m for m in net.modules() if isinstance(m, nn.Conv3d)]
    assert len(convs) == 5 and all(hasattr(m, "parametrizations") for m in convs)
