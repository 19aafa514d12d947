"""Exact translation of inputs of any size in bounded memory: the generator's output equals its forward on the
whole input at once, to float rounding, for every normalisation, while memory is bounded by a budget.

The generator's graph (graph.py) is run operation by operation over the whole input, in tiles. A map is
materialised (kept whole, in memory or in a scratch file: storage.py) where the whole-input forward needs it whole:
the input of every normalisation over the whole map (its statistics are gathered, in float64, while it is written:
statistics.py), the input and output of anything else that needs its input whole (regions.py), every map read by
more than one operation (a residual's skip, a U-Net's skip), and the output. Between materialised maps each tile
is computed going down the few operations in between, reading the window each needs (a convolution's halo, a
padding's reflection) from the maps below: nothing is computed on a tile's own statistics, and nothing is
cross-faded. Operations are visited in the forward's order, so random draws (dropout in training mode, which
needs its input whole) come in the order the whole forward makes them.
"""
from __future__ import annotations

import itertools
import math
import operator
import os
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize

from models.inference.exact.graph import ImageGraph, Sizes
from models.inference.exact.regions import NORM, POINTWISE, WHOLE, WINDOW, Box, Rule, rule_for
from models.inference.exact.statistics import WholeMapNorm
from models.inference.exact.storage import MapSource, MapStore, StoredMap
from util.errors import UserError

DEFAULT_EXACT_MEMORY = 1 << 30  # bytes of host memory for maps and tiles: 1 GiB
SMALLEST_TILE = 8               # per side: below it a tile is mostly halo


@dataclass(frozen=True)
class ExactBudget:
    """How much host memory exact translation may use (`memory` bytes, for the maps it keeps in memory and the
    tile being computed; maps beyond it go to files under `scratch`, the system's temporary folder by default)."""

    memory: int = DEFAULT_EXACT_MEMORY
    scratch: str | os.PathLike | None = None


def prepare(net: nn.Module) -> None:
    """Trace `net` for exact translation now. Tracing (torch.fx) briefly patches every module's call in the whole
    process, so a program that translates from several threads (scripts/serve.py) traces before they start."""
    try:
        ImageGraph.trace(net)
    except UserError:
        pass  # remembered: translate_exactly runs such a generator whole, or refuses it, when it is called


def translate_exactly(net: nn.Module, image: torch.Tensor | MapSource, *others: torch.Tensor,
                      budget: ExactBudget = ExactBudget(),
                      sink: Callable[[Box, torch.Tensor], None] | None = None,
                      progress: Callable[[int, int], None] | None = None) -> torch.Tensor | None:
    """`net(image, *others)` (the image N x C x spatial...; others: what else the generator takes, e.g. a code),
    computed as the module docstring says. An input whose whole forward fits the budget runs whole. `image` may
    be a MapSource instead, read by regions (a picture too large to hold, read from its file); with `sink`, the
    output goes to `sink(box, region)` tile by tile (row-major) and None is returned. `progress(done, total)`
    is called after every tile of the tiled execution."""
    if not isinstance(image, torch.Tensor):  # read by regions: never whole
        graph = ImageGraph.trace(net)
        with torch.no_grad(), parametrize.cached():
            probe = torch.empty(image.shape, dtype=image.dtype, device="meta")
            device = next(iter(net.parameters()), torch.empty(0)).device
            return _Execution(graph, graph.sizes([probe, *others], device), image, budget, device).run(sink, progress)
    # Whole where the input is small enough that its whole forward fits for any generator we ship (their widest
    # maps hold a few tens of times the input's numbers): no graph to trace or size for test.py's usual pictures.
    if sink is None and 128 * image.numel() * image.element_size() <= budget.memory:
        return net(image, *others)
    graph = ImageGraph.trace(net)
    if sink is None and 3 * graph.largest_map([image, *others]) <= budget.memory:  # a map, its successor, a skip
        return net(image, *others)
    with torch.no_grad(), parametrize.cached():
        sizes = graph.sizes([image, *others], image.device)
        return _Execution(graph, sizes, image, budget, image.device).run(sink, progress)


class _Execution:
    def __init__(self, graph: ImageGraph, sizes: Sizes, image: torch.Tensor | MapSource, budget: ExactBudget,
                 device: torch.device):
        self.graph, self.sizes, self.budget = graph, sizes, budget
        self.device, self.dtype = device, image.dtype
        self.dims = len(image.shape) - 2
        self.store = MapStore(budget.memory // 2, budget.scratch)
        image_node = graph.placeholders[0]
        source = StoredMap(image.detach().cpu()) if isinstance(image, torch.Tensor) else image
        self.stored: dict[fx.Node, StoredMap | MapSource] = {image_node: source}
        self.rules = {node: self._rule(node) for node in graph.nodes
                      if sizes.spatial(node) and node.op != "placeholder"}
        self.norms: dict[fx.Node, WholeMapNorm] = {node: WholeMapNorm(graph.module(node))
                                                   for node, rule in self.rules.items() if rule.kind == NORM}
        self.kept = self._kept()
        self.last_reader = self._last_readers()

    # ----------------------------------------------------------------------------------------- the plan
    def _rule(self, node: fx.Node) -> Rule:
        if node.target is operator.getitem and self.sizes.parts(node.args[0]):
            return Rule(POINTWISE)  # one part of a chunk or split
        module = self.graph.module(node) if node.op == "call_module" else None
        return rule_for(node, module, self.dims, self._constant)

    def _constant(self, arg: Any) -> Any:
        return fx.node.map_arg(arg, lambda node: self.sizes.constants[node])

    def _maps_read(self, node: fx.Node) -> list[fx.Node]:
        return [arg for arg in node.all_input_nodes if self.sizes.spatial(arg)]

    def _kept(self) -> list[fx.Node]:
        """The maps to materialise, in the forward's order (see the module docstring)."""
        kept = set(self.stored)
        output = next(node for node in self.graph.nodes if node.op == "output")
        kept.update(arg for arg in output.all_input_nodes if self.sizes.spatial(arg))
        for node, rule in self.rules.items():
            if rule.kind in (NORM, WHOLE):
                kept.update(self._maps_read(node))
            parts = self.sizes.parts(node)  # a chunk's parts are views: read again, not kept
            if rule.kind == WHOLE or not parts and sum(self.sizes.spatial(user) for user in node.users) > 1:
                kept.add(node)
        return [node for node in self.graph.nodes if node in kept]

    def _last_readers(self) -> dict[fx.Node, fx.Node]:
        """For each kept map, the last kept map whose tiles read it: after it, the map is freed."""
        last: dict[fx.Node, fx.Node] = {}
        for target in self.kept:
            for read in self._reads_of(target):
                last[read] = target
        return last

    def _reads_of(self, target: fx.Node) -> set[fx.Node]:
        found, stack = set(), list(self._maps_read(target))
        while stack:
            node = stack.pop()
            if node in self.kept:
                found.add(node)
            else:
                stack.extend(self._maps_read(node))
        return found

    # ------------------------------------------------------------------------------------------ running
    def run(self, sink: Callable[[Box, torch.Tensor], None] | None,
            progress: Callable[[int, int], None] | None) -> torch.Tensor | None:
        output = next(node for node in self.graph.nodes if node.op == "output")
        result_node = output.args[0]
        if not self.sizes.spatial(result_node):
            raise UserError("exact translation needs a generator that returns one image; this one returns "
                            f"{type(self.sizes.constants.get(result_node)).__name__}.")
        tiles = {node: _tiles(self.sizes.shape(node)[2:], self._tile_side(node))
                 for node in self.kept if node not in self.stored and self.rules[node].kind != WHOLE}
        counter = _Progress(sum(map(len, tiles.values())), progress)
        try:
            for node in self.kept:
                if node not in self.stored:
                    self._materialise(node, tiles.get(node, []), sink if node is result_node else None, counter)
                self._free_after(node)
            return None if sink is not None else self.stored[result_node].take().to(self.device)
        finally:
            self.store.close()

    def _free_after(self, node: fx.Node) -> None:
        for read, last in list(self.last_reader.items()):
            if last is node and read in self.stored and read is not self.graph.placeholders[0]:
                self.store.free(self.stored.pop(read))
                del self.last_reader[read]

    def _materialise(self, node: fx.Node, tiles: list[Box], sink: Callable[[Box, torch.Tensor], None] | None,
                     counter: "_Progress") -> None:
        shape = self.sizes.shapes[node]
        if self.rules[node].kind == WHOLE:
            self.stored[node] = StoredMap(self._whole(node).cpu())
            return
        target = None if sink is not None else self.store.new(shape, self.dtype)
        readers = [self.norms[user] for user in node.users if user in self.norms]
        for box in tiles:
            counter.step()
            region = self._region(node, box)
            for norm in readers:
                norm.add(region)
            if sink is not None:
                sink(box, region)
            else:
                target.write(box, region.cpu())
        for norm in readers:
            norm.finish(shape[1])
        if target is not None:
            self.stored[node] = target

    def _whole(self, node: fx.Node) -> torch.Tensor:
        needed = sum(_nbytes(self.sizes.shapes[arg], self.dtype) for arg in self._maps_read(node))
        needed += _nbytes(self.sizes.shapes[node], self.dtype)
        if needed > self.budget.memory:
            raise UserError(
                f"exact translation cannot run `{_describe(node)}` of the generator in tiles (it is not an operation "
                f"the exact executor knows to be local, or it draws random numbers), and its whole input and output "
                f"({_size(needed)}) exceed --exact_memory ({_size(self.budget.memory)}). Give "
                "more --exact_memory, translate whole, or use cross-faded tiles (--tile N, not exact under instance "
                "norm); docs/inference.md explains the choice.")
        return self._call(node, lambda arg: self.stored[arg].whole().to(self.device))

    def _call(self, node: fx.Node, map_value: Callable[[fx.Node], Any], box: Box | None = None) -> Any:
        """`node`'s operation on its maps (`map_value(map)`) and constants (cut to `box` where they span it)."""
        def value(arg: fx.Node) -> Any:
            if self.sizes.spatial(arg):
                return map_value(arg)
            constant = self.sizes.constants[arg]
            return constant if box is None else self._constant_region(constant, box)
        args = fx.node.map_arg(node.args, value)
        kwargs = fx.node.map_arg(node.kwargs, value)
        if node.op == "call_module":
            return self.graph.module(node)(*args, **kwargs)
        if node.op == "call_method":
            return getattr(args[0], node.target)(*args[1:], **kwargs)
        return node.target(*args, **kwargs)

    def _region(self, node: fx.Node, box: Box) -> Any:
        """The values of map `node` over `box` (within its size)."""
        if node in self.stored:
            return self.stored[node].read(box).to(self.device)
        rule = self.rules[node]
        if rule.kind == WINDOW:
            source = node.args[0]
            reads = rule.reads(box, tuple(self.sizes.shape(source)[2:]))
            return rule.compute(self._fetch(source, reads, rule), box, reads)
        if rule.kind == NORM:
            return self.norms[node].apply(self._region(node.args[0], box))
        return self._call(node, lambda arg: self._region(arg, self._broadcast_box(arg, box)), box)

    def _broadcast_box(self, arg: fx.Node, box: Box) -> Box:
        size = self.sizes.shape(arg)[2:]
        return tuple((0, 1) if n == 1 else span for n, span in zip(size, box))

    def _constant_region(self, value: Any, box: Box) -> Any:
        """A constant as a region op sees it: one that spans the whole map (a code spread over the image, as
        `expand` gives it) is cut to the region; anything else broadcasts as it is."""
        if isinstance(value, torch.Tensor) and value.dim() == self.dims + 2:
            return value[(slice(None), slice(None), *(slice(start, stop) if n > 1 else slice(None)
                                                      for n, (start, stop) in zip(value.shape[2:], box)))]
        return value

    def _fetch(self, source: fx.Node, reads: Box, rule: Rule) -> torch.Tensor:
        """`source` over `reads`, which may reach outside it: filled as the operation fills (rule.fill)."""
        size = tuple(self.sizes.shape(source)[2:])
        if all(start >= 0 and stop <= n for (start, stop), n in zip(reads, size)):
            return self._region(source, reads)
        inside = tuple((max(start, 0), min(stop, n)) for (start, stop), n in zip(reads, size))
        widths = [w for (start, stop), n in reversed(list(zip(reads, size))) for w in (max(-start, 0),
                                                                                         max(stop - n, 0))]
        if rule.fill == "constant":
            return F.pad(self._region(source, inside), widths, value=rule.fill_value)
        if rule.fill in ("reflect", "replicate") and \
                all(max(w) < stop - start for w, (start, stop) in zip(_pairs(widths)[::-1], inside)):
            # the region reaches the map's edge wherever it is padded, so padding it is padding the map
            return F.pad(self._region(source, inside), widths, mode=rule.fill)
        indices = [_filled_indices(torch.arange(start, stop), n, rule.fill) for (start, stop), n in zip(reads, size)]
        span = tuple((int(index.min()), int(index.max()) + 1) for index in indices)
        region = self._region(source, span)
        for dim, (index, (low, _)) in enumerate(zip(indices, span)):
            region = region.index_select(2 + dim, (index - low).to(region.device))
        return region

    def _tile_side(self, node: fx.Node) -> int:
        """The largest tile side whose computation fits half the budget (the other half holds maps)."""
        size = tuple(self.sizes.shapes[node][2:])
        side = max(size)
        while True:
            needed = self._working_set(node, _middle_box(size, side))
            if needed <= self.budget.memory // 2:
                return side
            if side <= SMALLEST_TILE:
                raise UserError(
                    f"--exact_memory {_size(self.budget.memory)} is too small for exact translation: one "
                    f"tile of {side} pixels of `{_describe(node)}`, with the halo its operations read, needs "
                    f"{_size(2 * needed)}. Give at least that much --exact_memory.")
            side = max(SMALLEST_TILE, -(-side // 2))

    def _working_set(self, node: fx.Node, box: Box, top: bool = True) -> int:
        """Bytes held while a tile `box` of `node` is computed: its region and those it reads, with one copy each
        for the temporaries of padding and statistics."""
        shape = self.sizes.shape(node)
        total = 2 * _nbytes((*shape[:2], *(stop - start for start, stop in box)), self.dtype)
        if node in self.kept and not top:  # read from its stored map
            return total
        rule = self.rules[node]
        if rule.kind == WINDOW:
            source = node.args[0]
            return total + self._working_set(source, rule.reads(box, tuple(self.sizes.shape(source)[2:])), False)
        return total + sum(self._working_set(arg, self._broadcast_box(arg, box), False)
                           for arg in self._maps_read(node))


class _Progress:
    """Counts the tiles of a run and reports each to the caller's `progress(done, total)`."""

    def __init__(self, total: int, report: Callable[[int, int], None] | None):
        self.done, self.total, self.report = 0, total, report

    def step(self) -> None:
        self.done += 1
        if self.report is not None:
            self.report(self.done, self.total)


def _filled_indices(index: torch.Tensor, size: int, fill: str) -> torch.Tensor:
    """Positions `index` (some outside [0, size)) as the padding mode `fill` maps them inside."""
    if fill == "reflect":
        index = torch.where(index < 0, -index, index)
        return torch.where(index >= size, 2 * (size - 1) - index, index)
    if fill == "replicate":
        return index.clamp(0, size - 1)
    if fill == "circular":
        return index % size
    raise ValueError(f"positions outside a map read with fill {fill!r}")


def _pairs(flat: list[int]) -> list[tuple[int, int]]:
    return [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]


def _middle_box(size: tuple[int, ...], side: int) -> Box:
    return tuple((max((n - side) // 2, 0), max((n - side) // 2, 0) + min(side, n)) for n in size)


def _tiles(size: tuple[int, ...], side: int) -> list[Box]:
    starts = itertools.product(*(range(0, n, side) for n in size))
    return [tuple((start, min(start + side, n)) for start, n in zip(corner, size)) for corner in starts]


def _nbytes(shape: Any, dtype: torch.dtype) -> int:
    if shape and isinstance(shape[0], (tuple, torch.Size)):
        return sum(_nbytes(part, dtype) for part in shape)
    return math.prod(shape) * torch.empty(0, dtype=dtype).element_size()


def _describe(node: fx.Node) -> str:
    target = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", str(node.target))
    return f"{node.op} {target}"


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**20:.1f} MiB" if nbytes >= 2**20 else f"{nbytes / 2**10:.0f} KiB"
