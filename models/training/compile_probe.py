"""--compile keeps compiling only where it pays off on this machine.

torch.compile is not faster everywhere: on a 2-core CPU that other processes share, the compiled
kernels (each an OpenMP region over every core) wait for a core far more often than the eager
step's, so a compiled CycleGAN step can take far longer than the eager one there, while a quiet
machine gains a little (measurements: docs/benchmarks.md, "--compile on a small or shared CPU"). The load a
run meets cannot be read from the CPU model, so rather than guessing, the first steps of a
--compile run measure both: `--compile_probe N` steps eager (after one untimed step), then two
untimed compiled steps (the compiling), then N compiled steps. If the compiled
median is slower than the eager one by more than `TOLERANCE`, the run goes on eagerly; either way
it says what it measured. Rank 0's measurement decides for every rank (they must run the same
graphs). The choice is part of the training state, so a continued run runs as the run it continues
(bit-exact resume, once the choice has been made), without probing again.

The training steps of the probe are real steps, trained on as usual: eager and compiled compute the
same arithmetic up to rounding.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from util import distributed

TOLERANCE = 0.05     # a compiled median up to 5% slower is taken as noise, and kept
COMPILING_STEPS = 2  # untimed compiled steps: the first compiles, the second may specialise
GRAPH_RECORDING_STEPS = 1  # with CUDA graphs, one more: the first replayable step records them


class CompileProbe:
    """Times the first training steps eagerly and compiled, then keeps the faster (module docstring).

    The training engine drives it around each step: the networks the step runs are the compiled ones
    when `compiled_next()` says so; `record(seconds)` after the step (device work included). Once
    decided, `choice` is True (compiled) or False (eager), and `report` has received the one message
    the decision prints."""

    def __init__(self, probe_steps: int, report: Callable[[str], None], choice: bool | None = None,
                 clock: Callable[[], float] = time.perf_counter, active: bool = True,
                 compiling_steps: int = COMPILING_STEPS) -> None:
        self.active = active  # --compile; without it there is nothing to choose (choice None)
        self.probe_steps = probe_steps
        self.report = report
        self.clock = clock
        self.choice = choice  # None: not decided yet
        self.compiling_steps = compiling_steps
        self.step_index = 0
        self.eager_times: list[float] = []
        self.compiled_times: list[float] = []

    @classmethod
    def for_run(cls, compile_flag: bool, probe_steps: int, saved_choice: bool | None,
                report: Callable[[str], None], cuda_graphs: bool = False) -> "CompileProbe":
        """The probe a run needs: nothing to do without --compile; with --compile_probe 0 compiled
        throughout; where the run continues one that has already chosen (`saved_choice`, from its
        training state), that choice; otherwise the probe (eager first; with `cuda_graphs`, one more
        untimed compiled step, which records the graphs)."""
        if not compile_flag:
            return cls(0, report, active=False)
        if saved_choice is not None:
            return cls(0, report, choice=saved_choice)
        return cls(probe_steps, report, choice=True if probe_steps == 0 else None,
                   compiling_steps=COMPILING_STEPS + (GRAPH_RECORDING_STEPS if cuda_graphs else 0))

    @property
    def finished(self) -> bool:
        return not self.active or self.choice is not None

    def compiled_next(self) -> bool:
        """Whether the next step runs the compiled networks: once decided the choice; while probing,
        one untimed and `probe_steps` timed eager steps, then the compiled ones."""
        if self.finished:
            return bool(self.choice)
        return self.step_index >= 1 + self.probe_steps

    def record(self, seconds: float) -> None:
        """The time of the step just run (on the networks `compiled_next` named); decides after the
        last timed compiled step. Every rank must call it alike: rank 0's times decide for all."""
        if self.finished:
            return
        eager_end = 1 + self.probe_steps
        if 1 <= self.step_index < eager_end:
            self.eager_times.append(seconds)
        elif self.step_index >= eager_end + self.compiling_steps:
            self.compiled_times.append(seconds)
        self.step_index += 1
        if len(self.compiled_times) == self.probe_steps:
            self._decide()

    def _decide(self) -> None:
        measured = (statistics.median(self.eager_times), statistics.median(self.compiled_times))
        eager, compiled = distributed.broadcast_object(measured)  # rank 0's times decide for all
        keep = keep_compiled(eager, compiled)
        self.choice = keep
        speed = eager / compiled
        if keep:
            self.report(f"--compile: a compiled training step took {compiled:.3f} s against {eager:.3f} s eager "
                        f"(medians of {self.probe_steps} steps each, {speed:.2f}x); the run stays compiled.")
        else:
            self.report(f"--compile: a compiled training step took {compiled:.3f} s against {eager:.3f} s eager "
                        f"(medians of {self.probe_steps} steps each, {speed:.2f}x: slower on this machine), so "
                        f"the run goes on without compiling. Compiled kernels lose most when other programs "
                        f"share the cores; --compile_probe 0 keeps compiling regardless (docs/benchmarks.md, "
                        f"\"--compile on a small or shared CPU\").")


def keep_compiled(eager_seconds: float, compiled_seconds: float, tolerance: float = TOLERANCE) -> bool:
    """Keep the compiled step unless it is slower than the eager one beyond `tolerance`."""
    return compiled_seconds <= eager_seconds * (1 + tolerance)


def wait_for_device(device: torch.device) -> None:
    """Return when the device has finished its work: CUDA runs asynchronously, and without waiting
    a clock would time the launches, not the step."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
