"""How a model's training step runs, apart from what the model computes: precision and gradient
scaling, gradient accumulation, compiled and eager variants of the networks, DDP wrapping.

Every model has one (`model.engine`, made with the model); train.py's loop drives the steps through
it (`engine.train_step(micro_batches)`) and the compile probe switches its variants. A model's own
code meets it only through the three calls of the model contract, which delegate here:
`self.autocast()`, `self.update_weights(optimizer, loss)` and `with self.frozen(self.netD) as netD`.
"""
from __future__ import annotations

import contextlib
from contextlib import contextmanager
from collections.abc import Collection
from typing import TYPE_CHECKING, Iterator

import torch
from torch import nn

import data
from models import networks
from models.accumulation import MicroStep, accumulated_step
from models.loss_watch import LossWatch
from models.sliding_window import windowed_generators
from models.sync_batchnorm import convert_sync_batchnorm
from util import distributed
from util.errors import UserError

if TYPE_CHECKING:
    from models.base_model import BaseModel

AMP_DTYPES = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}


class TrainingEngine:
    """The training mechanics of one model (see the module docstring)."""

    def __init__(self, model: "BaseModel", opt, device: torch.device) -> None:
        self.model = model
        self.opt = opt
        self.device = device
        self.dtype = getattr(torch, opt.dtype)
        # --channels_last: channels-last 3-D for volumes (the same layout idea, one axis more)
        channels_last = torch.channels_last_3d if data.spatial_dims(opt) == 3 else torch.channels_last
        self.memory_format = channels_last if opt.channels_last else torch.contiguous_format
        self.amp_dtype = AMP_DTYPES[opt.amp]
        if opt.amp == "fp16" and device.type != "cuda":
            raise UserError("--amp fp16 needs a CUDA GPU (on the CPU, float16 arithmetic is slow and "
                            "unsupported by many kernels); use --amp bf16 on the CPU.")
        # One gradient scaler per optimizer (fp16 only; disabled scalers do nothing), made with the
        # optimizers' states in `setup`, and the on-device record of the losses each one stepped on.
        self.grad_scalers: list[torch.amp.GradScaler] = []
        self.loss_watch = LossWatch(device)
        self._micro: MicroStep | None = None  # within a micro-batch of an accumulated step
        self._step_losses: dict[int, torch.Tensor] = {}
        # Networks as the generator step calls them through `frozen` (compiled, never DDP-wrapped).
        self._unsynced: dict[str, nn.Module] = {}
        # --compile: each network as run compiled (True) and eagerly (False), as (trained, unsynced),
        # so that `use_compiled` can switch; the choice, once made, is part of the training state.
        self._run_variants: dict[str, dict[bool, tuple[nn.Module, nn.Module]]] = {}
        self.compile_choice: bool | None = None

    # ------------------------------------------------------------------ one training step
    def train_step(self, micro_batches: list[dict]) -> None:
        """One optimizer step (train.py's loop): a batch as before (`set_input`, `optimize_parameters`),
        or with --accum_steps several micro-batches, phase by phase (models/accumulation.py)."""
        if len(micro_batches) == 1:
            self.model.set_input(micro_batches[0])
            self.model.optimize_parameters()
        else:
            accumulated_step(self.model, micro_batches)

    def autocast(self):
        """The context in which forward passes and losses run (bf16/fp16 autocast with --amp)."""
        return torch.autocast(self.device.type, dtype=self.amp_dtype or torch.bfloat16,
                              enabled=self.amp_dtype is not None)

    def update_weights(self, optimizer: torch.optim.Optimizer, loss: torch.Tensor) -> None:
        """Apply `loss` to the parameters of `optimizer` (one of the model's): clear their gradients,
        back-propagate, step, once per optimizer and iteration.

        Under --amp fp16 the loss is scaled by this optimizer's own GradScaler, which unscales the
        gradients, skips the step if they overflowed and adjusts its scale - all here, so no model
        can forget part of it. The loss is also noted on the device (no host sync) so that a
        diverging run is caught when losses are next read (`BaseModel.check_finite`).
        """
        index = next(i for i, known in enumerate(self.model.optimizers) if known is optimizer)
        if not self.grad_scalers:
            self.make_grad_scalers()
        scaler = self.grad_scalers[index]
        micro = self._micro
        if micro is not None:  # --accum_steps: a micro-batch's share; the step comes at the last one
            self._accumulate(index, optimizer, loss, micro)
            if not micro.last:
                return
            loss = self._step_losses.pop(index)
        else:
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        self.loss_watch.note(index, loss)

    def _accumulate(self, index: int, optimizer: torch.optim.Optimizer, loss: torch.Tensor, micro: MicroStep) -> None:
        """Add one micro-batch's gradient (its loss weighted by its share of the step's images) to
        those of the micro-batches before it, and its loss to the step's (noted once, at the step)."""
        if micro.first:
            optimizer.zero_grad(set_to_none=True)
            self._step_losses[index] = 0.0
        self.grad_scalers[index].scale(loss * micro.weight).backward()
        self._step_losses[index] = self._step_losses[index] + loss.detach() * micro.weight

    @property
    def micro(self) -> MicroStep | None:
        """The micro-batch of an accumulated step being trained on (--accum_steps), None outside one."""
        return self._micro

    @contextmanager
    def micro_step(self, step: MicroStep) -> Iterator[None]:
        """Within the block, `update_weights` accumulates micro-batch `step` (models/accumulation.py)."""
        self._micro = step
        try:
            yield
        finally:
            self._micro = None

    def make_grad_scalers(self) -> None:
        """One per optimizer of the model. Scales fp16 losses so that small gradients do not
        underflow; a no-op otherwise."""
        self.grad_scalers = [torch.amp.GradScaler(self.device.type, enabled=self.opt.amp == "fp16")
                             for _ in self.model.optimizers]

    @contextmanager
    def frozen(self, named: dict[str, nn.Module], nets: tuple[nn.Module, ...]) -> Iterator:
        """`BaseModel.frozen`: `nets` (of the model's `named` networks) get no weight gradients in
        the block, and are yielded unwrapped from DDP (still compiled under --compile)."""
        names = {id(net): name for name, net in named.items()}
        unsynced = tuple(self._unsynced.get(names.get(id(net)), distributed.unwrap(net)) for net in nets)
        _set_requires_grad(nets, False)
        try:
            yield unsynced[0] if len(unsynced) == 1 else unsynced
        finally:
            _set_requires_grad(nets, True)

    def check_finite(self, epoch: int, total_iters: int, images_per_step: int, weights: bool = False) -> None:
        """Raise `TrainingDiverged` on every rank if any rank stepped on a non-finite loss since
        the last check (or, with `weights`, holds non-finite weights). One host sync; call it where
        losses are read, and with `weights` before every save, so that no checkpoint is written
        from a diverged model."""
        def nonfinite_losses() -> list[str]:
            return [name for name in self.model.loss_names
                    if not torch.isfinite(torch.as_tensor(getattr(self.model, "loss_" + name, 0.0))).all()]

        nonfinite_networks = [name for name, net in self.model.named_networks().items()
                              if weights and not _all_finite(net)]
        self.loss_watch.check(len(self.model.optimizers), epoch, total_iters, images_per_step, nonfinite_losses,
                              nonfinite_networks, self._divergence_advice())

    def _divergence_advice(self) -> str:
        advice = [f"Start again with a lower --lr (it was {self.opt.lr:g})"]
        if self.opt.amp != "none":
            advice.append(f"without --amp {self.opt.amp} (half precision overflows more easily)")
        if getattr(self.opt, "gan_mode", "lsgan") != "lsgan":
            advice.append("with --gan_mode lsgan, which is steadier")
        return ", or ".join(advice) + "."

    @contextmanager
    def inference_networks(self, eval_mode: bool = True, ema: bool = False) -> Iterator[None]:
        """Within the block the model translates as test.py does, for validation: every network is
        its plain module (never DDP-wrapped: processes may validate different numbers of images;
        still compiled under --compile; generators of volumes in sliding windows), in eval mode (`eval_mode`) or in training mode with its
        buffers (batch-norm running statistics) restored afterwards, and with `ema` the generators
        are their moving averages. Gradients are off; training resumes unchanged after the block."""
        if ema and self.model.ema is None:
            raise RuntimeError("inference_networks(ema=True) needs --ema_decay > 0")
        trained = self.model.named_networks()
        plain = {name: self.plain(name, net) for name, net in trained.items()}
        if ema:
            plain.update(self.model.ema.networks())
        modes = {name: net.training for name, net in plain.items()}
        buffers = {name: [b.clone() for b in net.buffers()] for name, net in plain.items()}
        for name, net in plain.items():
            setattr(self.model, "net" + name, net.train(not eval_mode))
        volumes = data.spatial_dims(self.opt) == 3  # whole volumes, in sliding windows as test.py translates them
        windows = windowed_generators(self.model, self.opt.patch_size, self.opt.window_overlap,
                                      self.opt.window_batch) if volumes else contextlib.nullcontext()
        try:
            with torch.no_grad(), windows:
                yield
        finally:
            for name, net in plain.items():
                for kept, buffer in zip(buffers[name], net.buffers()):
                    buffer.copy_(kept)
                net.train(modes[name])
            for name, net in trained.items():
                setattr(self.model, "net" + name, net)

    # ------------------------------------------------------------------ the networks as the run calls them
    def set_precision(self, nets: dict[str, nn.Module]) -> None:
        """The networks' dtype and memory format, in place (the optimizers keep the same parameter
        objects). What --channels_last, --deterministic and --checkpoint_activations need of their
        layers, the networks were built with (models/networks/layers.py)."""
        for net in nets.values():
            net.to(dtype=self.dtype, memory_format=self.memory_format)

    def prepare_for_run(self, name: str, net: nn.Module) -> nn.Module:
        """`net` as training or testing calls it: batch norm synchronised and the network
        DDP-wrapped when training under torchrun, compiled with --compile. The compiled network
        without DDP is kept for `frozen`."""
        training_together = self.opt.isTrain and distributed.is_distributed()
        if training_together and self.opt.norm == "syncbatch":
            net = convert_sync_batchnorm(net, self.device)  # keeps the same Parameter objects
        synced = distributed.wrap_ddp(net, self.device) if training_together else net
        if not self.opt.compile:
            self._unsynced[name] = net
            return synced
        compiled = networks.compile_network(net, name)
        compiled_synced = compiled if synced is net else networks.compile_network(synced, name)
        self._run_variants[name] = {True: (compiled_synced, compiled), False: (synced, net)}
        self._unsynced[name] = compiled
        return compiled_synced

    def use_compiled(self, compiled: bool, names: Collection[str] | None = None) -> None:
        """--compile: run the model's networks (or those of `names`, e.g. "D_A") compiled (as `setup`
        leaves them) or eagerly (the compile probe's choice where compiling proved slower,
        util/training/compile_probe.py)."""
        for name, variants in self._run_variants.items():
            if names is not None and name not in names:
                continue
            trained, unsynced = variants[compiled]
            setattr(self.model, "net" + name, trained)
            self._unsynced[name] = unsynced

    def plain(self, name: str, net: nn.Module) -> nn.Module:
        """Network `name` (currently `net`) as inference calls it: never DDP-wrapped, still compiled."""
        return self._unsynced.get(name, net)


def _set_requires_grad(nets, requires_grad: bool) -> None:
    for net in nets:
        if net is not None:
            for param in net.parameters():
                param.requires_grad = requires_grad


def _all_finite(net: nn.Module) -> bool:
    """No NaN or infinity in the network's floating-point weights (one host sync)."""
    checks = [torch.isfinite(p.detach()).all() for p in net.parameters() if p.is_floating_point()]
    return bool(torch.stack(checks).all()) if checks else True
