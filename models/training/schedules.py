"""Learning-rate schedules (--lr_policy), stepped once per epoch, and how a continued run takes
changed schedule flags."""
from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch.optim import lr_scheduler

from util.errors import UserError

LR_POLICIES = ("linear", "step", "plateau", "cosine")
ADAM_BETA2 = 0.999  # --beta2's default: Adam's, the reference's fixed value
LR_SCALINGS = ("none", "linear", "sqrt")  # --scale_lr: how the rate follows the global batch (from batch 1)


def global_batch(opt, world_size: int) -> int:
    """Images per optimizer step: --batch_size per micro-batch x --accum_steps x processes."""
    return opt.batch_size * opt.accum_steps * world_size


def batch_lr_factor(rule: str, batch: int) -> float:
    """What --scale_lr `rule` multiplies every learning rate by at global batch `batch`: --lr is the rate for
    one image per step (the reference's batch), so batch 1 keeps it under every rule."""
    if rule not in LR_SCALINGS:
        raise UserError(f"--scale_lr {rule} is not a rule; choose one of {', '.join(LR_SCALINGS)}.")
    return {"none": 1.0, "linear": float(batch), "sqrt": math.sqrt(batch)}[rule]


@dataclass(frozen=True)
class Warmup:
    """--warmup_epochs: every learning rate rises linearly over the run's first `images` training images (the
    warm-up's epochs x the images of one epoch, all processes together), reaching the schedule's rate at the
    last step within them. Counted in images, not steps, so that a run's warm-up is the same whatever its
    global batch; a continued run continues it from the images the training state has seen."""

    images: float = 0.0

    def factor(self, images_seen: int) -> float:
        """The multiplier of the scheduled rates for the step after which `images_seen` images have been trained on."""
        return 1.0 if images_seen >= self.images else images_seen / self.images


@contextmanager
def scaled_learning_rates(optimizers: Sequence[torch.optim.Optimizer], factor: float) -> Iterator[None]:
    """Within the block every optimizer steps at `factor` x its scheduled rates; after it they are the scheduled
    ones again (the schedulers step from them). A factor of 1 touches nothing."""
    if factor == 1.0:
        yield
        return
    scheduled = [[group["lr"] for group in optimizer.param_groups] for optimizer in optimizers]
    scale_for_batch(optimizers, factor)
    try:
        yield
    finally:
        for optimizer, rates in zip(optimizers, scheduled):
            for group, rate in zip(optimizer.param_groups, rates):
                group["lr"] = rate


def scale_for_batch(optimizers: Sequence[torch.optim.Optimizer], factor: float) -> None:
    """Multiply every learning rate of `optimizers` by `factor`: --scale_lr's `batch_lr_factor` on fresh
    optimizers, before their schedulers are made (and the warm-up's, for one step)."""
    if factor == 1.0:
        return
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            group["lr"] = group["lr"] * factor


def get_scheduler(optimizer: torch.optim.Optimizer, opt, first_epoch: int | None = None) -> lr_scheduler.LRScheduler:
    """The learning-rate schedule named by `--lr_policy`, stepped once per epoch.

    linear: constant for `n_epochs` epochs, then linearly towards zero over `n_epochs_decay`,
    counting from `first_epoch` (the run's first, default --epoch_count; a continued run passes the
    one it started at). step: times 0.1 every `lr_decay_iters` epochs. plateau: times 0.2 when the
    metric stalls. cosine: cosine annealing to zero over `n_epochs`.
    """
    if opt.lr_policy == "linear":
        epoch_count = opt.epoch_count if first_epoch is None else first_epoch

        def lambda_rule(epoch: int) -> float:
            return 1.0 - max(0, epoch + epoch_count - opt.n_epochs) / float(opt.n_epochs_decay + 1)
        return lr_scheduler.LambdaLR(optimizer, lr_lambda=lambda_rule)
    if opt.lr_policy == "step":
        return lr_scheduler.StepLR(optimizer, step_size=opt.lr_decay_iters, gamma=0.1)
    if opt.lr_policy == "plateau":
        return lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.2, threshold=0.01, patience=5)
    if opt.lr_policy == "cosine":
        return lr_scheduler.CosineAnnealingLR(optimizer, T_max=opt.n_epochs, eta_min=0)
    raise UserError(f"--lr_policy {opt.lr_policy} is not implemented; choose one of {', '.join(LR_POLICIES)}.")


def make_schedulers(optimizers: Sequence[torch.optim.Optimizer], opt, world_size: int,
                    resume_state: dict | None) -> list:
    """The schedulers of a model's fresh optimizers, after --scale_lr has scaled their rates to the global batch.
    A continued run's linear schedule counts from the epoch the run started at (its loaded states then replace
    the rates and the schedulers' own states)."""
    saved_options = (resume_state or {}).get("options")  # None: afresh, or a state that recorded none
    first_epoch = saved_options.get("epoch_count") if saved_options else None
    scale_for_batch(optimizers, batch_lr_factor(opt.scale_lr, global_batch(opt, world_size)))
    return [get_scheduler(optimizer, opt, first_epoch) for optimizer in optimizers]


def follow_changed_flags(optimizers: Sequence[torch.optim.Optimizer], schedulers: Sequence, opt, world_size: int,
                         resume_state: dict) -> None:
    """After a training state's optimizers and schedulers are loaded: this run's changed schedule flags
    (`reapply_schedule_flags`), and under --scale_lr the rates of this run's global batch where it differs from
    the state's (other --batch_size, --accum_steps or processes; --scale_lr itself cannot change)."""
    saved_options = resume_state.get("options")
    if not saved_options:  # a state that recorded no options: continued as it was
        return
    rule = opt.scale_lr
    saved_batch = (saved_options.get("batch_size", opt.batch_size) * saved_options.get("accum_steps", 1)
                   * resume_state.get("world_size", world_size))
    change = batch_lr_factor(rule, global_batch(opt, world_size)) / batch_lr_factor(rule, saved_batch)
    for optimizer, scheduler in zip(optimizers, schedulers):
        reapply_schedule_flags(optimizer, scheduler, opt, saved_options, change)


# What only the state_dict of each policy's scheduler holds (LambdaLR, StepLR, ReduceLROnPlateau, CosineAnnealingLR).
_POLICY_STATE_KEYS = {"linear": "lr_lambdas", "step": "step_size", "plateau": "patience", "cosine": "T_max"}


def policy_of_scheduler_state(state: dict) -> str | None:
    """The --lr_policy whose scheduler saved `state` (None if it is none of ours)."""
    return next((policy for policy, key in _POLICY_STATE_KEYS.items() if key in state), None)


def reapply_schedule_flags(optimizer: torch.optim.Optimizer, scheduler, opt, saved_options: dict,
                           batch_change: float = 1.0) -> None:
    """Make an optimizer and scheduler loaded from a training state follow this run's --lr, --beta1,
    --beta2, --fused_adam, --n_epochs, --n_epochs_decay and --lr_decay_iters where they differ from
    `saved_options` (those the state was trained with), which the loaded states would otherwise
    keep, and --scale_lr's rates at this run's global batch (`batch_change`: the new batch's factor
    over the saved one's). The schedule stays where it was (its epoch, a plateau's patience) and the
    rate becomes the new schedule's at that point: --lr scales every rate of the schedule. Does
    nothing when none of them changed, so that an unchanged continuation stays bit-identical."""
    keys = ("lr", "beta1", "beta2", "fused_adam", "n_epochs", "n_epochs_decay", "lr_decay_iters")
    current = {key: getattr(opt, key, ADAM_BETA2 if key == "beta2" else None) for key in keys}  # no --beta2: Adam's
    if batch_change == 1.0 and all(saved_options.get(key, current[key]) == current[key] for key in keys):
        return
    scale = opt.lr / saved_options.get("lr", opt.lr) * batch_change
    for group in optimizer.param_groups:
        group["betas"] = (opt.beta1, current["beta2"])
        group["fused"] = True if opt.fused_adam else None
        group["foreach"] = None if opt.fused_adam else True
        if "initial_lr" in group:
            group["initial_lr"] *= scale
    if isinstance(scheduler, lr_scheduler.ReduceLROnPlateau):  # no schedule to follow: where it is, scaled
        rates = [group["lr"] * scale for group in optimizer.param_groups]
    else:
        scheduler.base_lrs = [lr * scale for lr in scheduler.base_lrs]
        epoch = scheduler.last_epoch
        if isinstance(scheduler, lr_scheduler.StepLR):
            scheduler.step_size = opt.lr_decay_iters
            rates = [lr * scheduler.gamma ** (epoch // scheduler.step_size) for lr in scheduler.base_lrs]
        elif isinstance(scheduler, lr_scheduler.CosineAnnealingLR):
            scheduler.T_max = opt.n_epochs
            turn = math.pi * epoch / max(opt.n_epochs, 1)
            low = scheduler.eta_min
            rates = [low + (lr - low) * (1 + math.cos(turn)) / 2 for lr in scheduler.base_lrs]
        else:  # linear: its rule reads this run's --n_epochs and --n_epochs_decay
            rates = [lr * rule(epoch) for lr, rule in zip(scheduler.base_lrs, scheduler.lr_lambdas)]
    for group, rate in zip(optimizer.param_groups, rates):
        group["lr"] = rate
    scheduler._last_lr = rates  # what get_last_lr() reports until the next step

