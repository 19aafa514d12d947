"""--accum_steps K: K micro-batches per optimizer step, so that the global batch (micro-batch x K x
processes) can be chosen independently of memory and of the number of GPUs. The pieces the training
engine (models/training/engine.py) builds an accumulated step from; nothing here calls a model.

The contract a model follows (docs/extending.md, "Gradient accumulation"):

  - `optimize_parameters(step)` is one training step on the current input, each loss applied with
    `step.update_weights(optimizer, loss)` (unchanged: with K = 1 nothing here runs);
  - the model lists, in `accumulation_phases`, the methods that together make that step, split
    where a loss needs an optimizer's step taken earlier in the same step. pix2pix updates D, then
    judges G's output with the updated D: ("accumulate_D", "accumulate_G"). CycleGAN's losses all
    use the weights from before the step (D's loss takes the fakes computed before G's update):
    ("optimize_parameters",). A model that declares none is refused with --accum_steps > 1;
  - each phase starts from `set_input` (it runs its own forward pass).

The engine runs every phase over all micro-batches in turn. Within a phase, `update_weights` clears
the gradients at the first micro-batch, back-propagates each micro-batch's loss weighted by its share
of the step's images (`MicroStep.weight`: the gradient is then that of the mean over all of them, so
K micro-batches of b equal one batch of K*b for per-image mean losses), and steps the optimizer at the
last. Under DDP every micro-batch but the last runs in `no_sync` (no all-reduce of gradients that are
not complete yet); the last one's backward all-reduces the accumulated sum once.

A later phase repeats the forward pass of an earlier one on the same micro-batch: it replays the
random draws (dropout) the first phase made for that micro-batch (`random_state`), so both see the
same output. Batch-dependent normalisation (batch norm, syncbatch) normalises each micro-batch by its
own statistics: only instance norm (or none) makes K x b exactly a batch of K*b.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Sequence

import torch

from util.errors import UserError


@dataclass(frozen=True)
class MicroStep:
    """Where `update_weights` is within an optimizer step: micro-batch `index` of `count`, whose
    loss weighs `weight` (its share of the step's images)."""

    index: int
    count: int
    weight: float

    @property
    def first(self) -> bool:
        return self.index == 0

    @property
    def last(self) -> bool:
        return self.index == self.count - 1


def micro_batch_groups(batches: Iterable[dict], accum_steps: int) -> Iterator[list[dict]]:
    """The loader's batches, `accum_steps` at a time: one list per optimizer step (the epoch's last
    may be shorter)."""
    group: list[dict] = []
    for batch in batches:
        group.append(batch)
        if len(group) == accum_steps:
            yield group
            group = []
    if group:
        yield group


def steps_per_epoch(samples: int, batch_size: int, accum_steps: int, skips_incomplete: bool) -> int:
    """Optimizer steps one process takes in an epoch of its `samples` samples: micro-batches of `batch_size`
    (the last may be smaller), `accum_steps` of them per step (the last step may have fewer); a model that
    `skips_incomplete` batches takes no step whose last micro-batch is smaller than `batch_size`."""
    full, rest = divmod(samples, batch_size)
    steps = -(-(full + (rest > 0)) // accum_steps)
    return steps - 1 if skips_incomplete and rest else steps


def micro_steps(micro_batches: Sequence[dict]) -> list[MicroStep]:
    """One MicroStep per micro-batch, each weighted by its share of the step's images."""
    sizes = [_batch_size(batch) for batch in micro_batches]
    return [MicroStep(index, len(sizes), size / sum(sizes)) for index, size in enumerate(sizes)]


def _batch_size(batch: dict) -> int:
    return next(len(value) for value in batch.values() if isinstance(value, (torch.Tensor, list)))


def random_state(device: torch.device) -> tuple:
    """The global random state (and `device`'s, on CUDA): what a repeated forward pass replays."""
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return torch.get_rng_state(), cuda


def set_random_state(state: tuple, device: torch.device) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)


def check_accumulation(model: Any, accum_steps: int) -> None:
    """UserError when --accum_steps > 1 and the model has not split its step into phases (the options refuse
    it first, `accumulation_refusal`: here for a run set up from Python)."""
    refused = accumulation_refusal(type(model), model.opt.model, accum_steps)
    if refused:
        raise UserError(refused)


def accumulation_refusal(model_class: type, model: str, accum_steps: int) -> str | None:
    """Why --accum_steps cannot split the step of `model_class` (--model `model`) into micro-batches, or None."""
    if accum_steps > 1 and not model_class.accumulation_phases:
        return (f"--accum_steps {accum_steps}: --model {model} ({model_class.__name__}) does not declare "
                f"`accumulation_phases`, so its step cannot be split into micro-batches; use --accum_steps 1 (and a "
                f"larger --batch_size), or add them to the model (docs/extending.md, \"Gradient accumulation\").")
    return None


def weighted_means(seen: dict[str, list], steps: Sequence[MicroStep]) -> dict[str, torch.Tensor]:
    """Of the values each loss took over a phase's micro-batches (`seen`: name -> one value per
    micro-batch), the weighted mean of those the phase computed (a new value at every micro-batch);
    losses computed in another phase (or constants) are left out."""
    means = {}
    for name, values in seen.items():
        if all(value is values[0] for value in values):
            continue
        means[name] = sum(torch.as_tensor(value).detach() * step.weight for value, step in zip(values, steps))
    return means
