"""The console and the run's own files, always on: the loss lines (printed and appended to
`loss_log.txt`), messages, the progress bar, the validation record (`val_log.txt`, `metrics.jsonl`)
and the plots drawn from them (`metrics_plot.png` after each validation, `loss_plot.png` at the end).

It is the first back end of every run: the HTML page and visdom draw from the files it writes.
"""
from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from util.display.backend import LoggerBackend, RunInfo
from util.display.loss_log import plot_loss_log
from util.display.progress import ProgressBar
from util.display.validation_log import ValidationLog, plot_metrics
from util.position import Position
from util.safe_files import append_line

if TYPE_CHECKING:
    from util.evaluation.validation_result import ValidationResult

LOSS_LOG = "loss_log.txt"
LOSS_PLOT = "loss_plot.png"


def write_loss_plot(run: RunInfo) -> str | None:
    """`loss_plot.png` in the run folder from loss_log.txt; its path, or None (no losses yet, or a
    warning said why not: a plot never fails training)."""
    try:
        return plot_loss_log(os.path.join(run.run_dir, LOSS_LOG), os.path.join(run.run_dir, LOSS_PLOT), title=run.name)
    except ImportError as err:
        run.say(f"warning: no loss plot: {err} (`pip install matplotlib`)")
    except Exception as err:  # a plot must never fail the end of training
        run.say(f"warning: could not draw the loss plot ({type(err).__name__}: {err})")
    return None


def write_metrics_plot(run: RunInfo) -> str | None:
    """`metrics_plot.png` in the run folder from metrics.jsonl; its path, or None (as write_loss_plot)."""
    try:
        return plot_metrics(run.run_dir, run.name)
    except ImportError as err:
        run.say(f"warning: no metrics plot: {err} (`pip install matplotlib`)")
    except Exception as err:  # a plot must never fail training
        run.say(f"warning: could not draw the metrics plot ({type(err).__name__}: {err})")
    return None


class ConsoleBackend(LoggerBackend):
    """Console lines (through `progress`, which keeps them whole above its bar) and the run's files."""

    def __init__(self, run: RunInfo, progress: ProgressBar) -> None:
        super().__init__(run)
        self.progress = progress
        self.log_name = os.path.join(run.run_dir, LOSS_LOG)
        self.validation_log = ValidationLog(run.run_dir)
        os.makedirs(run.run_dir, exist_ok=True)
        # a new section (scripts/plot_losses.py joins them); append_line: a line cut by a kill stays alone
        append_line(self.log_name, f"================ Training Loss ({time.strftime('%c')}) ================")

    def begin_epoch(self, position: Position, images_in_epoch: int) -> None:
        self.progress.begin_epoch(position.epoch, images_in_epoch, position.images_done)

    def advance(self, position: Position) -> None:
        self.progress.update(position.images_done)

    def log_step(self, position: Position, losses: Mapping[str, float], lr: float, seconds_per_image: float,
                 data_seconds: float) -> None:
        """`(epoch: E, iters: I, time: T, data: D) name: value ...`, the reference's line (loss_log.py reads it)."""
        line = f"(epoch: {position.epoch}, iters: {position.images_done}, time: {seconds_per_image:.3f}, " \
               f"data: {data_seconds:.3f}) "
        self._print_and_log(line + "".join(f"{name}: {value:.3f} " for name, value in losses.items()))

    def log_validation(self, position: Position, result: ValidationResult, epoch_seconds: float) -> None:
        self.run.say(self.validation_log.append(position.epoch, position.total_iters, result.scores, result.seconds,
                                                epoch_seconds, result.images))
        write_metrics_plot(self.run)

    def message(self, text: str) -> None:
        self._print_and_log(text)

    def _print_and_log(self, text: str) -> None:
        self.run.say(text)
        append_line(self.log_name, text)

    def close(self) -> None:
        self.progress.close()
        plot = write_loss_plot(self.run)
        if plot:
            self.run.say(f"loss curves: {plot}")
