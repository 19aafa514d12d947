"""What the training loop must know about the losses the optimizers stepped on, kept on the device.

Reading a loss on the host waits for the device (a sync), which the training step avoids. So each
`BaseModel.update_weights` only notes its loss here with a few device operations, and the host looks
at the record where it reads losses anyway (print points, saves, the end of an epoch):
  - whether a loss was non-finite (NaN/inf) since the last look, and at which step first: a
    diverged run stops there with one message instead of training on NaN and overwriting the last
    good checkpoint with NaN weights;
  - the epoch's sum of the first optimizer's (the generator's) losses: the plateau learning-rate
    policy's signal when there is no validation metric.
"""
from __future__ import annotations

from typing import Callable

import torch

from util import distributed
from util.errors import UserError


class TrainingDiverged(UserError):
    """A loss became NaN or infinite; raised on every rank alike."""


class LossWatch:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        # float64 keeps the epoch's sum exact enough whatever its length (MPS has no float64).
        self.sum_dtype = torch.float32 if device.type == "mps" else torch.float64
        self.updates_since_check = 0
        self.first_bad_update = torch.full((), -1, dtype=torch.int64, device=device)
        self.epoch_loss_sum = torch.zeros((), dtype=self.sum_dtype, device=device)
        self.epoch_steps = 0
        self.updates = 0  # optimizer updates this process has taken: losses exist only after the first

    def note(self, optimizer_index: int, loss: torch.Tensor) -> None:
        """Record one optimizer update's loss (device operations only; no host sync)."""
        loss = loss.detach()
        self.updates += 1
        if optimizer_index == 0:
            self.epoch_loss_sum += loss.to(self.sum_dtype)
            self.epoch_steps += 1
        first_bad_here = (~torch.isfinite(loss)) & (self.first_bad_update < 0)
        self.first_bad_update = torch.where(first_bad_here, self.updates_since_check, self.first_bad_update)
        self.updates_since_check += 1

    def check(self, updates_per_step: int, epoch: int, total_iters: int, images_per_step: int,
              nonfinite_losses: Callable[[], list[str]], nonfinite_networks: list[str], advice: str) -> None:
        """Raise `TrainingDiverged` on every rank if any rank noted a non-finite loss since the
        last check, or has non-finite weights in `nonfinite_networks` (one host sync, a collective
        under DDP); otherwise start a new window. `nonfinite_losses()` names this rank's losses
        that are non-finite now (asked only then)."""
        loss_went_bad = bool(self.first_bad_update >= 0)
        if distributed.any_rank(loss_went_bad or bool(nonfinite_networks)):
            reports = distributed.gather_objects((int(self.first_bad_update), self.updates_since_check,
                                                  nonfinite_losses() if loss_went_bad else [], nonfinite_networks))
            raise TrainingDiverged(_diverged_message(reports, updates_per_step, epoch, total_iters,
                                                     images_per_step, advice))
        self.updates_since_check = 0

    def end_epoch(self) -> float:
        """The epoch's mean first-optimizer loss over all ranks (a collective); starts a new epoch."""
        mean = distributed.reduce_mean(self.epoch_loss_sum / max(self.epoch_steps, 1))
        self.epoch_loss_sum = torch.zeros_like(self.epoch_loss_sum)
        self.epoch_steps = 0
        return float(mean)

    def state_dict(self) -> dict:
        return {"epoch_loss_sum": self.epoch_loss_sum.detach().cpu(), "epoch_steps": self.epoch_steps}

    def load_state_dict(self, state: dict) -> None:
        self.epoch_loss_sum = state["epoch_loss_sum"].to(self.device, self.sum_dtype)
        self.epoch_steps = int(state["epoch_steps"])


def _diverged_message(reports: list[tuple[int, int, list[str], list[str]]], updates_per_step: int, epoch: int,
                      total_iters: int, images_per_step: int, advice: str) -> str:
    """Where (epoch, images seen) and in which loss training first went non-finite, and what to try."""
    bad_losses = [(first, updates, names) for first, updates, names, _ in reports if first >= 0]
    if bad_losses:
        first, updates, _ = min(bad_losses, key=lambda report: report[0])
        steps_ago = updates // updates_per_step - first // updates_per_step - 1
        names = sorted({name for _, _, rank_names in bad_losses for name in rank_names})
        what = f"loss {names[0]}" if len(names) == 1 else f"losses {', '.join(names)}" if names else "loss"
    else:  # finite losses, but an update left weights NaN or infinite
        steps_ago = 0
        names = sorted({name for *_, networks in reports for name in networks})
        what = f"weights of net{', net'.join(names)}"
    iteration = total_iters - steps_ago * images_per_step
    return (f"training diverged: the {what} became NaN or infinite at epoch {epoch}, iteration "
            f"{iteration} (images seen in total). Training stopped there, so no checkpoint was written "
            f"from the diverged weights: the last one saved is intact. {advice}")
