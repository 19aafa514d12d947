"""What each operation of a generator needs to compute its result over one region (a box of output positions):
the region of each input it reads, and how.

Four kinds, by what the region of the output depends on:

- POINTWISE: the same region of every input (activations, arithmetic, concatenation along channels, batch norm
  with its running statistics, a per-channel mean); constants broadcast.
- WINDOW: a window around it, mapped by the layer's geometry (convolutions and transposed convolutions with any
  stride, dilation and groups, every padding mode, crops, nearest upsampling by a whole factor). Positions outside
  the input are filled as the layer would fill them (zeros, reflection, replication, wrap-around).
- NORM: the same region, plus statistics over the whole map (instance norm; batch norm in training mode or without
  running statistics; group norm), gathered by the executor before anything reads it.
- WHOLE: the whole input, in memory (dropout in training mode, whose random draws follow the order of the whole
  forward; any operation not known here). The executor refuses it when the whole input exceeds the budget.

A box is a tuple of (start, stop) per spatial dimension; a tensor's spatial dimensions are its last `len(box)`.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch import nn

Box = tuple[tuple[int, int], ...]
POINTWISE, WINDOW, NORM, WHOLE = "pointwise", "window", "norm", "whole"

_POINTWISE_MODULES = (nn.ReLU, nn.LeakyReLU, nn.Tanh, nn.Sigmoid, nn.SiLU, nn.GELU, nn.ELU, nn.Hardtanh, nn.ReLU6,
                      nn.Softplus, nn.PReLU, nn.Identity, nn.Mish, nn.Hardswish)
_POINTWISE_FUNCTIONS = {operator.add, operator.sub, operator.mul, operator.truediv, operator.neg, operator.pow,
                        torch.add, torch.sub, torch.mul, torch.div, torch.tanh, torch.sigmoid, torch.relu,
                        torch.rsqrt, torch.sqrt, torch.exp, torch.abs, torch.clamp, torch.where, F.relu,
                        F.leaky_relu, F.gelu, F.silu, F.elu, F.hardtanh, F.softplus, torch.nn.functional.tanh,
                        torch.nn.functional.sigmoid}
_POINTWISE_METHODS = {"add", "sub", "mul", "div", "pow", "tanh", "sigmoid", "relu", "clamp", "clamp_", "neg", "abs",
                      "sqrt", "rsqrt", "exp", "to", "float", "double", "half", "bfloat16", "type_as", "contiguous",
                      "add_", "mul_", "relu_"}
_CHANNEL_FUNCTIONS = {torch.cat: "dim", torch.mean: "dim", torch.sum: "dim", torch.chunk: "dim", torch.split: "dim",
                      F.softmax: "dim"}
_CHANNEL_METHODS = {"mean", "sum", "chunk", "split", "softmax"}


@dataclass
class Rule:
    """How one operation computes a region: `kind` (see the module docstring); for WINDOW, `reads(box, size)`
    gives the input range to read along each dimension (it may reach outside the input), `fill` how positions
    outside are filled, and `compute(region, box, read)` the output region from the read input region."""

    kind: str
    reads: Callable[[Box, tuple[int, ...]], Box] | None = None
    fill: str = "zeros"
    fill_value: float = 0.0
    compute: Callable[[torch.Tensor, Box, Box], torch.Tensor] | None = None


def rule_for(node: fx.Node, module: nn.Module | None, spatial_dims: int, constant: Callable[[Any], Any]) -> Rule:
    """The rule of `node` (`module` for a call_module node; `constant` gives the value of an argument that is
    not a map, e.g. a functional convolution's weight)."""
    if module is not None:
        return _module_rule(module, spatial_dims)
    if node.op == "call_function" and node.target in (F.conv1d, F.conv2d, F.conv3d):
        return _function_convolution(node, spatial_dims, constant)
    if node.op == "call_function" and node.target in (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d):
        return _function_transposed(node, spatial_dims, constant)
    if node.op == "call_function" and node.target is F.pad:
        return _pad_rule(_pad_widths(node.args[1], spatial_dims), _kwarg(node, "mode", 2, "constant"),
                         _kwarg(node, "value", 3, 0.0) or 0.0)
    if node.op == "call_function" and node.target is operator.getitem:
        return _getitem_rule(node.args[1], spatial_dims)
    if node.op == "call_function" and node.target in _POINTWISE_FUNCTIONS:
        return Rule(POINTWISE)
    if node.op == "call_method" and node.target in _POINTWISE_METHODS:
        return Rule(POINTWISE)
    if node.op == "call_function" and node.target in _CHANNEL_FUNCTIONS or \
            node.op == "call_method" and node.target in _CHANNEL_METHODS:
        dim = _kwarg(node, "dim", 1, None)
        return Rule(POINTWISE) if isinstance(dim, int) and _not_spatial(dim, node, spatial_dims) else Rule(WHOLE)
    if node.op == "call_function" and node.target is F.dropout:
        return Rule(WHOLE) if _kwarg(node, "training", 2, True) else Rule(POINTWISE)
    return Rule(WHOLE)


def _module_rule(module: nn.Module, dims: int) -> Rule:
    if isinstance(module, nn.modules.conv._ConvTransposeNd):
        return _transposed_rule(module.weight, module.bias, module.stride, module.padding, module.dilation,
                                module.groups, dims)
    if isinstance(module, nn.modules.conv._ConvNd):
        return _convolution_rule(module.weight, module.bias, module.stride, module.padding, module.dilation,
                                 module.groups, module.padding_mode, dims)
    if isinstance(module, (nn.modules.padding._ReflectionPadNd, nn.modules.padding._ReplicationPadNd,
                           nn.modules.padding._ConstantPadNd)):
        mode = ("reflect" if isinstance(module, nn.modules.padding._ReflectionPadNd) else
                "replicate" if isinstance(module, nn.modules.padding._ReplicationPadNd) else "constant")
        return _pad_rule(_pad_widths(module.padding, dims), mode, getattr(module, "value", 0.0))
    if isinstance(module, (nn.modules.instancenorm._InstanceNorm, nn.modules.batchnorm._BatchNorm, nn.GroupNorm)):
        uses_running = (not isinstance(module, nn.GroupNorm) and module.track_running_stats
                        and not module.training and module.running_mean is not None)
        return Rule(POINTWISE) if uses_running else Rule(NORM)
    if isinstance(module, nn.modules.dropout._DropoutNd):
        return Rule(WHOLE) if module.training and module.p > 0 else Rule(POINTWISE)
    if isinstance(module, nn.Upsample):
        factor = module.scale_factor
        whole_factor = isinstance(factor, (int, float)) and float(factor).is_integer() and module.size is None
        return _nearest_rule(int(factor), dims) if module.mode == "nearest" and whole_factor else Rule(WHOLE)
    return Rule(POINTWISE) if isinstance(module, _POINTWISE_MODULES) else Rule(WHOLE)


def _per_dim(value: Any, dims: int) -> tuple[int, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (int(value),) * dims


def _convolution_rule(weight: torch.Tensor, bias: torch.Tensor | None, stride: Any, padding: Any, dilation: Any,
                      groups: int, padding_mode: str, dims: int) -> Rule:
    stride, dilation = _per_dim(stride, dims), _per_dim(dilation, dims)
    kernel = tuple(weight.shape[2:])
    if padding == "same":
        padding = tuple(d * (k - 1) // 2 for d, k in zip(dilation, kernel))
    padding = (0,) * dims if padding == "valid" else _per_dim(padding, dims)
    convolution = (F.conv1d, F.conv2d, F.conv3d)[dims - 1]

    def reads(box: Box, size: tuple[int, ...]) -> Box:
        return tuple((start * s - p, (stop - 1) * s - p + d * (k - 1) + 1)
                     for (start, stop), s, p, d, k in zip(box, stride, padding, dilation, kernel))

    def compute(region: torch.Tensor, box: Box, read: Box) -> torch.Tensor:
        return convolution(region, weight, bias, stride, 0, dilation, groups)

    fill = {"zeros": "constant", "reflect": "reflect", "replicate": "replicate", "circular": "circular"}[padding_mode]
    return Rule(WINDOW, reads, fill, 0.0, compute)


def _transposed_rule(weight: torch.Tensor, bias: torch.Tensor | None, stride: Any, padding: Any, dilation: Any,
                     groups: int, dims: int) -> Rule:
    stride, padding, dilation = _per_dim(stride, dims), _per_dim(padding, dims), _per_dim(dilation, dims)
    kernel = tuple(weight.shape[2:])
    transposed = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[dims - 1]

    def reads(box: Box, size: tuple[int, ...]) -> Box:
        # input i reaches outputs i*s - p + d*j (j < k): those reaching [start, stop), clipped to the input
        return tuple((min(max(math.ceil((start + p - d * (k - 1)) / s), 0), n), max(min((stop - 1 + p) // s + 1, n), 0))
                     for (start, stop), s, p, d, k, n in zip(box, stride, padding, dilation, kernel, size))

    def compute(region: torch.Tensor, box: Box, read: Box) -> torch.Tensor:
        out_shape = (*region.shape[:2], *(stop - start for start, stop in box))
        if any(stop <= start for start, stop in read):  # only positions no input reaches (output_padding): the bias
            out = region.new_zeros(out_shape[0], weight.shape[1] * groups, *out_shape[2:])
        else:
            spread = transposed(region, weight, None, stride, 0, 0, groups, dilation)
            out = _placed(spread, [r_start * s - p for (r_start, _), s, p in zip(read, stride, padding)], box)
        return out if bias is None else out + bias.view(1, -1, *(1,) * dims)

    return Rule(WINDOW, reads, "none", 0.0, compute)


def _placed(values: torch.Tensor, origin: list[int], box: Box) -> torch.Tensor:
    """The part of `values` (whose first position is `origin` along each spatial dimension) inside `box`,
    zeros where `values` does not reach."""
    pads, crops = [], []
    for (start, stop), first, length in zip(box, origin, values.shape[2:]):
        before, after = max(first - start, 0), max(stop - (first + length), 0)
        pads += [(before, after)]
        crops += [slice(max(start - first, 0), max(start - first, 0) + (stop - start) - before - after)]
    values = values[(slice(None), slice(None), *crops)]
    flat = [width for pair in reversed(pads) for width in pair]
    return F.pad(values, flat) if any(flat) else values


_CONVOLUTION_ARGUMENTS = (("input", None), ("weight", None), ("bias", None), ("stride", 1), ("padding", 0),
                          ("dilation", 1), ("groups", 1))
_TRANSPOSED_ARGUMENTS = (("input", None), ("weight", None), ("bias", None), ("stride", 1), ("padding", 0),
                         ("output_padding", 0), ("groups", 1), ("dilation", 1))


def _arguments(node: fx.Node, names: tuple[tuple[str, Any], ...], constant: Callable[[Any], Any]) -> dict[str, Any]:
    """A functional call's arguments by name, graph nodes replaced by their values (`constant`)."""
    return {name: constant(node.kwargs.get(name, node.args[i] if len(node.args) > i else default))
            for i, (name, default) in enumerate(names) if name != "input"}


def _function_convolution(node: fx.Node, dims: int, constant: Callable[[Any], Any]) -> Rule:
    a = _arguments(node, _CONVOLUTION_ARGUMENTS, constant)
    return _convolution_rule(a["weight"], a["bias"], a["stride"], a["padding"], a["dilation"], a["groups"], "zeros",
                             dims)


def _function_transposed(node: fx.Node, dims: int, constant: Callable[[Any], Any]) -> Rule:
    # output_padding only lengthens the output, which the graph's sizes already hold
    a = _arguments(node, _TRANSPOSED_ARGUMENTS, constant)
    return _transposed_rule(a["weight"], a["bias"], a["stride"], a["padding"], a["dilation"], a["groups"], dims)


def _pad_widths(padding: Any, dims: int) -> tuple[tuple[int, int], ...]:
    """F.pad's widths (last dimension first, before/after pairs) as (before, after) per spatial dimension."""
    flat = list(_per_dim(padding, 2 * dims)) if not isinstance(padding, (tuple, list)) else list(padding)
    pairs = [(flat[2 * i], flat[2 * i + 1]) for i in range(len(flat) // 2)][::-1]
    return tuple([(0, 0)] * (dims - len(pairs)) + pairs)


def _pad_rule(widths: tuple[tuple[int, int], ...], mode: str, value: float) -> Rule:
    def reads(box: Box, size: tuple[int, ...]) -> Box:
        return tuple((start - before, stop - before) for (start, stop), (before, _) in zip(box, widths))

    return Rule(WINDOW, reads, mode, float(value), lambda region, box, read: region)


def _nearest_rule(factor: int, dims: int) -> Rule:
    def reads(box: Box, size: tuple[int, ...]) -> Box:
        return tuple((start // factor, (stop - 1) // factor + 1) for start, stop in box)

    def compute(region: torch.Tensor, box: Box, read: Box) -> torch.Tensor:
        return _placed(F.interpolate(region, scale_factor=factor, mode="nearest"),
                       [start * factor for start, _ in read], box)

    return Rule(WINDOW, reads, "none", 0.0, compute)


def _getitem_rule(index: Any, dims: int) -> Rule:
    """x[..., a:b] on a map: a crop (slices of step 1 on spatial dimensions), anything on batch and channels."""
    index = index if isinstance(index, tuple) else (index,)
    spatial = list(index[2:]) + [slice(None)] * (dims - len(index[2:]))
    if len(index) > 2 + dims or any(not isinstance(s, slice) or s.step not in (None, 1) for s in spatial) or \
            any(item is None or item is Ellipsis for item in index):
        return Rule(WHOLE)
    leading = tuple(index[:2])

    def reads(box: Box, size: tuple[int, ...]) -> Box:
        starts = [s.indices(n)[0] for s, n in zip(spatial, size)]
        return tuple((start + first, stop + first) for (start, stop), first in zip(box, starts))

    return Rule(WINDOW, reads, "none", 0.0, lambda region, box, read: region[leading] if leading else region)


def _kwarg(node: fx.Node, name: str, position: int, default: Any) -> Any:
    if name in node.kwargs:
        return node.kwargs[name]
    return node.args[position] if len(node.args) > position else default


def _not_spatial(dim: int, node: fx.Node, dims: int) -> bool:
    return dim in (0, 1) or dim < 0 and dim < -dims
