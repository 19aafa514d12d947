"""What the training engine hands a model's training step: `optimize_parameters(step)` (and each of
its `accumulation_phases`) computes its losses with `step.nets` and applies each with
`step.update_weights(optimizer, loss)`; `with step.frozen("D") as netD:` judges generator outputs.

The model calls this object, never the engine: everything the step needs of the run (the networks
as training calls them, gradient scaling, accumulation, the record of losses) comes with it.
"""
from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol, Sequence

import torch
from torch import nn

from models.training.accumulation import MicroStep
from models.training.loss_watch import LossWatch
from models.network_views import NetworkViews


class Judges(Protocol):
    """The part of the training networks (models/training/network_variants.py) a step uses beside `nets`."""

    def frozen(self, *names: str) -> AbstractContextManager: ...

    def uncompiled(self, name: str) -> nn.Module: ...


class TrainingStep:
    """One optimizer step of a model, as the training engine runs it (see the module docstring)."""

    def __init__(self, nets: NetworkViews, judges: Judges, optimizers: Sequence[torch.optim.Optimizer],
                 grad_scalers: Sequence[torch.amp.GradScaler], loss_watch: LossWatch) -> None:
        self.nets = nets  # name -> the network as training calls it (DDP-wrapped, compiled)
        self._judges = judges
        self._optimizers = list(optimizers)
        self._grad_scalers = list(grad_scalers)
        self._loss_watch = loss_watch
        self.micro: MicroStep | None = None  # --accum_steps: the micro-batch under way (set by the engine)
        self._step_losses: dict[int, torch.Tensor] = {}

    def frozen(self, *names: str) -> AbstractContextManager:
        """The discriminators `names` for judging generator outputs: within the block their weights
        get no gradient (gradients still flow through them to the generator), and the networks
        yielded are not DDP-wrapped (a DDP replica would wait for weight gradients that never come)
        but stay compiled under --compile. Yields one network, or a tuple for several.

            with step.frozen("D") as netD:
                loss_G = self.criterionGAN(netD(fake), True) + ...
                step.update_weights(self.optimizer_G, loss_G)
        """
        return self._judges.frozen(*names)

    def module(self, name: str) -> nn.Module:
        """Network `name` as this step runs it, neither compiled nor DDP-wrapped (for calls that take a
        module, e.g. torch.func.functional_call): the model's plain module, or under torchrun with
        --norm syncbatch its twin whose batch norms synchronise (models/training/network_variants.py)."""
        return self._judges.uncompiled(name)

    def update_weights(self, optimizer: torch.optim.Optimizer, loss: torch.Tensor) -> None:
        """Apply `loss` to the parameters of `optimizer` (one of the model's): clear their gradients,
        back-propagate, step, once per optimizer and step.

        Under --amp fp16 the loss is scaled by this optimizer's own GradScaler, which unscales the
        gradients, skips the step if they overflowed and adjusts its scale - all here, so no model
        can forget part of it. With --accum_steps each micro-batch adds its weighted gradient and the
        step comes at the last. The loss is noted on the device (no host sync), so that a diverging
        run is caught when losses are next read (`TrainingEngine.check_finite`).
        """
        index = next(i for i, known in enumerate(self._optimizers) if known is optimizer)
        scaler = self._grad_scalers[index]
        micro = self.micro
        if micro is not None:  # a micro-batch's share; the optimizer steps at the last one
            if micro.first:
                optimizer.zero_grad(set_to_none=True)
                self._step_losses[index] = 0.0
            scaler.scale(loss * micro.weight).backward()
            self._step_losses[index] = self._step_losses[index] + loss.detach() * micro.weight
            if not micro.last:
                return
            loss = self._step_losses.pop(index)
        else:
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        self._loss_watch.note(index, loss)


def set_requires_grad(nets: Sequence[nn.Module], requires_grad: bool) -> None:
    """Switch the weight gradients of `nets` on or off."""
    for net in nets:
        for param in net.parameters():
            param.requires_grad = requires_grad
