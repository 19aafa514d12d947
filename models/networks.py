"""Generators, discriminators, GAN losses, weight init and LR schedules.

Module structure and parameter names follow the reference implementation exactly
(`model.1.weight`, `model.10.conv_block.1.weight`, ...) so that its published checkpoints load
here with `strict=True` and ours load in its `test.py`. Do not reorder layers.
"""
from __future__ import annotations

import functools
import math
import sys
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn
from torch.nn import init
from torch.optim import lr_scheduler

from util import distributed
from util.errors import UserError

GENERATORS = ("resnet_9blocks", "resnet_6blocks", "unet_256", "unet_128")
DISCRIMINATORS = ("basic", "n_layers", "pixel", "multiscale")
NORMS = ("instance", "batch", "syncbatch", "none")
INIT_TYPES = ("normal", "xavier", "kaiming", "orthogonal")
GAN_MODES = ("vanilla", "lsgan", "wgangp", "hinge")
UPSAMPLINGS = ("transpose", "resize")
LR_POLICIES = ("linear", "step", "plateau", "cosine")


class Identity(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def get_norm_layer(norm_type: str = "instance") -> Callable[[int], nn.Module]:
    """A constructor `norm_layer(num_features)` for the named normalisation.

    `syncbatch` builds ordinary BatchNorm2d here: in a single process it *is* batch norm, and
    under DDP the distributed module converts it to a synchronised one (the state_dict keys
    are the same either way).
    """
    if norm_type in ("batch", "syncbatch"):
        return functools.partial(nn.BatchNorm2d, affine=True, track_running_stats=True)
    if norm_type == "instance":
        return functools.partial(nn.InstanceNorm2d, affine=False, track_running_stats=False)
    if norm_type == "none":
        return lambda num_features: Identity()
    raise UserError(f"--norm {norm_type} is not a normalisation; choose one of {', '.join(NORMS)}.")


def _uses_bias(norm_layer: Callable) -> bool:
    # Conv layers followed by batch norm need no bias (BN has its own shift); instance norm
    # without affine parameters does, which is why the reference keys depend on the norm.
    func = norm_layer.func if isinstance(norm_layer, functools.partial) else norm_layer
    return func is nn.InstanceNorm2d


def get_scheduler(optimizer: torch.optim.Optimizer, opt, first_epoch: int | None = None) -> lr_scheduler.LRScheduler:
    """The learning-rate schedule named by `--lr_policy`, stepped once per epoch.

    linear: constant for `n_epochs` epochs, then linearly towards zero over `n_epochs_decay`,
    counting from `first_epoch` (the run's first, default --epoch_count; a continued run passes the
    one it started at). step: times 0.1 every `lr_decay_iters` epochs. plateau: times 0.2 when the
    metric stalls. cosine: cosine annealing to zero over `n_epochs`.
    """
    if opt.lr_policy == "linear":
        epoch_count = opt.epoch_count if first_epoch is None else first_epoch

        def lambda_rule(epoch: int) -> float:
            return 1.0 - max(0, epoch + epoch_count - opt.n_epochs) / float(opt.n_epochs_decay + 1)
        return lr_scheduler.LambdaLR(optimizer, lr_lambda=lambda_rule)
    if opt.lr_policy == "step":
        return lr_scheduler.StepLR(optimizer, step_size=opt.lr_decay_iters, gamma=0.1)
    if opt.lr_policy == "plateau":
        return lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.2, threshold=0.01, patience=5)
    if opt.lr_policy == "cosine":
        return lr_scheduler.CosineAnnealingLR(optimizer, T_max=opt.n_epochs, eta_min=0)
    raise UserError(f"--lr_policy {opt.lr_policy} is not implemented; choose one of {', '.join(LR_POLICIES)}.")


# What only the state_dict of each policy's scheduler holds (LambdaLR, StepLR, ReduceLROnPlateau, CosineAnnealingLR).
_POLICY_STATE_KEYS = {"linear": "lr_lambdas", "step": "step_size", "plateau": "patience", "cosine": "T_max"}


def policy_of_scheduler_state(state: dict) -> str | None:
    """The --lr_policy whose scheduler saved `state` (None if it is none of ours)."""
    return next((policy for policy, key in _POLICY_STATE_KEYS.items() if key in state), None)


def reapply_schedule_flags(optimizer: torch.optim.Optimizer, scheduler, opt, saved_options: dict) -> None:
    """Make an optimizer and scheduler loaded from a training state follow this run's --lr, --beta1,
    --fused_adam, --n_epochs, --n_epochs_decay and --lr_decay_iters where they differ from
    `saved_options` (those the state was trained with), which the loaded states would otherwise
    keep. The schedule stays where it was (its epoch, a plateau's patience) and the rate becomes
    the new schedule's at that point: --lr scales every rate of the schedule. Does nothing when
    none of them changed, so that an unchanged continuation stays bit-identical."""
    keys = ("lr", "beta1", "fused_adam", "n_epochs", "n_epochs_decay", "lr_decay_iters")
    if all(saved_options.get(key, getattr(opt, key)) == getattr(opt, key) for key in keys):
        return
    scale = opt.lr / saved_options.get("lr", opt.lr)
    for group in optimizer.param_groups:
        group["betas"] = (opt.beta1, group["betas"][1])
        group["fused"] = True if opt.fused_adam else None
        if "initial_lr" in group:
            group["initial_lr"] *= scale
    if isinstance(scheduler, lr_scheduler.ReduceLROnPlateau):  # no schedule to follow: where it is, scaled
        rates = [group["lr"] * scale for group in optimizer.param_groups]
    else:
        scheduler.base_lrs = [lr * scale for lr in scheduler.base_lrs]
        epoch = scheduler.last_epoch
        if isinstance(scheduler, lr_scheduler.StepLR):
            scheduler.step_size = opt.lr_decay_iters
            rates = [lr * scheduler.gamma ** (epoch // scheduler.step_size) for lr in scheduler.base_lrs]
        elif isinstance(scheduler, lr_scheduler.CosineAnnealingLR):
            scheduler.T_max = opt.n_epochs
            turn = math.pi * epoch / max(opt.n_epochs, 1)
            low = scheduler.eta_min
            rates = [low + (lr - low) * (1 + math.cos(turn)) / 2 for lr in scheduler.base_lrs]
        else:  # linear: its rule reads this run's --n_epochs and --n_epochs_decay
            rates = [lr * rule(epoch) for lr, rule in zip(scheduler.base_lrs, scheduler.lr_lambdas)]
    for group, rate in zip(optimizer.param_groups, rates):
        group["lr"] = rate
    scheduler._last_lr = rates  # what get_last_lr() reports until the next step


def init_weights(net: nn.Module, init_type: str = "normal", init_gain: float = 0.02) -> None:
    """Initialise conv/linear weights with `init_type`; batch-norm scales around 1."""
    def init_func(m: nn.Module) -> None:
        classname = m.__class__.__name__
        if hasattr(m, "weight") and ("Conv" in classname or "Linear" in classname):
            if init_type == "normal":
                init.normal_(m.weight.data, 0.0, init_gain)
            elif init_type == "xavier":
                init.xavier_normal_(m.weight.data, gain=init_gain)
            elif init_type == "kaiming":
                init.kaiming_normal_(m.weight.data, a=0, mode="fan_in")
            elif init_type == "orthogonal":
                init.orthogonal_(m.weight.data, gain=init_gain)
            else:
                raise UserError(f"--init_type {init_type} is unknown; choose one of {', '.join(INIT_TYPES)}.")
            if getattr(m, "bias", None) is not None:
                init.constant_(m.bias.data, 0.0)
        elif "BatchNorm2d" in classname:
            init.normal_(m.weight.data, 1.0, init_gain)
            init.constant_(m.bias.data, 0.0)

    net.apply(init_func)


def define_G(input_nc: int, output_nc: int, ngf: int, netG: str, norm: str = "batch",
             use_dropout: bool = False, init_type: str = "normal", init_gain: float = 0.02,
             upsample: str = "transpose") -> nn.Module:
    """Build and initialise a generator (on the CPU; the model moves it to its device). `upsample`
    "resize" swaps its transposed convolutions for resize-convolutions (`use_resize_convolutions`)."""
    norm_layer = get_norm_layer(norm)
    if netG == "resnet_9blocks":
        net = ResnetGenerator(input_nc, output_nc, ngf, norm_layer=norm_layer, use_dropout=use_dropout, n_blocks=9)
    elif netG == "resnet_6blocks":
        net = ResnetGenerator(input_nc, output_nc, ngf, norm_layer=norm_layer, use_dropout=use_dropout, n_blocks=6)
    elif netG == "unet_128":
        net = UnetGenerator(input_nc, output_nc, 7, ngf, norm_layer=norm_layer, use_dropout=use_dropout)
    elif netG == "unet_256":
        net = UnetGenerator(input_nc, output_nc, 8, ngf, norm_layer=norm_layer, use_dropout=use_dropout)
    else:
        raise UserError(f"--netG {netG} is not a generator; choose one of {', '.join(GENERATORS)}.")
    if upsample != "transpose":
        use_resize_convolutions(net, upsample)
    init_weights(net, init_type, init_gain)
    return net


def define_D(input_nc: int, ndf: int, netD: str, n_layers_D: int = 3, norm: str = "batch",
             init_type: str = "normal", init_gain: float = 0.02, num_D: int = 1) -> nn.Module:
    """Build and initialise a discriminator: 70x70 PatchGAN (`basic`), `n_layers`, `pixel`, or
    `multiscale` (`num_D` n_layers PatchGANs, models/multiscale.py)."""
    norm_layer = get_norm_layer(norm)
    if netD == "basic":
        net = NLayerDiscriminator(input_nc, ndf, n_layers=3, norm_layer=norm_layer)
    elif netD == "n_layers":
        net = NLayerDiscriminator(input_nc, ndf, n_layers_D, norm_layer=norm_layer)
    elif netD == "pixel":
        net = PixelDiscriminator(input_nc, ndf, norm_layer=norm_layer)
    elif netD == "multiscale":  # imported here: models/multiscale.py builds on NLayerDiscriminator below
        from models.multiscale import MultiscaleDiscriminator
        net = MultiscaleDiscriminator(input_nc, ndf, n_layers_D, norm_layer, num_D)
    else:
        raise UserError(f"--netD {netD} is not a discriminator; choose one of {', '.join(DISCRIMINATORS)}.")
    init_weights(net, init_type, init_gain)
    return net


@dataclass(frozen=True)
class SizeRule:
    """The image sizes a generator translates to the same size: height and width multiples of
    `multiple`, each at least `minimum`."""

    multiple: int
    minimum: int

    def fits(self, height: int, width: int) -> bool:
        return min(height, width) >= self.minimum and height % self.multiple == 0 and width % self.multiple == 0


def size_rule(netG: str) -> SizeRule:
    """The sizes `netG` takes (KeyError for an unknown name). Resnets halve twice (multiples of 4)
    and their residual blocks' 1-pixel reflection padding needs 2 pixels at a quarter of the size,
    so 8 px at least; a U-Net halves the size once per level, down to 1 pixel."""
    multiple = {"resnet_9blocks": 4, "resnet_6blocks": 4, "unet_128": 128, "unet_256": 256}[netG]
    return SizeRule(multiple, 8 if netG.startswith("resnet") else multiple)


def check_input_size(netG: str, height: int, width: int) -> None:
    """Raise a UserError when `netG` cannot translate an image of this size."""
    multiple = size_rule(netG).multiple
    if netG.startswith("resnet") and (height < 8 or width < 8):
        raise UserError(
            f"--netG {netG} needs images of at least 8x8 pixels (multiples of 4) but got {height}x{width}; "
            f"set --crop_size (or --load_size with --preprocess none/scale_width) to 8 or more.")
    if netG.startswith("unet") and (height < multiple or width < multiple):
        raise UserError(
            f"--netG {netG} needs images of at least {multiple}x{multiple} pixels (it halves the size "
            f"{multiple.bit_length() - 1} times) but got {height}x{width}; use --crop_size {multiple} "
            f"(and --load_size >= {multiple}) or a resnet generator, which takes any multiple of 4 from 8 up.")
    if height % multiple or width % multiple:
        raise UserError(
            f"--netG {netG} needs height and width that are multiples of {multiple}, got {height}x{width}; "
            f"set --crop_size (or --load_size with --preprocess none/scale_width) to a multiple of {multiple}.")


class _GradientToContiguous(torch.autograd.Function):
    """Identity forward (to channels-last); backward hands on the gradient in contiguous layout."""

    @staticmethod
    def forward(ctx, x):
        return x.contiguous(memory_format=torch.channels_last)

    @staticmethod
    def backward(ctx, grad):
        return grad.contiguous()


class ChannelsLastSafeInstanceNorm2d(nn.InstanceNorm2d):
    """InstanceNorm2d that computes in contiguous layout inside a channels-last network.

    On the CPU (torch 2.14), instance norm's backward returns a wrong input gradient whenever
    the incoming gradient is channels-last; so the norm runs on a contiguous copy and its
    gradient arrives contiguous. Same parameters and state_dict keys as InstanceNorm2d.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _GradientToContiguous.apply(super().forward(x.contiguous()))


def make_instance_norm_channels_last_safe(net: nn.Module) -> None:
    """Swap every InstanceNorm2d in `net` for ChannelsLastSafeInstanceNorm2d, in place."""
    for module in net.modules():
        if type(module) is nn.InstanceNorm2d:
            module.__class__ = ChannelsLastSafeInstanceNorm2d


class SlicedReflectionPad2d(nn.ReflectionPad2d):
    """ReflectionPad2d built from slices, flips and a concatenation, for compiled networks and
    deterministic GPU runs (see `pad_reflections_with_slices`).

    With --compile and bf16 autocast on the CPU (torch 2.14), inductor assumes that the
    reflection_pad2d_backward kernel returns a contiguous gradient; it returns a channels-last one
    there, inductor reads it with the wrong strides, and the weights before every pad get NaN
    gradients from the first step. Built from views, the pad's backward is plain slicing and
    addition that inductor generates itself. Same output and gradient as ReflectionPad2d.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        left, right, top, bottom = self.padding
        x = torch.cat([x[..., 1:left + 1].flip(-1), x, x[..., x.shape[-1] - right - 1:-1].flip(-1)], dim=-1)
        return torch.cat([x[..., 1:top + 1, :].flip(-2), x, x[..., x.shape[-2] - bottom - 1:-1, :].flip(-2)], dim=-2)


class CompileFriendlyReflectionPad2d(SlicedReflectionPad2d):
    """SlicedReflectionPad2d while inductor traces the network, the native kernel when it runs
    eagerly: under --compile the same modules also run uncompiled (the compile probe's eager
    steps, or the whole run where compiling proved slower), and there the slices only cost time."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling():
            return super().forward(x)
        return nn.ReflectionPad2d.forward(self, x)


def compile_network(net: nn.Module, name: str) -> nn.Module:
    """torch.compile(net), or `net` itself with a message if this machine cannot compile."""
    import shutil
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not hasattr(torch, "compile") or compiler is None:
        print(f"warning: --compile needs torch.compile and a C compiler (cc/gcc); none found, so net{name} "
              f"runs uncompiled. Install gcc or drop --compile.", file=sys.stderr)
        return net
    for module in net.modules():
        if type(module) is nn.ReflectionPad2d:
            module.__class__ = CompileFriendlyReflectionPad2d
    return torch.compile(net)


def pad_reflections_with_slices(net: nn.Module) -> None:
    """Swap every ReflectionPad2d in `net` for SlicedReflectionPad2d, in place (same parameters:
    it has none). For --compile, and for --deterministic: CUDA has no deterministic kernel for
    reflection padding's backward; the slices' backward is deterministic everywhere."""
    for module in net.modules():
        if type(module) is nn.ReflectionPad2d:
            module.__class__ = SlicedReflectionPad2d


def check_discriminator_input_size(netD: str, n_layers_D: int, height: int, width: int) -> None:
    """Raise a UserError when the PatchGAN `netD` would shrink the image to nothing."""
    if netD == "pixel":
        return
    n_layers = 3 if netD == "basic" else n_layers_D
    smallest = 3 * 2 ** n_layers  # after the stride-2 layers: 3 pixels, for two more 4x4 convs
    if min(height, width) < smallest:
        raise UserError(f"--netD {netD} with {n_layers} downsampling layers needs images of at least {smallest}x{smallest} "
                        f"pixels but got {height}x{width}; use a larger --crop_size, fewer --n_layers_D with "
                        f"--netD n_layers, or --netD pixel.")


##############################################################################
# Losses
##############################################################################
class GANLoss(nn.Module):
    """The adversarial loss for `gan_mode` (lsgan: MSE, vanilla: BCE with logits, wgangp: mean,
    hinge: max(0, 1 -/+ D) for the discriminator and -D for the generator)."""

    def __init__(self, gan_mode: str, target_real_label: float = 1.0, target_fake_label: float = 0.0):
        super().__init__()
        self.register_buffer("real_label", torch.tensor(target_real_label))
        self.register_buffer("fake_label", torch.tensor(target_fake_label))
        self.gan_mode = gan_mode
        if gan_mode == "lsgan":
            self.loss = nn.MSELoss()
        elif gan_mode == "vanilla":
            self.loss = nn.BCEWithLogitsLoss()
        elif gan_mode in ("wgangp", "hinge"):
            self.loss = None
        else:
            raise UserError(f"--gan_mode {gan_mode} is unknown; choose one of {', '.join(GAN_MODES)}.")

    def get_target_tensor(self, prediction: torch.Tensor, target_is_real: bool) -> torch.Tensor:
        target = self.real_label if target_is_real else self.fake_label
        return target.to(prediction.dtype).expand_as(prediction)

    def forward(self, prediction: torch.Tensor, target_is_real: bool, for_discriminator: bool = True) -> torch.Tensor:
        """The loss of `prediction` (D's output) for the label `target_is_real`. Only the hinge loss
        tells the two players apart: the generator's step passes `for_discriminator=False`."""
        if self.gan_mode == "hinge":
            if not for_discriminator:  # the generator raises D's score without a margin (Lim & Ye 2017)
                return -prediction.mean()
            return torch.relu(1 - prediction).mean() if target_is_real else torch.relu(1 + prediction).mean()
        if self.gan_mode == "wgangp":
            return -prediction.mean() if target_is_real else prediction.mean()
        return self.loss(prediction, self.get_target_tensor(prediction, target_is_real))


def cal_gradient_penalty(netD: nn.Module, real_data: torch.Tensor, fake_data: torch.Tensor,
                         type: str = "mixed", constant: float = 1.0, lambda_gp: float = 10.0):
    """WGAN-GP gradient penalty; returns (penalty, gradients) as the reference does."""
    if lambda_gp <= 0.0:
        return 0.0, None
    if type == "real":
        interpolates = real_data
    elif type == "fake":
        interpolates = fake_data
    elif type == "mixed":
        alpha = _interpolation_weights(real_data.shape[0], real_data.device)
        alpha = alpha.expand(real_data.shape[0], real_data.nelement() // real_data.shape[0])
        alpha = alpha.contiguous().view(*real_data.shape)
        interpolates = alpha * real_data + (1 - alpha) * fake_data
    else:
        raise ValueError(f"gradient penalty type {type} is not one of real, fake, mixed")
    interpolates = interpolates.detach().requires_grad_(True)
    disc_interpolates = netD(interpolates)
    gradients = torch.autograd.grad(outputs=disc_interpolates, inputs=interpolates,
                                    grad_outputs=torch.ones_like(disc_interpolates),
                                    create_graph=True, retain_graph=True, only_inputs=True)[0]
    gradients = gradients.reshape(real_data.size(0), -1)  # channels-last gradients (--channels_last) cannot be viewed
    penalty = (((gradients + 1e-16).norm(2, dim=1) - constant) ** 2).mean() * lambda_gp
    return penalty, gradients


def _interpolation_weights(count: int, device: torch.device) -> torch.Tensor:
    """`count` x 1 uniform weights for this process's samples, the ones one process with the whole
    global batch would draw for them: under DDP rank 0's draws, shared, each rank taking its own."""
    world = distributed.world_size()
    weights = distributed.broadcast_tensor(torch.rand(count * world, 1, device=device))
    return weights[distributed.global_batch_positions(count)]


##############################################################################
# Generators
##############################################################################
class ResnetGenerator(nn.Module):
    """Downsample twice, `n_blocks` residual blocks, upsample twice (Johnson et al.)."""

    def __init__(self, input_nc: int, output_nc: int, ngf: int = 64, norm_layer=nn.BatchNorm2d,
                 use_dropout: bool = False, n_blocks: int = 6, padding_type: str = "reflect"):
        assert n_blocks >= 0
        super().__init__()
        use_bias = _uses_bias(norm_layer)
        model = [nn.ReflectionPad2d(3),
                 nn.Conv2d(input_nc, ngf, kernel_size=7, padding=0, bias=use_bias),
                 norm_layer(ngf), nn.ReLU(True)]
        n_downsampling = 2
        for i in range(n_downsampling):
            mult = 2 ** i
            model += [nn.Conv2d(ngf * mult, ngf * mult * 2, kernel_size=3, stride=2, padding=1, bias=use_bias),
                      norm_layer(ngf * mult * 2), nn.ReLU(True)]
        mult = 2 ** n_downsampling
        for _ in range(n_blocks):
            model += [ResnetBlock(ngf * mult, padding_type=padding_type, norm_layer=norm_layer,
                                  use_dropout=use_dropout, use_bias=use_bias)]
        for i in range(n_downsampling):
            mult = 2 ** (n_downsampling - i)
            model += [nn.ConvTranspose2d(ngf * mult, int(ngf * mult / 2), kernel_size=3, stride=2,
                                         padding=1, output_padding=1, bias=use_bias),
                      norm_layer(int(ngf * mult / 2)), nn.ReLU(True)]
        model += [nn.ReflectionPad2d(3), nn.Conv2d(ngf, output_nc, kernel_size=7, padding=0), nn.Tanh()]
        self.model = nn.Sequential(*model)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.model(input)


class ResnetBlock(nn.Module):
    """conv-norm-relu-(dropout)-conv-norm with a skip connection."""

    def __init__(self, dim: int, padding_type: str, norm_layer, use_dropout: bool, use_bias: bool):
        super().__init__()
        self.conv_block = self.build_conv_block(dim, padding_type, norm_layer, use_dropout, use_bias)

    @staticmethod
    def _padding(padding_type: str) -> tuple[list[nn.Module], int]:
        if padding_type == "reflect":
            return [nn.ReflectionPad2d(1)], 0
        if padding_type == "replicate":
            return [nn.ReplicationPad2d(1)], 0
        if padding_type == "zero":
            return [], 1
        raise NotImplementedError(f"padding {padding_type} is not implemented")

    def build_conv_block(self, dim, padding_type, norm_layer, use_dropout, use_bias) -> nn.Sequential:
        pad, p = self._padding(padding_type)
        conv_block = pad + [nn.Conv2d(dim, dim, kernel_size=3, padding=p, bias=use_bias), norm_layer(dim), nn.ReLU(True)]
        if use_dropout:
            conv_block += [nn.Dropout(0.5)]
        pad, p = self._padding(padding_type)
        conv_block += pad + [nn.Conv2d(dim, dim, kernel_size=3, padding=p, bias=use_bias), norm_layer(dim)]
        return nn.Sequential(*conv_block)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv_block(x)


class UnetGenerator(nn.Module):
    """U-Net with `num_downs` halvings: a 2**num_downs input becomes 1x1 at the bottleneck."""

    def __init__(self, input_nc: int, output_nc: int, num_downs: int, ngf: int = 64,
                 norm_layer=nn.BatchNorm2d, use_dropout: bool = False):
        super().__init__()
        # Built from the innermost block outwards.
        unet_block = UnetSkipConnectionBlock(ngf * 8, ngf * 8, input_nc=None, submodule=None,
                                             norm_layer=norm_layer, innermost=True)
        for _ in range(num_downs - 5):
            unet_block = UnetSkipConnectionBlock(ngf * 8, ngf * 8, input_nc=None, submodule=unet_block,
                                                 norm_layer=norm_layer, use_dropout=use_dropout)
        unet_block = UnetSkipConnectionBlock(ngf * 4, ngf * 8, input_nc=None, submodule=unet_block, norm_layer=norm_layer)
        unet_block = UnetSkipConnectionBlock(ngf * 2, ngf * 4, input_nc=None, submodule=unet_block, norm_layer=norm_layer)
        unet_block = UnetSkipConnectionBlock(ngf, ngf * 2, input_nc=None, submodule=unet_block, norm_layer=norm_layer)
        self.model = UnetSkipConnectionBlock(output_nc, ngf, input_nc=input_nc, submodule=unet_block,
                                             outermost=True, norm_layer=norm_layer)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.model(input)


class UnetSkipConnectionBlock(nn.Module):
    """One U-Net level: down, the inner levels, up, concatenated with the input (skip)."""

    def __init__(self, outer_nc: int, inner_nc: int, input_nc: int | None = None, submodule=None,
                 outermost: bool = False, innermost: bool = False, norm_layer=nn.BatchNorm2d,
                 use_dropout: bool = False):
        super().__init__()
        self.outermost = outermost
        use_bias = _uses_bias(norm_layer)
        if input_nc is None:
            input_nc = outer_nc
        downconv = nn.Conv2d(input_nc, inner_nc, kernel_size=4, stride=2, padding=1, bias=use_bias)
        downrelu = nn.LeakyReLU(0.2, True)
        downnorm = norm_layer(inner_nc)
        uprelu = nn.ReLU(True)
        upnorm = norm_layer(outer_nc)
        if outermost:
            upconv = nn.ConvTranspose2d(inner_nc * 2, outer_nc, kernel_size=4, stride=2, padding=1)
            model = [downconv, submodule, uprelu, upconv, nn.Tanh()]
        elif innermost:
            upconv = nn.ConvTranspose2d(inner_nc, outer_nc, kernel_size=4, stride=2, padding=1, bias=use_bias)
            model = [downrelu, downconv, uprelu, upconv, upnorm]
        else:
            upconv = nn.ConvTranspose2d(inner_nc * 2, outer_nc, kernel_size=4, stride=2, padding=1, bias=use_bias)
            model = [downrelu, downconv, downnorm, submodule, uprelu, upconv, upnorm]
            if use_dropout:
                model += [nn.Dropout(0.5)]
        self.model = nn.Sequential(*model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.outermost:
            return self.model(x)
        return torch.cat([x, self.model(x)], 1)


##############################################################################
# Discriminators
##############################################################################
class NLayerDiscriminator(nn.Module):
    """PatchGAN: a grid of real/fake logits, each judging an overlapping image patch."""

    def __init__(self, input_nc: int, ndf: int = 64, n_layers: int = 3, norm_layer=nn.BatchNorm2d):
        super().__init__()
        use_bias = _uses_bias(norm_layer)
        kw, padw = 4, 1
        sequence = [nn.Conv2d(input_nc, ndf, kernel_size=kw, stride=2, padding=padw), nn.LeakyReLU(0.2, True)]
        nf_mult = 1
        for n in range(1, n_layers):
            nf_mult_prev, nf_mult = nf_mult, min(2 ** n, 8)
            sequence += [nn.Conv2d(ndf * nf_mult_prev, ndf * nf_mult, kernel_size=kw, stride=2, padding=padw, bias=use_bias),
                         norm_layer(ndf * nf_mult), nn.LeakyReLU(0.2, True)]
        nf_mult_prev, nf_mult = nf_mult, min(2 ** n_layers, 8)
        sequence += [nn.Conv2d(ndf * nf_mult_prev, ndf * nf_mult, kernel_size=kw, stride=1, padding=padw, bias=use_bias),
                     norm_layer(ndf * nf_mult), nn.LeakyReLU(0.2, True)]
        sequence += [nn.Conv2d(ndf * nf_mult, 1, kernel_size=kw, stride=1, padding=padw)]
        self.model = nn.Sequential(*sequence)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.model(input)


class PixelDiscriminator(nn.Module):
    """1x1 PatchGAN: a real/fake logit per pixel."""

    def __init__(self, input_nc: int, ndf: int = 64, norm_layer=nn.BatchNorm2d):
        super().__init__()
        use_bias = _uses_bias(norm_layer)
        self.net = nn.Sequential(
            nn.Conv2d(input_nc, ndf, kernel_size=1, stride=1, padding=0),
            nn.LeakyReLU(0.2, True),
            nn.Conv2d(ndf, ndf * 2, kernel_size=1, stride=1, padding=0, bias=use_bias),
            norm_layer(ndf * 2),
            nn.LeakyReLU(0.2, True),
            nn.Conv2d(ndf * 2, 1, kernel_size=1, stride=1, padding=0, bias=use_bias))

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.net(input)


##############################################################################
# Stabilisers (issue 21): resize-convolution upsampling, spectral normalisation
##############################################################################
def use_resize_convolutions(net: nn.Module, upsample: str = "resize") -> None:
    """Replace every 2x ConvTranspose2d in `net` by nearest-neighbour upsampling followed by a 3x3
    convolution (Odena et al. 2016, "Deconvolution and checkerboard artifacts"), in place. A
    transposed convolution whose kernel is not divisible by its stride overlaps unevenly and paints
    a checkerboard; resizing first spreads every input pixel evenly. Same output size and channels;
    the weights are new (`<layer>.1.weight`), so initialise after calling this."""
    if upsample not in UPSAMPLINGS:
        raise UserError(f"--upsample {upsample} is unknown; choose one of {', '.join(UPSAMPLINGS)}.")
    for parent in list(net.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.ConvTranspose2d) and child.stride == (2, 2):
                resize = nn.Sequential(nn.Upsample(scale_factor=2, mode="nearest"),
                                       nn.Conv2d(child.in_channels, child.out_channels, kernel_size=3, padding=1,
                                                 bias=child.bias is not None))
                setattr(parent, name, resize)


def apply_spectral_norm(net: nn.Module) -> nn.Module:
    """Spectral normalisation (Miyato et al. 2018) on every convolution of `net`, in place, with
    PyTorch's parametrization: each weight is divided by its largest singular value (one power
    iteration per training forward), which bounds how fast the discriminator can change. The
    Parameter objects stay the same (an optimizer made before keeps working); the state_dict keys
    become `<layer>.parametrizations.weight.original` plus the power iteration's `...weight.0._u`
    and `...weight.0._v`."""
    from torch.nn.utils.parametrizations import spectral_norm
    for module in list(net.modules()):
        if isinstance(module, (nn.Conv2d, nn.ConvTranspose2d)):
            spectral_norm(module)
    return net
