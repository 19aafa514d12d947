"""Learning-rate schedules (--lr_policy), stepped once per epoch, and how a continued run takes
changed schedule flags."""
from __future__ import annotations

import math

import torch
from torch.optim import lr_scheduler

from util.errors import UserError

LR_POLICIES = ("linear", "step", "plateau", "cosine")
ADAM_BETA2 = 0.999  # --beta2's default: Adam's, the reference's fixed value


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


# What only the state_dict of each policy's scheduler holds (LambdaLR, StepLR, ReduceLROnPlateau, CosineAnnealingLR).
_POLICY_STATE_KEYS = {"linear": "lr_lambdas", "step": "step_size", "plateau": "patience", "cosine": "T_max"}


def policy_of_scheduler_state(state: dict) -> str | None:
    """The --lr_policy whose scheduler saved `state` (None if it is none of ours)."""
    return next((policy for policy, key in _POLICY_STATE_KEYS.items() if key in state), None)


def reapply_schedule_flags(optimizer: torch.optim.Optimizer, scheduler, opt, saved_options: dict) -> None:
    """Make an optimizer and scheduler loaded from a training state follow this run's --lr, --beta1,
    --beta2, --fused_adam, --n_epochs, --n_epochs_decay and --lr_decay_iters where they differ from
    `saved_options` (those the state was trained with), which the loaded states would otherwise
    keep. The schedule stays where it was (its epoch, a plateau's patience) and the rate becomes
    the new schedule's at that point: --lr scales every rate of the schedule. Does nothing when
    none of them changed, so that an unchanged continuation stays bit-identical."""
    keys = ("lr", "beta1", "beta2", "fused_adam", "n_epochs", "n_epochs_decay", "lr_decay_iters")
    current = {key: getattr(opt, key, ADAM_BETA2 if key == "beta2" else None) for key in keys}  # no --beta2: Adam's
    if all(saved_options.get(key, current[key]) == current[key] for key in keys):
        return
    scale = opt.lr / saved_options.get("lr", opt.lr)
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

