"""A generator as a graph of operations over its image, with every operation's full-size result known before
anything is computed: what the exact executor (executor.py) plans with.

`ImageGraph.trace(net)` records the generator's forward once with torch.fx (standard layers, including our
subclasses of them, stay whole operations). `ImageGraph.sizes(...)` then runs the graph on the meta device at the
real input sizes: every operation's result shape, and the real value of everything that does not depend on the
image's pixels (the latent code's mapping, a time embedding, the sizes the forward asks of its input).
"""
from __future__ import annotations

import copy
import inspect
import math
import weakref
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
from torch import nn

from util.errors import UserError

# Layers the executor knows as one operation (their subclasses too: our reflection pads, instance and sync batch norms).
KNOWN_LAYERS = (nn.modules.conv._ConvNd, nn.modules.batchnorm._NormBase, nn.GroupNorm,
                nn.modules.padding._ReflectionPadNd, nn.modules.padding._ReplicationPadNd,
                nn.modules.padding._ConstantPadNd, nn.Upsample, nn.modules.dropout._DropoutNd)


class _LayerTracer(fx.Tracer):
    def is_leaf_module(self, module: nn.Module, qualified_name: str) -> bool:
        return isinstance(module, KNOWN_LAYERS) or super().is_leaf_module(module, qualified_name)


@dataclass
class Sizes:
    """One run of the graph at given input sizes: `shapes` holds each image-dependent tensor's full shape,
    `constants` every value that does not depend on the image's pixels (real tensors on the generator's device,
    sizes, dtypes)."""

    shapes: dict[fx.Node, torch.Size | tuple[torch.Size, ...]]
    constants: dict[fx.Node, Any]

    def parts(self, node: Any) -> bool:
        """Whether map `node` is a tuple of maps (a chunk or split of one)."""
        return self.spatial(node) and not isinstance(self.shapes[node], torch.Size)

    def shape(self, node: fx.Node) -> torch.Size:
        """The full shape of map `node` (of its first part, for a tuple of maps)."""
        return self.shapes[node][0] if self.parts(node) else self.shapes[node]

    def spatial(self, node: Any) -> bool:
        """Whether `node` is a map over the image (computed by regions), not a constant."""
        return isinstance(node, fx.Node) and node in self.shapes


class ImageGraph:
    """The traced forward of `net` (see the module docstring). `net` is the generator itself; its layers are
    called as they are (weights, mode), the graph only orders them."""

    _traced: "weakref.WeakKeyDictionary[nn.Module, ImageGraph | UserError]" = weakref.WeakKeyDictionary()

    def __init__(self, net: nn.Module, graph: fx.Graph, defaults: dict[str, Any]):
        self.net = net
        self.graph = graph
        self.defaults = defaults  # the forward's parameters with defaults, traced at their default values
        self.nodes = list(graph.nodes)
        self.placeholders = [node for node in self.nodes if node.op == "placeholder"]
        self._meta_net: nn.Module | None = None
        self._largest: dict[tuple, int] = {}

    @classmethod
    def trace(cls, net: nn.Module) -> "ImageGraph":
        """The graph of `net`'s forward, traced once per network."""
        if net in cls._traced:  # traced before, or refused before
            if isinstance(cls._traced[net], UserError):
                raise cls._traced[net]
            return cls._traced[net]
        parameters = inspect.signature(net.forward).parameters.values()
        defaults = {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}
        try:
            graph = _LayerTracer().trace(net, concrete_args=defaults)
        except Exception as error:  # fx refuses forwards whose Python control flow depends on tensor values
            cls._traced[net] = UserError(
                f"the generator {type(net).__name__} cannot be translated exactly: its forward could not be traced "
                f"as a graph of operations ({type(error).__name__}: {str(error).splitlines()[0]}). Translate it whole "
                "(no --exact_memory limit it exceeds) or in cross-faded tiles (--tile N), whose output is not exact "
                "under instance norm; docs/inference.md explains the choice.")
            raise cls._traced[net] from error
        traced = cls._traced[net] = cls(net, graph, defaults)
        return traced

    def module(self, node: fx.Node) -> nn.Module:
        return self.net.get_submodule(node.target)

    def largest_map(self, inputs: list[torch.Tensor]) -> int:
        """Bytes of the largest map the forward makes from inputs of these sizes (remembered per sizes)."""
        key = tuple((tuple(x.shape), x.dtype) for x in inputs)
        if key not in self._largest:
            sizes = self.sizes(inputs, inputs[0].device)
            self._largest[key] = max(math.prod(sizes.shape(node)) for node in sizes.shapes) * inputs[0].element_size()
        return self._largest[key]

    def sizes(self, inputs: list[torch.Tensor], device: torch.device) -> Sizes:
        """Run the graph on the meta device at the sizes of `inputs` (the image first; the others, e.g. codes, on
        `device`, where the generator is); see Sizes."""
        meta_net = self._meta()
        for meta_module, module in zip(meta_net.modules(), self.net.modules()):
            meta_module.training = module.training
        shapes: dict[fx.Node, torch.Size | tuple[torch.Size, ...]] = {}
        constants: dict[fx.Node, Any] = {}
        values: dict[fx.Node, Any] = {}
        given = iter(inputs)
        for node in self.nodes:
            if node.op == "placeholder":
                value = node.args[0] if node.args else next(given, None)  # traced at its default: that value
                if node is self.placeholders[0]:
                    value = torch.empty(value.shape, dtype=value.dtype, device="meta")
            elif node.op == "output":
                continue
            else:  # on the meta device where it reads a map; really where it reads constants only
                reads_map = any(arg in shapes for arg in node.all_input_nodes)
                value = self._run(node, values, meta_net if reads_map else self.net, reads_map, device)
            values[node] = value
            # A map: the image, or a tensor computed from a map. What the forward asks of a map's size, dtype
            # or device is a constant, and so is all that follows from constants only.
            is_map = node is self.placeholders[0] or any(arg in shapes for arg in node.all_input_nodes)
            if is_map and isinstance(value, torch.Tensor):
                shapes[node] = value.shape
            elif is_map and isinstance(value, (tuple, list)) and value and \
                    all(isinstance(part, torch.Tensor) for part in value):
                shapes[node] = tuple(part.shape for part in value)  # a map's chunks: maps too
            else:
                constants[node] = value
        return Sizes(shapes, constants)

    def _run(self, node: fx.Node, values: dict, net: nn.Module, on_meta: bool, device: torch.device) -> Any:
        def value_of(arg: Any) -> Any:
            value = values[arg]
            return value.to("meta") if on_meta and isinstance(value, torch.Tensor) else value
        args = fx.node.map_arg(node.args, value_of)
        kwargs = fx.node.map_arg(node.kwargs, value_of)
        if on_meta and node.op in ("call_method", "call_function") and "device" in (node.target, *node.args[1:2]):
            return device  # what the forward asks of its input's device: the real one
        if node.op == "get_attr":
            return _attribute(net, node.target)
        if node.op == "call_module":
            return net.get_submodule(node.target)(*args, **kwargs)
        if node.op == "call_method":
            return getattr(args[0], node.target)(*args[1:], **kwargs)
        return node.target(*args, **kwargs)

    def _meta(self) -> nn.Module:
        if self._meta_net is None:
            self._meta_net = copy.deepcopy(self.net).to("meta")
        return self._meta_net


def _attribute(net: nn.Module, target: str) -> Any:
    value: Any = net
    for name in target.split("."):
        value = getattr(value, name)
    return value
