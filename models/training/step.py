"""What the training engine hands a model's training step: `optimize_parameters(step)` (and each of
its `accumulation_phases`) computes its losses with `step.nets` and applies each with
`step.update_weights(optimizer, loss)`; `with step.frozen("D") as netD:` judges generator outputs.

The model calls this object, never the engine: everything the step needs of the run (the networks
as training calls them, gradient scaling, accumulation, the record of losses) comes with it.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from models.network_views import NetworkViews
from models.training.accumulation import MicroStep
from models.training.loss_watch import LossWatch


@dataclass(frozen=True)
class StepNetworks:
    """A model's networks as one training step calls them (built by models/training/network_variants.py)."""

    trained: NetworkViews                 # name -> DDP-wrapped under torchrun, compiled with --compile
    frozen: Mapping[str, nn.Module]       # name -> what `TrainingStep.frozen` yields: never DDP-wrapped
    uncompiled: Mapping[str, nn.Module]   # name -> neither compiled nor DDP-wrapped (`TrainingStep.module`)
    plain: Mapping[str, nn.Module]        # name -> the model's own module, whose weights the step trains


class TrainingStep:
    """One optimizer step of a model, as the training engine runs it (see the module docstring)."""

    def __init__(self, networks: StepNetworks, optimizers: Sequence[torch.optim.Optimizer],
                 grad_scalers: Sequence[torch.amp.GradScaler], loss_watch: LossWatch) -> None:
        self.nets = networks.trained  # name -> the network as training calls it (DDP-wrapped, compiled)
        self._networks = networks
        self._optimizers = list(optimizers)
        self._grad_scalers = list(grad_scalers)
        self._loss_watch = loss_watch
        self.micro: MicroStep | None = None  # --accum_steps: the micro-batch under way (set by the engine)
        self._step_losses: dict[int, torch.Tensor] = {}

    @contextmanager
    def frozen(self, *names: str) -> Iterator:
        """The discriminators `names` for judging generator outputs: within the block their weights
        get no gradient (gradients still flow through them to the generator), and the networks
        yielded are not DDP-wrapped (a DDP replica would wait for weight gradients that never come)
        but stay compiled under --compile. Yields one network, or a tuple for several.

            with step.frozen("D") as netD:
                loss_G = self.criterionGAN(netD(fake), True) + ...
                step.update_weights(self.optimizer_G, loss_G)
        """
        plain = [self._networks.plain[name] for name in names]
        frozen = tuple(self._networks.frozen[name] for name in names)
        set_requires_grad(plain, False)
        try:
            yield frozen[0] if len(frozen) == 1 else frozen
        finally:
            set_requires_grad(plain, True)

    def module(self, name: str) -> nn.Module:
        """Network `name` as this step runs it, neither compiled nor DDP-wrapped (for calls that take a
        module, e.g. torch.func.functional_call): the model's plain module, or under torchrun with
        --norm syncbatch its twin whose batch norms synchronise (models/training/network_variants.py)."""
        return self._networks.uncompiled[name]

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


def set_requires_grad(nets: nn.Module | Sequence[nn.Module | None] | None, requires_grad: bool) -> None:
    """Switch the weight gradients of `nets` (one network or several; None is skipped) on or off."""
    for net in nets if isinstance(nets, (list, tuple)) else [nets]:
        for param in (net.parameters() if net is not None else ()):
            param.requires_grad = requires_grad
