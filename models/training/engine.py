"""How a model is trained, apart from what the model computes: the networks as training calls them
(DDP, --compile and its probe), gradient scaling, gradient accumulation, the moving averages, the
record of the losses, and the training state that holds all of it.

train.py builds the engine once the model is set up and hands it each step's batches:

    engine = TrainingEngine(model, opt, ctx, start.state, start.rank_state, report)
    engine.train_step(micro_batches)      # one optimizer step: --accum_steps micro-batches

The engine calls the model's contract (`set_input`, `optimize_parameters(step)` or its
`accumulation_phases`), handing it a `TrainingStep` (models/training/step.py) with the networks to
call; the model calls nothing back. The engine is also what the Checkpointer saves and resumes
(models/training/checkpointer.py: `save_networks`, `shared_training_state`, ...) and what validation
translates with (`inference_networks`).
"""
from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext

import torch
from torch import nn

import data
from models.base_model import BaseModel
from models.inference.application import inference_views
from models.inference.windows import Windows
from models.network_views import NetworkViews
from models.training import accumulation
from models.training.compile_probe import CompileProbe, wait_for_device
from models.training.ema import GeneratorEMA
from models.training.loss_watch import LossWatch
from models.training.network_variants import NetworkVariants, captures_cuda_graphs
from models.training.schedules import scaled_learning_rates
from models.training.step import TrainingStep
from util import distributed
from util.console import print0
from util.distributed import DistContext


class TrainingEngine:
    """The training mechanics of one set-up model (see the module docstring). `resume_state` and
    `rank_state` are the training state a run continues from (models.training.training_state) and this
    rank's part of it; `report` receives the compile probe's message."""

    def __init__(self, model: BaseModel, opt: argparse.Namespace, ctx: DistContext, resume_state: dict | None = None,
                 rank_state: dict | None = None, report: Callable[[str], None] = print0) -> None:
        self.model = model
        self.opt = opt
        self.device = ctx.device
        accumulation.check_accumulation(model, opt.accum_steps)
        backend = ctx.backend if ctx.is_distributed else None
        cuda_graphs, declined = captures_cuda_graphs(opt.compile, self.device, backend)
        if declined:
            report(declined)
        # each network as training calls it (DDP, compiled) beside the model's plain module
        self.variants = NetworkVariants(model.named_networks(), self.device, opt.compile,
                                        synchronise_batch_norm=opt.norm == "syncbatch", cuda_graphs=cuda_graphs)
        # One gradient scaler per optimizer (fp16 only; disabled scalers do nothing) and the
        # on-device record of the losses each one stepped on.
        self.grad_scalers = [torch.amp.GradScaler(self.device.type, enabled=opt.amp == "fp16")
                             for _ in model.optimizers]
        self.loss_watch = LossWatch(self.device)
        # --ema_decay: moving averages of the networks used at inference (the parser keeps it in [0, 1))
        self.ema = GeneratorEMA(model.generators(), opt.ema_decay) if opt.ema_decay > 0 else None
        saved = (resume_state or {}).get("model")
        if saved is not None:
            self._load_shared_state(saved)
        if rank_state is not None and "loss_watch" in rank_state["model"]:
            self.loss_watch.load_state_dict(rank_state["model"]["loss_watch"])
        saved_choice = (saved or {}).get("compile_choice")
        self.probe = CompileProbe.for_run(opt.compile, opt.compile_probe, saved_choice, report, cuda_graphs)
        self._saved_compile_choice = saved_choice  # kept, and saved again, by a continued run without --compile
        # the variant the probe wants first (the continued run's choice, or eager to time), from the start:
        # a run continued at an epoch's end validates before its first step
        self._compiled_now = self.probe.compiled_next()
        self.variants.use_compiled(self._compiled_now)

    # ------------------------------------------------------------------ one training step
    def train_step(self, micro_batches: list[dict], lr_factor: float = 1.0) -> None:
        """One optimizer step, from the loader's batches to the updated weights, every optimizer at `lr_factor` x
        its scheduled rates (--warmup_epochs; train.py passes it). Every step, of every model:

        1. --compile: the compile probe may switch every network between its compiled and eager variant;
        2. the model's losses (`optimize_parameters`) on the batch, moved to the device in the run's
           precision by its `set_input`, its forward passes under its `autocast` (--amp); with
           --accum_steps K, each of the model's `accumulation_phases` over the K micro-batches in turn;
        3. each loss applied by `step.update_weights` (models/training/step.py): zero_grad, backward
           (scaled under --amp fp16; DDP all-reduces the gradients in the last micro-batch's backward),
           optimizer.step, and the loss noted on the device for the loss watch (no host sync);
        4. --ema_decay: the generators' moving averages follow the new weights.
        """
        if self.probe.compiled_next() != self._compiled_now:  # 1. the probe's turn to switch every network
            self._compiled_now = self.probe.compiled_next()
            self.variants.use_compiled(self._compiled_now)
        if self.variants.cuda_graphs and self._compiled_now:
            # a new step: the graphs may reuse the memory of the last step's outputs (none is kept: the image
            # pool and the loss record copy theirs)
            torch.compiler.cudagraph_mark_step_begin()
        start = self.probe.clock()
        step = TrainingStep(self.variants.for_step(), self.model.optimizers, self.grad_scalers, self.loss_watch)
        with scaled_learning_rates(self.model.optimizers, lr_factor):
            if len(micro_batches) == 1:  # 2.-3.
                self.model.set_input(micro_batches[0])
                self.model.optimize_parameters(step)
            else:
                self._accumulated_step(micro_batches, step)
        if not self.probe.finished:
            wait_for_device(self.device)
            self.probe.record(self.probe.clock() - start)
        if self.ema is not None:  # 4.
            self.ema.update(self.model.generators())

    def _accumulated_step(self, micro_batches: list[dict], step: TrainingStep) -> None:
        """Each of the model's `accumulation_phases` over every micro-batch in turn (models/training/accumulation.py);
        the logged losses are the means over the micro-batches, weighted as the gradients are."""
        model = self.model
        micro_steps = accumulation.micro_steps(micro_batches)
        random_states = []
        for number, phase in enumerate(model.accumulation_phases):
            seen: dict[str, list] = {name: [] for name in model.loss_names}
            for micro, batch in zip(micro_steps, micro_batches):
                if number == 0:
                    random_states.append(accumulation.random_state(self.device))
                else:  # the random draws of the first phase's pass over this micro-batch
                    accumulation.set_random_state(random_states[micro.index], self.device)
                # DDP all-reduces only in the last micro-batch's backward: the others add to the gradients
                sync = nullcontext() if micro.last else distributed.no_gradient_sync(self.variants.trained_modules())
                step.micro = micro
                with sync:
                    model.set_input(batch)
                    getattr(model, phase)(step)
                for name in seen:
                    seen[name].append(getattr(model, "loss_" + name, 0.0))
            for name, mean in accumulation.weighted_means(seen, micro_steps).items():
                setattr(model, "loss_" + name, mean)
        step.micro = None

    @property
    def has_stepped(self) -> bool:
        """Whether this process has updated weights yet: a model's losses and training visuals exist only then
        (one that skips an incomplete batch may have skipped every batch so far, e.g. in a resumed epoch's end)."""
        return self.loss_watch.updates > 0

    @property
    def compile_choice(self) -> bool | None:
        """--compile: whether the run trains compiled (True) or eagerly (False), once the probe has
        decided; None before. Without --compile, the choice of the run this one continues (None if none).
        Saved with the training state."""
        return self.probe.choice if self.opt.compile else self._saved_compile_choice

    def check_finite(self, epoch: int, total_iters: int, images_per_step: int, weights: bool = False) -> None:
        """Raise `TrainingDiverged` on every rank if any rank stepped on a non-finite loss since the
        last check (or, with `weights`, holds non-finite weights). One host sync; call it where
        losses are read, and with `weights` before every save, so that no checkpoint is written
        from a diverged model."""
        model = self.model

        def nonfinite_losses() -> list[str]:
            return [name for name in model.loss_names
                    if not torch.isfinite(torch.as_tensor(getattr(model, "loss_" + name, 0.0))).all()]

        nonfinite_networks = [name for name, net in model.named_networks().items() if weights and not _all_finite(net)]
        self.loss_watch.check(len(model.optimizers), epoch, total_iters, images_per_step, nonfinite_losses,
                              nonfinite_networks, self._divergence_advice())

    def _divergence_advice(self) -> str:
        advice = [f"Start again with a lower --lr (it was {self.opt.lr:g})"]
        if self.opt.amp != "none":
            advice.append(f"without --amp {self.opt.amp} (half precision overflows more easily)")
        if self.opt.gan_mode != "lsgan":
            advice.append("with --gan_mode lsgan, which is steadier")
        return ", or ".join(advice) + "."

    def update_learning_rate(self, plateau_metric: float | None = None,
                             plateau_step: bool = True) -> tuple[float, float]:
        """At the end of every epoch, on every rank (the epoch's loss is averaged over them): step the
        model's schedules; returns (old lr, new lr). The plateau policy watches `plateau_metric` (the
        validation metric, lower is better) when given, else the epoch's mean generator loss; with
        `plateau_step` false (an epoch without validation) it waits."""
        epoch_loss = self.loss_watch.end_epoch()  # a collective: every rank, every epoch
        watched = plateau_metric if plateau_metric is not None else (epoch_loss if plateau_step else None)
        return self.model.update_learning_rate(watched)

    # ------------------------------------------------------------------ validation
    @contextmanager
    def inference_networks(self, eval_mode: bool = True, ema: bool = False) -> Iterator[NetworkViews]:
        """The model's networks as test.py calls them, for validation: never DDP-wrapped (processes
        may validate different numbers of images), compiled as the run is, volumes' generators in
        sliding windows; in eval mode (`eval_mode`) or in training mode with their buffers (batch-norm
        running statistics) restored afterwards; with `ema` the generators' moving averages. Gradients
        are off; training resumes unchanged after the block."""
        if ema and self.ema is None:
            raise RuntimeError("inference_networks(ema=True) needs --ema_decay > 0")
        nets = {name: self.variants.outside_ddp(name) for name in self.model.model_names}
        if ema:
            nets.update(self.ema.networks())
        modes = {name: net.training for name, net in nets.items()}
        buffers = {name: [buffer.clone() for buffer in net.buffers()] for name, net in nets.items()}
        for net in nets.values():
            net.train(not eval_mode)
        volumes = data.spatial_dims(self.opt) == 3  # whole volumes, in sliding windows as test.py translates them
        windows = Windows.for_volumes(self.opt.patch_size, self.opt.window_overlap, self.opt.window_batch) \
            if volumes else None
        try:
            with torch.no_grad():
                yield inference_views(nets, self.model.networks_with_role("generator"), self.opt, windows)
        finally:
            for name, net in nets.items():
                with torch.no_grad():
                    for kept, buffer in zip(buffers[name], net.buffers()):
                        buffer.copy_(kept)
                net.train(modes[name])

    # ------------------------------------------------------------------ what the Checkpointer saves
    def save_networks(self, label: str, include_ema: bool = True) -> None:
        """`<label>_net_<name>.pth` of every network and, with --ema_decay (unless `include_ema` is
        false), `<label>_ema_net_<name>.pth` of every averaged network (all ranks call; main writes)."""
        self.model.save_networks(label)
        if include_ema and self.ema is not None:
            self.save_ema_networks(label)

    def save_ema_networks(self, label: str) -> None:
        """`<label>_ema_net_<name>.pth` of every averaged network (all ranks must call)."""
        self.model.write_networks(f"{label}_ema", self.ema.networks())

    def shared_training_state(self) -> dict:
        """What all ranks share: the model's state (weights, optimizers, schedules, its own streams)
        and the engine's (gradient scalers, moving averages, the compile choice)."""
        return {**self.model.shared_training_state(),
                "grad_scalers": [scaler.state_dict() for scaler in self.grad_scalers],
                "ema": self.ema.state_dict() if self.ema is not None else None,
                "compile_choice": self.compile_choice}

    def rank_training_state(self) -> dict:
        """This rank's part: the model's and its share of the epoch's losses."""
        return {**self.model.rank_training_state(), "loss_watch": self.loss_watch.state_dict()}

    def _load_shared_state(self, state: dict) -> None:
        for scaler, saved in zip(self.grad_scalers, state.get("grad_scalers", [])):
            if saved:  # a disabled scaler saves an empty state
                scaler.load_state_dict(saved)
        if self.ema is not None and state.get("ema"):
            self.ema.load_state_dict(state["ema"])
        elif self.ema is not None:
            print0("note: the run being continued kept no moving averages; --ema_decay starts them from "
                   "the current weights.")


def _all_finite(net: nn.Module) -> bool:
    """No NaN or infinity in the network's floating-point weights (one host sync)."""
    checks = [torch.isfinite(p.detach()).all() for p in net.parameters() if p.is_floating_point()]
    return bool(torch.stack(checks).all()) if checks else True
