"""The networks: generator and discriminator families, and what every network shares.

`--netG NAME` and `--netD NAME` name a network family (models/networks/family.py): each built-in
family is one file here (resnet.py, unet.py, patchgan.py, patchgan_multiscale.py), and a family of
your own is a module path (`--netG mypackage.my_net`). Build networks with `build_generator` /
`build_discriminator` (from the run's options) or the reference's `define_G` / `define_D`; ask
`family_of(name)` for anything else a network knows about itself (its size rule, its shape flags,
how to rebuild it from weights). A network is built once, for the run, and stays itself: its layers
are built for --deterministic, --checkpoint_activations and CUT's antialiasing, and choose their
kernels for --channels_last and --compile themselves (models/networks/layers.py). Module structure
and parameter names follow the reference implementation exactly, so that its checkpoints load with
`strict=True` and ours in its `test.py`.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from models.losses.gan import GAN_MODES, GANLoss, cal_gradient_penalty  # noqa: F401 (the reference's networks.GANLoss)
from models.networks.family import (  # noqa: F401
    DISCRIMINATOR,
    ENCODER,
    GENERATOR,
    LATENT_CODE,
    STEP_CODE,
    TIME_INDEX,
    NetworkCall,
    NetworkFamily,
    SizeRule,
    builtin_families,
    builtin_names,
    described_inputs,
    family_name_type,
    family_of,
    recognise_network,
    volume_counterpart,
)
from models.networks.layers import (  # noqa: F401
    INIT_TYPES,
    NORMS,
    UPSAMPLINGS,
    ChannelsLastSafeInstanceNorm2d,
    Identity,
    ReflectionPad2d,
    ReflectionPad3d,
    apply_spectral_norm,
    buffers_kept,
    compile_network,
    get_norm_layer,
    has_spectral_norm,
    init_weights,
    recompute_in_backward,
    reflection_pad,
    use_resize_convolutions,
    uses_bias,
    wants_checkpointing,
    wants_sliced_pads,
)
from models.networks.patchgan import DEFAULT as DEFAULT_DISCRIMINATOR  # noqa: F401
from models.networks.patchgan import NLayerDiscriminator, PixelDiscriminator  # noqa: F401
from models.networks.patchgan_multiscale import MultiscaleDiscriminator  # noqa: F401
from models.networks.resnet import DEFAULT as DEFAULT_GENERATOR  # noqa: F401
from models.networks.resnet import ResnetBlock, ResnetGenerator  # noqa: F401
from models.networks.unet import UnetGenerator, UnetSkipConnectionBlock  # noqa: F401
from models.training.schedules import (  # noqa: F401
    LR_POLICIES,
    get_scheduler,
    policy_of_scheduler_state,
    reapply_schedule_flags,
)
from util.distributed import current_context


def generators() -> list[str]:
    """The built-in --netG names."""
    return builtin_names(GENERATOR)


def discriminators() -> list[str]:
    """The built-in --netD names."""
    return builtin_names(DISCRIMINATOR)


def family_help(role: str) -> str:
    """The --help text of --netG / --netD: what each built-in family's names mean."""
    described = dict.fromkeys(family.description for family in builtin_families()[role].values())
    return "; ".join(described) + "; or the module path of your own network family (docs/extending.md)"


def with_flags(flags: Any, **changes: Any) -> SimpleNamespace:
    """`flags` (the run's options) with some values replaced, e.g. a model's own --normD for its D."""
    return SimpleNamespace(**{**vars(flags), **changes})


def build_generator(flags: Any, input_nc: int, output_nc: int) -> nn.Module:
    """The --netG network for the options `flags`, initialised (--init_type, --init_gain), on the CPU."""
    net = family_of(flags.netG, GENERATOR).build(flags, input_nc, output_nc)
    init_weights(net, flags.init_type, flags.init_gain)
    return net


def build_discriminator(flags: Any, input_nc: int) -> nn.Module:
    """The --netD network for the options `flags`, initialised, on the CPU; with --D_spectral (a
    training flag) built with spectral normalisation on every convolution."""
    net = family_of(flags.netD, DISCRIMINATOR).build(flags, input_nc)
    init_weights(net, flags.init_type, flags.init_gain)
    if getattr(flags, "D_spectral", False):
        apply_spectral_norm(net)
    return net


def rebuild_generator(flags: Any, state: dict, input_nc: int, output_nc: int) -> nn.Module:
    """The --netG network that the saved weights `state` fit (its family may see more in them than
    the options say, e.g. CUT's blur layers), initialised as `build_generator` does; load `state` next."""
    net = family_of(flags.netG, GENERATOR).rebuild(flags, state, input_nc, output_nc)
    init_weights(net, getattr(flags, "init_type", "normal"), getattr(flags, "init_gain", 0.02))
    return net


def init_net(net: nn.Module, init_type: str = "normal", init_gain: float = 0.02,
             device: torch.device | str | None = None) -> nn.Module:
    """Compatibility face for the reference's users: `init_weights(net, init_type, init_gain)`, then `net`
    moved to `device` (default: this process's device, `current_context().device`), as our models place
    theirs; returns `net` itself."""
    init_weights(net, init_type, init_gain)
    return net.to(device if device is not None else current_context().device)


def define_G(input_nc: int, output_nc: int, ngf: int, netG: str, norm: str = "batch",
             use_dropout: bool = False, init_type: str = "normal", init_gain: float = 0.02,
             upsample: str = "transpose") -> nn.Module:
    """The reference's generator factory (its arguments), through the families."""
    flags = SimpleNamespace(netG=netG, ngf=ngf, norm=norm, no_dropout=not use_dropout, init_type=init_type,
                            init_gain=init_gain, upsample=upsample)
    return build_generator(flags, input_nc, output_nc)


def define_D(input_nc: int, ndf: int, netD: str, n_layers_D: int = 3, norm: str = "batch",
             init_type: str = "normal", init_gain: float = 0.02, num_D: int = 1) -> nn.Module:
    """The reference's discriminator factory (its arguments, and --num_D), through the families."""
    flags = SimpleNamespace(netD=netD, ndf=ndf, n_layers_D=n_layers_D, norm=norm, init_type=init_type,
                            init_gain=init_gain, num_D=num_D)
    return build_discriminator(flags, input_nc)


def size_rule(netG: str, flags: Any = None) -> SizeRule:
    """The sizes generator `netG` takes (with the run's options `flags` where they matter)."""
    return family_of(netG, GENERATOR).size_rule(flags)


def check_image_size(flags: Any, *sizes: int, discriminator: bool = True) -> None:
    """A UserError when the run's generator (and, with `discriminator`, its discriminator) cannot
    take images of these spatial sizes."""
    family_of(flags.netG, GENERATOR).check_input_size(flags, *sizes)
    if discriminator:
        family_of(flags.netD, DISCRIMINATOR).check_input_size(flags, *sizes)
