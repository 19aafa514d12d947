"""Building blocks every network family shares: normalisation, weight initialisation, and the
in-place swaps the run applies to any network (channels-last-safe instance norm, reflection pads
built from slices, compilation, resize-convolutions, spectral normalisation)."""
from __future__ import annotations

import functools
import re
import sys
from typing import Any, Callable, Mapping

import torch
from torch import nn
from torch.nn import init

from util.errors import UserError

NORMS = ("instance", "batch", "syncbatch", "none")
INIT_TYPES = ("normal", "xavier", "kaiming", "orthogonal")
UPSAMPLINGS = ("transpose", "resize")


class Identity(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


# The batch and instance norm classes for 2-D images and 3-D volumes (`get_norm_layer`'s `dims`)
_NORM_CLASSES = {2: (nn.BatchNorm2d, nn.InstanceNorm2d), 3: (nn.BatchNorm3d, nn.InstanceNorm3d)}


def get_norm_layer(norm_type: str = "instance", dims: int = 2) -> Callable[[int], nn.Module]:
    """A constructor `norm_layer(num_features)` for the named normalisation, of images (`dims` 2)
    or volumes (`dims` 3: the 3-D families).

    `syncbatch` builds ordinary batch norm here: in a single process it *is* batch norm, and
    under DDP the distributed module converts it to a synchronised one (the state_dict keys
    are the same either way; models/sync_batchnorm.py converts 2-D and 3-D ones).
    """
    if dims not in _NORM_CLASSES:
        raise ValueError(f"normalisation layers exist for 2 or 3 spatial dimensions, not {dims}")
    batch_norm, instance_norm = _NORM_CLASSES[dims]
    if norm_type in ("batch", "syncbatch"):
        return functools.partial(batch_norm, affine=True, track_running_stats=True)
    if norm_type == "instance":
        return functools.partial(instance_norm, affine=False, track_running_stats=False)
    if norm_type == "none":
        return lambda num_features: Identity()
    raise UserError(f"--norm {norm_type} is not a normalisation; choose one of {', '.join(NORMS)}.")


def uses_bias(norm_layer: Callable) -> bool:
    # Conv layers followed by batch norm need no bias (BN has its own shift); instance norm
    # without affine parameters does, which is why the reference keys depend on the norm.
    func = norm_layer.func if isinstance(norm_layer, functools.partial) else norm_layer
    return func in (nn.InstanceNorm2d, nn.InstanceNorm3d)



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
        elif "BatchNorm2d" in classname or "BatchNorm3d" in classname:
            init.normal_(m.weight.data, 1.0, init_gain)
            init.constant_(m.bias.data, 0.0)

    net.apply(init_func)


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


class SlicedReflectionPad3d(nn.ReflectionPad3d):
    """ReflectionPad3d built from slices, flips and concatenations, for --deterministic runs of the
    3-D families: CUDA has no deterministic kernel for reflection_pad3d's backward either. Same
    output and gradient as ReflectionPad3d."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for dim, (before, after) in zip((-1, -2, -3), zip(self.padding[::2], self.padding[1::2])):
            side = x.shape[dim]
            x = torch.cat([x.narrow(dim, 1, before).flip(dim), x,
                           x.narrow(dim, side - after - 1, after).flip(dim)], dim=dim)
        return x


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
    reflection padding's backward; the slices' backward is deterministic everywhere. The 3-D
    families' ReflectionPad3d likewise (SlicedReflectionPad3d)."""
    for module in net.modules():
        if type(module) is nn.ReflectionPad2d:
            module.__class__ = SlicedReflectionPad2d
        elif type(module) is nn.ReflectionPad3d:
            module.__class__ = SlicedReflectionPad3d


def use_resize_convolutions(net: nn.Module, upsample: str = "resize") -> None:
    """Replace every 2x ConvTranspose2d in `net` by nearest-neighbour upsampling followed by a 3x3
    convolution (Odena et al. 2016, "Deconvolution and checkerboard artifacts"), in place (and every
    2x ConvTranspose3d of a 3-D family by upsampling and a 3x3x3 convolution). A
    transposed convolution whose kernel is not divisible by its stride overlaps unevenly and paints
    a checkerboard; resizing first spreads every input pixel evenly. Same output size and channels;
    the weights are new (`<layer>.1.weight`), so initialise after calling this."""
    if upsample not in UPSAMPLINGS:
        raise UserError(f"--upsample {upsample} is unknown; choose one of {', '.join(UPSAMPLINGS)}.")
    for parent in list(net.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.ConvTranspose2d) and child.stride == (2, 2):
                conv = nn.Conv2d
            elif isinstance(child, nn.ConvTranspose3d) and child.stride == (2, 2, 2):
                conv = nn.Conv3d
            else:
                continue
            resize = nn.Sequential(nn.Upsample(scale_factor=2, mode="nearest"),
                                   conv(child.in_channels, child.out_channels, kernel_size=3, padding=1,
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
        if isinstance(module, (nn.Conv2d, nn.ConvTranspose2d, nn.Conv3d, nn.ConvTranspose3d)):
            spectral_norm(module)
    return net


def has_spectral_norm(net: nn.Module) -> bool:
    """Whether `apply_spectral_norm` has been applied to `net` (a convolution's weight is parametrized)."""
    from torch.nn.utils import parametrize
    return any(parametrize.is_parametrized(module, "weight") for module in net.modules())


def norm_seen(state: Mapping[str, Any], first_conv: str) -> str:
    """Convs before instance norm have a bias; before batch norm they do not (uses_bias)."""
    if f"{first_conv}.bias" in state:
        return "instance"
    return "batch" if any(key.endswith(".running_mean") for key in state) else "none"


def resize_seen(state: Mapping[str, Any]) -> dict:
    """--upsample resize puts a Sequential(upsampling, conv) where a transposed convolution was."""
    return {"upsample": "resize"} if any(re.fullmatch(r"(model\.)+\d+\.1\.weight", key) for key in state) else {}


def check_volume_size(network: str, multiple: int, minimum: int, sizes: tuple[int, ...]) -> None:
    """A UserError unless `sizes` are the three sides of a volume (depth, height, width), each a
    multiple of `multiple` and at least `minimum` voxels: the 3-D families' `check_input_size`
    (`network`: the flag and name, e.g. "--netG unet_32_3d")."""
    shown = "x".join(map(str, sizes))
    if len(sizes) != 3:
        raise UserError(f"{network} takes volumes (depth x height x width), but got the {len(sizes)}-D input "
                        f"{shown}; use a 2-D network for images, or a volume dataset for it.")
    if min(sizes) < minimum or any(size % multiple for size in sizes):
        raise UserError(f"{network} needs volumes whose sides are multiples of {multiple} and at least {minimum} "
                        f"voxels, but got {shown}; set --patch_size to a size that fits (e.g. "
                        f"{max(minimum, 2 * multiple)}).")
