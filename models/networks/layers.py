"""Building blocks every network family shares: normalisation, padding, weight initialisation, blocks
that recompute their activations, and what a run does to any network (compilation,
resize-convolutions, spectral normalisation). CUT's blur layers are in blur.py.

A network is built once and stays itself: a layer that must act differently in some runs is built
that way or decides for itself. A family (a built-in one or your own) gets this by building with
these layers:
  - `get_norm_layer("instance")` builds ChannelsLastSafeInstanceNorm2d, right for channels-last
    inputs (--channels_last) and nn.InstanceNorm2d's computation otherwise;
  - `reflection_pad(padding, dims, sliced=wants_sliced_pads(flags))` pads with slices under
    --deterministic, and (2-D) while torch.compile traces it;
  - a block whose forward calls `recompute_in_backward` when built so
    (`wants_checkpointing(flags)`) keeps only its input under --checkpoint_activations.
"""
from __future__ import annotations

import functools
import logging
import re
from contextlib import contextmanager, nullcontext
from typing import Any, Callable, Iterator, Mapping

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn import init
from torch.utils.checkpoint import checkpoint

from util.errors import UserError

logger = logging.getLogger(__name__)

NORMS = ("instance", "batch", "syncbatch", "none")
INIT_TYPES = ("normal", "xavier", "kaiming", "orthogonal")
UPSAMPLINGS = ("transpose", "resize")


class Identity(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


# ------------------------------------------------------------------ layers that choose their kernel
def wants_sliced_pads(flags: Any) -> bool:
    """Whether the run's options ask for reflection pads built from slices (--deterministic)."""
    return bool(getattr(flags, "deterministic", False))


def wants_checkpointing(flags: Any) -> bool:
    """Whether the run's options ask blocks to recompute their activations in backward
    (--checkpoint_activations, a training flag: absent in test options and architecture.json)."""
    return bool(getattr(flags, "checkpoint_activations", False))


class _GradientToContiguous(torch.autograd.Function):
    """Identity forward (to channels-last); backward hands on the gradient in contiguous layout."""

    @staticmethod
    def forward(ctx, x):
        return x.contiguous(memory_format=torch.channels_last)

    @staticmethod
    def backward(ctx, grad):
        return grad.contiguous()


def _channels_last(x: torch.Tensor) -> bool:
    # Only tensors whose layout says channels-last; those that are both (one channel, or one pixel)
    # lay out their memory the same either way.
    return x.dim() == 4 and not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last)


class ChannelsLastSafeInstanceNorm2d(nn.InstanceNorm2d):
    """The InstanceNorm2d that `get_norm_layer("instance")` builds: right for channels-last inputs too.

    On the CPU (torch 2.14), instance norm's backward returns a wrong input gradient whenever the
    incoming gradient is channels-last and the batch holds one image; so a channels-last input
    (--channels_last) is normalised as a contiguous copy whose gradient arrives contiguous, and the
    output is channels-last again. Any other input is normalised exactly as nn.InstanceNorm2d does.
    Same parameters and state_dict keys as InstanceNorm2d; TorchScript scripts the plain path.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.jit.is_scripting():  # a branch of its own: TorchScript compiles only the last line
            if _channels_last(x):
                return _GradientToContiguous.apply(nn.InstanceNorm2d.forward(self, x.contiguous()))
            return nn.InstanceNorm2d.forward(self, x)
        # scripted (exported) networks take batches: nn.InstanceNorm2d's computation for them
        return F.instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                               self.training or not self.track_running_stats,
                               self.momentum if self.momentum is not None else 0.0, self.eps)


# The batch and instance norm classes for 2-D images and 3-D volumes (`get_norm_layer`'s `dims`). The
# 3-D instance norm is torch's: the channels-last gradient defect was seen in 2-D only.
_NORM_CLASSES = {2: (nn.BatchNorm2d, ChannelsLastSafeInstanceNorm2d), 3: (nn.BatchNorm3d, nn.InstanceNorm3d)}


def get_norm_layer(norm_type: str = "instance", dims: int = 2) -> Callable[[int], nn.Module]:
    """A constructor `norm_layer(num_features)` for the named normalisation, of images (`dims` 2)
    or volumes (`dims` 3: the 3-D families).

    `syncbatch` builds ordinary batch norm here: in a single process it *is* batch norm, and
    under DDP the distributed module converts it to a synchronised one (the state_dict keys
    are the same either way; models/networks/sync_batchnorm.py converts 2-D and 3-D ones).
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
    return isinstance(func, type) and issubclass(func, (nn.InstanceNorm2d, nn.InstanceNorm3d))


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


def reflect_with_slices(x: torch.Tensor, padding: tuple[int, ...]) -> torch.Tensor:
    """Reflection padding (`padding` in F.pad's order: last dimension first, before and after) built
    from slices, flips and concatenations: same output and gradient as the native kernel, and a
    backward of plain slicing and addition, deterministic everywhere and generated by inductor itself."""
    for axis in range(len(padding) // 2):
        dim, before, after = -1 - axis, padding[2 * axis], padding[2 * axis + 1]
        side = x.shape[dim]
        x = torch.cat([x.narrow(dim, 1, before).flip(dim), x, x.narrow(dim, side - after - 1, after).flip(dim)],
                      dim=dim)
    return x


def _compiling() -> bool:
    # torch.compile traces it; not torch.export (ONNX export), whose graph keeps the native pad
    return torch.compiler.is_compiling() and not torch.compiler.is_exporting()


class ReflectionPad2d(nn.ReflectionPad2d):
    """nn.ReflectionPad2d that picks its kernel: built `sliced` (--deterministic: CUDA has no
    deterministic kernel for reflection padding's backward) it always pads with slices
    (`reflect_with_slices`); otherwise with slices while torch.compile traces it and with the native
    kernel when it runs eagerly.

    With --compile and bf16 autocast on the CPU, inductor (torch 2.14, as first seen) read the
    gradient of the native pad's backward with the wrong strides, and the weights before every pad got
    NaN gradients; from slices the backward is code inductor generates itself. Under --compile the same modules also run
    eagerly (the compile probe's eager steps, or a run that found compiling slower), where the
    slices would only cost time. Same output and gradient either way; no parameters.
    """

    def __init__(self, padding: int | tuple[int, int, int, int], sliced: bool = False) -> None:
        super().__init__(padding)
        self.sliced = sliced

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.jit.is_scripting():  # scripted (exported) networks pad natively: same output
            if self.sliced or _compiling():
                return reflect_with_slices(x, self.padding)
        return F.pad(x, self.padding, "reflect")


class ReflectionPad3d(nn.ReflectionPad3d):
    """nn.ReflectionPad3d built from slices when built `sliced` (--deterministic: CUDA has no
    deterministic kernel for reflection_pad3d's backward either), the native kernel otherwise, also
    when compiled (inductor's defect concerned the 2-D pad). Same output and gradient either way."""

    def __init__(self, padding: int | tuple[int, ...], sliced: bool = False) -> None:
        super().__init__(padding)
        self.sliced = sliced

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.jit.is_scripting():
            if self.sliced:
                return reflect_with_slices(x, self.padding)
        return F.pad(x, self.padding, "reflect")


def reflection_pad(padding: int, dims: int = 2, sliced: bool = False) -> nn.Module:
    """A reflection pad of images (`dims` 2) or volumes (3) that pads with slices where the run
    needs it (`sliced`: `wants_sliced_pads(flags)`; see ReflectionPad2d)."""
    return (ReflectionPad2d if dims == 2 else ReflectionPad3d)(padding, sliced=sliced)


def convolutions(dims: int) -> tuple[type[nn.Module], type[nn.Module]]:
    """(convolution, transposed convolution) classes of images (`dims` 2) or volumes (3)."""
    if dims not in _NORM_CLASSES:
        raise ValueError(f"convolutions exist here for 2 or 3 spatial dimensions, not {dims}")
    return (nn.Conv2d, nn.ConvTranspose2d) if dims == 2 else (nn.Conv3d, nn.ConvTranspose3d)


def replication_pad(padding: int, dims: int = 2) -> nn.Module:
    return nn.ReplicationPad2d(padding) if dims == 2 else nn.ReplicationPad3d(padding)


# ------------------------------------------------------------------ --checkpoint_activations
@contextmanager
def buffers_kept(*nets: nn.Module) -> Iterator[None]:
    """Within the block the networks' buffers may change (batch-norm running statistics of a forward
    pass that is repeated later); afterwards they are as they were."""
    kept = [[buffer.clone() for buffer in net.buffers()] for net in nets]
    try:
        yield
    finally:
        with torch.no_grad():
            for net, saved in zip(nets, kept):
                for value, buffer in zip(saved, net.buffers()):
                    buffer.copy_(value)


def recompute_in_backward(module: nn.Module, function: Callable[[torch.Tensor], torch.Tensor],
                          x: torch.Tensor) -> torch.Tensor:
    """`function(x)` keeping only `x` and recomputing its activations in the backward pass
    (torch.utils.checkpoint), when gradients are on; for the blocks a family builds to recompute
    under --checkpoint_activations. Same output and gradients: the recomputation replays the
    forward pass's random draws (dropout), and the buffers of `module` (batch-norm running
    statistics) are restored after it, so they are updated once per step. Without gradients
    (validation, test.py) it is `function(x)`."""
    if not torch.is_grad_enabled():
        return function(x)
    return checkpoint(function, x, use_reentrant=False, preserve_rng_state=True,
                      context_fn=lambda: (nullcontext(), buffers_kept(module)))


# ------------------------------------------------------------------ what a run does to any network
def compile_network(net: nn.Module, name: str, cuda_graphs: bool = False) -> nn.Module:
    """torch.compile(net), or `net` itself with a message if this machine cannot compile. The
    network's own layers need nothing else (ReflectionPad2d slices while traced). With `cuda_graphs`,
    inductor's "reduce-overhead" mode: each forward and backward is recorded once per input shape as a
    CUDA graph and replayed by one launch (a CUDA device only: on the CPU the mode compiles as the default
    one). Its outputs live in memory the next replay reuses: the caller marks each training step's
    start (torch.compiler.cudagraph_mark_step_begin) and copies what it keeps longer."""
    import shutil
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not hasattr(torch, "compile") or compiler is None:
        logger.warning(f"--compile needs torch.compile and a C compiler (cc/gcc); none found, so net{name} "
                       f"runs uncompiled. Install gcc or drop --compile.")
        return net
    return torch.compile(net, mode="reduce-overhead" if cuda_graphs else None)


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
                        f"voxels, but got {shown}; set --patch_size to a size that fits, e.g. --patch_size "
                        f"{fitting_patch(sizes, multiple, minimum)}.")


def fitting_patch(sides: tuple[int, ...], multiple: int, minimum: int) -> str:
    """A --patch_size value (one number for a cube, else D,H,W) that a network taking sides that are multiples
    of `multiple` and at least `minimum` takes: each of `sides` rounded down to a multiple, so that a patch that
    fitted the volumes still fits them (a larger one may not: a 24-slice volume takes no 32-voxel patch), and
    raised to `minimum` only where it must be."""
    fitted = [max(minimum, side // multiple * multiple) for side in sides]
    if minimum % multiple:
        fitted = [-(-side // multiple) * multiple for side in fitted]
    return str(fitted[0]) if len(set(fitted)) == 1 else ",".join(map(str, fitted))
