"""FLOPs of a training step, in all and per network, with torch's FLOP formulas.

`count_flops` is torch.utils.flop_counter.FlopCounterMode's total. `NetworkFlops` splits the same
counts by network: torch's module tracker cannot (it names networks by class, so G_A and G_B are
one "ResnetGenerator", and in backward it leaves a network "entered" until the end when its input
needs no gradient), so each counted op is given to the network owning a weight among its
arguments (a conv's weight, forward and backward), and to "other" if none.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode, flop_registry


def count_flops(fn: Callable[[], Any]) -> int:
    """FLOPs of `fn()` (forward and backward, whatever it runs) by torch's FlopCounterMode."""
    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


def conv2d_flops(n: int, c_in: int, c_out: int, k: int, h_out: int, w_out: int) -> int:
    """Textbook FLOPs of a dense conv forward: a multiply and an add per weight per output pixel."""
    return 2 * n * c_in * c_out * k * k * h_out * w_out


class NetworkFlops(TorchDispatchMode):
    """Within `with NetworkFlops(networks) as counter:`, FLOPs of the ops torch has a formula for
    (convolutions, matmuls, attention), by network and phase: `counter.by_network()` is
    {name: {"forward": int, "backward": int}}. Backward ops are those named "*_backward"
    (convolution_backward: the gradients of a conv's input and weight, as far as autograd asks
    for them); the networks here are all convolutional."""

    def __init__(self, networks: dict[str, nn.Module]):
        super().__init__()
        self.owner = {p.data_ptr(): name for name, net in networks.items() for p in net.parameters()}
        self.counts: dict[str, dict[str, int]] = defaultdict(lambda: {"forward": 0, "backward": 0})

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func._overloadpacket
        if packet in flop_registry:
            flops = int(flop_registry[packet](*args, **kwargs, out_val=out))
            owner = next((self.owner[a.data_ptr()] for a in args
                          if isinstance(a, torch.Tensor) and a.data_ptr() in self.owner), "other")
            self.counts[owner]["backward" if packet.__name__.endswith("_backward") else "forward"] += flops
        return out

    def by_network(self) -> dict[str, dict[str, int]]:
        return {name: dict(phases) for name, phases in self.counts.items()}


def count_network_flops(fn: Callable[[], Any], networks: dict[str, nn.Module]) -> tuple[int, dict]:
    """(FlopCounterMode's total, NetworkFlops' split) of one run of `fn()`; the split adds up to
    the total (the tests check it)."""
    with NetworkFlops(networks) as split, FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops()), split.by_network()


class DispatchedOps(TorchDispatchMode):
    """Within `with DispatchedOps() as ops:`, `ops.count` is the number of aten operators dispatched
    (forward, backward and optimizer alike, as autograd and the optimizers call them). On a GPU each
    is at least one kernel launch, so at small batches this count, not the FLOPs, sets a step's time;
    it is the same on every device, so a change that adds launches shows up on a CPU too."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.by_operator: dict[str, int] = defaultdict(int)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        self.by_operator[func._overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def count_dispatched_ops(fn: Callable[[], Any]) -> tuple[int, dict[str, int]]:
    """(aten operators dispatched by one run of `fn()`, {operator: count})."""
    with DispatchedOps() as ops:
        fn()
    return ops.count, dict(ops.by_operator)
