"""Each of a model's networks as training calls it, built once beside the plain module (the training
engine's, models/training/engine.py):

    plain      the model's attribute (`model.netG`): its weights, what checkpoints are written from
    trained      the plain module DDP-wrapped under torchrun (compiled with --compile): what the
                 training step calls (`step.nets.G`)
    outside_ddp  the plain module compiled but never DDP-wrapped: what validation calls, and what
                 `step.frozen("D")` yields (but with CUDA graphs, below)

Under torchrun with --norm syncbatch the trained and outside_ddp variants run a twin of the plain module
whose batch-norm layers synchronise their statistics across processes (models/networks/sync_batchnorm.py):
the same Parameter and buffer objects, so the plain module's weights and running statistics are
the ones trained, and the plain module itself is never changed. With --compile both compiled and
eager variants exist, so that the compile probe (models/training/compile_probe.py) can choose.
With `cuda_graphs` (--compile on a GPU, `captures_cuda_graphs`) the networks the step calls replay CUDA
graphs: a step's forwards and backwards are a few launches instead of thousands. That is the trained
variants and what `step.frozen` yields (the trained variant itself where it is not DDP-wrapped, else the
plain module compiled into graphs); their outputs are consumed within the step. Validation's outside_ddp
variants are compiled without graphs, so that nothing it keeps is overwritten by a later replay.
"""
from __future__ import annotations

import copy
from collections.abc import Collection
from typing import NamedTuple

import torch
from torch import nn

from models import networks
from models.network_views import NetworkViews
from models.networks.sync_batchnorm import convert_sync_batchnorm
from models.training.step import StepNetworks
from util import distributed


class Variants(NamedTuple):
    """One network as training calls it, at one compile choice (module docstring)."""

    trained: nn.Module      # what the step trains
    outside_ddp: nn.Module  # what validation calls
    frozen: nn.Module       # what `step.frozen` yields inside the step


class NetworkVariants:
    """The trained and outside_ddp variants of `plain` (name -> the model's module), eager and, with
    `compile`, compiled; `for_step()` the ones the next step calls."""

    def __init__(self, plain: dict[str, nn.Module], device: torch.device, compile: bool,
                 synchronise_batch_norm: bool, cuda_graphs: bool = False) -> None:
        self.plain = dict(plain)
        self.cuda_graphs = compile and cuda_graphs
        together = distributed.is_distributed()
        # name -> {compiled: its variants}
        self._variants: dict[str, dict[bool, Variants]] = {}
        self._twins: dict[str, nn.Module] = {}
        for name, net in self.plain.items():
            twin = synchronised_twin(net, device) if together and synchronise_batch_norm else net
            self._twins[name] = twin
            trained = distributed.wrap_ddp(twin, device) if together else twin
            variants = {False: Variants(trained, twin, twin)}
            if compile:
                outside_ddp = networks.compile_network(twin, name)
                if not self.cuda_graphs:
                    compiled = outside_ddp if trained is twin else networks.compile_network(trained, name)
                    variants[True] = Variants(compiled, outside_ddp, outside_ddp)
                else:
                    graphed = networks.compile_network(trained, name, cuda_graphs=True)
                    frozen = graphed if trained is twin else networks.compile_network(twin, name, cuda_graphs=True)
                    variants[True] = Variants(graphed, outside_ddp, frozen)
            self._variants[name] = variants
        self._compiled = {name: compile for name in self.plain}
        self._for_step: StepNetworks | None = None

    def for_step(self) -> StepNetworks:
        """The networks as the next training step calls them (`TrainingStep`): the trained variants
        (`step.nets`), what `step.frozen` yields, the uncompiled twins (torch.func.functional_call takes a
        module: the plain module, or its batch-norm-synchronising twin) and the plain modules."""
        if self._for_step is None:
            current = {name: variants[self._compiled[name]] for name, variants in self._variants.items()}
            self._for_step = StepNetworks(trained=NetworkViews({name: v.trained for name, v in current.items()}),
                                          frozen={name: v.frozen for name, v in current.items()},
                                          uncompiled=dict(self._twins), plain=self.plain)
        return self._for_step

    def views(self) -> NetworkViews:
        """The networks as the next training step trains them (`TrainingStep.nets`)."""
        return self.for_step().trained

    def outside_ddp(self, name: str) -> nn.Module:
        """Network `name` as validation calls it: never DDP-wrapped, compiled as the run is."""
        return self._variants[name][self._compiled[name]].outside_ddp

    def trained_modules(self) -> list[nn.Module]:
        """Every network as the step calls it (for DDP's no_sync around accumulated micro-batches)."""
        return list(self.views().values())

    def use_compiled(self, compiled: bool, names: Collection[str] | None = None) -> None:
        """--compile: run the networks (or those of `names`, e.g. "D_A") compiled, as they start, or
        eagerly (the compile probe's choice where compiling proved slower). Without --compile
        there is nothing to choose."""
        for name, variants in self._variants.items():
            if compiled in variants and (names is None or name in names) and self._compiled[name] != compiled:
                self._compiled[name] = compiled
                self._for_step = None


def captures_cuda_graphs(compile: bool, device: torch.device, backend: str | None) -> tuple[bool, str | None]:
    """Whether --compile records the training step's networks as CUDA graphs, and the one line that says
    why not where a GPU run declines them: on a GPU, alone or under NCCL, whose collectives a graph can
    capture; gloo's cannot be, so processes sharing a GPU over gloo train compiled without graphs.
    (`backend`: the process group's, None for one process.)"""
    if not compile or device.type != "cuda":
        return False, None
    if backend is not None and backend != "nccl":
        return False, (f"--compile: CUDA graphs cannot capture a step whose processes talk over {backend}, so the "
                       f"networks are compiled without them and training goes on (--ddp_backend nccl, with a GPU "
                       f"per process, captures them).")
    return True, None


def synchronised_twin(net: nn.Module, device: torch.device) -> nn.Module:
    """A copy of `net` that shares every Parameter and buffer with it (so training the copy trains
    `net`, running statistics included), whose batch-norm layers synchronise their statistics across
    processes (--norm syncbatch under torchrun). `net` itself stays as it is."""
    shared = {id(tensor): tensor for tensor in (*net.parameters(), *net.buffers())}
    return convert_sync_batchnorm(copy.deepcopy(net, memo=shared), device)
