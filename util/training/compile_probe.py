"""--compile keeps compiling only where it pays off on this machine.

torch.compile is not faster everywhere: on a 2-core CPU that other processes share, the compiled
kernels (each an OpenMP region over every core) wait for a core far more often than the eager
step's, and a compiled CycleGAN step took up to several times as long as the eager one, while a
quiet machine gained ~10% (docs/benchmarks.md, "--compile on a small or shared CPU"). The load a
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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

import torch

from util import distributed

TOLERANCE = 0.05     # a compiled median up to 5% slower is taken as noise, and kept
COMPILING_STEPS = 2  # untimed compiled steps: the first compiles, the second may specialise


class CompilableModel(Protocol):
    compile_choice: bool | None  # None: not decided yet; True: compiled; False: eager
    device: torch.device

    def use_compiled(self, compiled: bool) -> None: ...


class CompileProbe:
    """Times the first training steps eagerly and compiled, then keeps the faster (module docstring).

    Wrap each training step: `with probe.timing(model): model.optimize_parameters()`.
    `report` receives the one message the decision prints."""

    def __init__(self, probe_steps: int, report: Callable[[str], None],
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.probe_steps = probe_steps
        self.report = report
        self.clock = clock
        self.step_index = 0
        self.eager_times: list[float] = []
        self.compiled_times: list[float] = []
        self.finished = probe_steps == 0

    @classmethod
    def idle(cls) -> "CompileProbe":
        """A probe with nothing to do: its `timing` only runs the step."""
        return cls(0, lambda message: None)

    @classmethod
    def for_model(cls, model: CompilableModel, compile_flag: bool, probe_steps: int,
                  report: Callable[[str], None]) -> "CompileProbe":
        """The probe a run needs: an idle one without --compile, with --compile_probe 0 (compiled
        throughout) or when the run continues one that has already chosen (that choice applies)."""
        if not compile_flag:
            return cls.idle()
        if model.compile_choice is not None:
            model.use_compiled(model.compile_choice)
            return cls.idle()
        if probe_steps == 0:
            model.compile_choice = True
            return cls.idle()
        model.use_compiled(False)
        return cls(probe_steps, report)

    @contextmanager
    def timing(self, model: CompilableModel) -> Iterator[None]:
        """Around one training step: switch to the compiled networks when their turn comes, time
        the step (device work included), and decide after the last timed compiled step."""
        if self.finished:
            yield
            return
        eager_end = 1 + self.probe_steps
        compiled_from = eager_end + COMPILING_STEPS
        if self.step_index == eager_end:
            model.use_compiled(True)
        start = self.clock()
        yield
        _wait_for_device(model.device)
        seconds = self.clock() - start
        if 1 <= self.step_index < eager_end:
            self.eager_times.append(seconds)
        elif self.step_index >= compiled_from:
            self.compiled_times.append(seconds)
        self.step_index += 1
        if len(self.compiled_times) == self.probe_steps:
            self._decide(model)
            self.finished = True

    def _decide(self, model: CompilableModel) -> None:
        measured = (statistics.median(self.eager_times), statistics.median(self.compiled_times))
        eager, compiled = distributed.broadcast_object(measured)  # rank 0's times decide for all
        keep = keep_compiled(eager, compiled)
        model.compile_choice = keep
        model.use_compiled(keep)
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


def _wait_for_device(device: torch.device) -> None:
    # CUDA runs asynchronously: without waiting, the clock would time the launches, not the step.
    if device.type == "cuda":
        torch.cuda.synchronize(device)
