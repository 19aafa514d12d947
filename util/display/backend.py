"""The one interface every logger of a training run implements (console, HTML, visdom, TensorBoard,
wandb, and yours: see docs/visualization.md, "Writing a logger").

A back end is one class, built once on the main process as `Backend(run)` with the run's `RunInfo`,
that receives the training loop's events through the methods of `LoggerBackend`, each of which does
nothing unless the back end overrides it:

    begin_epoch(position, images_in_epoch)   an epoch starts (images_done > 0 when resuming mid-epoch)
    log_step(position, losses, lr, seconds_per_image, data_seconds)   every --print_freq images
    log_images(position, images, save_html)  every --display_freq images
    log_validation(position, result, epoch_seconds)   after each validation (--val_freq)
    advance(position)                        after every training step (keep it cheap)
    message(text)                            a line for the user (saving, end of epoch, ...)
    close()                                  once, when training ends or stops early

Before any of that, while train.py parses its flags, `modify_commandline_options(parser, is_train)`
may add the back end's own flags (as models and datasets do), each declaring its class on
--continue_train (`on_resume="silent"` for how a run is shown; util/resume_flags.py).

`position` (util.position.Position) says where the run stands: `epoch`, `images_done` in
it and `total_iters` since the run began, counted over all processes. It is a copy made for this
event: keep it if you like. Images are 8-bit HxWx3 previews (numpy), keyed by visual name
(`real_A`, `fake_B`, ...). Losses arrive already averaged over all processes.
"""
from __future__ import annotations

import argparse
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from util import util
from util.position import Position

if TYPE_CHECKING:  # only a type here; importing it would load the metrics for every display
    from util.evaluation.validation_result import ValidationResult


@dataclass(frozen=True)
class RunInfo:
    """What a back end knows about the run it shows.

    `opt`: the parsed, read-only options; `run_dir`: `--checkpoints_dir/--name`, where the run's files
    go; `say`: print one line on the console (above the progress bar) and nowhere else, for warnings."""

    opt: Any
    run_dir: str
    say: Callable[[str], None]

    @property
    def name(self) -> str:
        return self.opt.name

    @property
    def last_epoch(self) -> int:
        return self.opt.n_epochs + self.opt.n_epochs_decay


class LoggerBackend:
    """One place a training run is shown or recorded; override the events you need (see the module
    docstring). The constructor takes the `RunInfo`; a missing package or bad setting should raise
    util.errors.UserError there, before the run writes anything."""

    def __init__(self, run: RunInfo) -> None:
        self.run = run

    @staticmethod
    def modify_commandline_options(parser: argparse.ArgumentParser, is_train: bool) -> argparse.ArgumentParser:
        """Add the back end's own flags or change defaults; return the parser. Called for the built-in
        back ends and each --logger class, whether or not the run uses it (a back end's flags are
        train.py's flags)."""
        return parser

    @classmethod
    def check_can_start(cls) -> None:
        """Raise util.errors.UserError if this back end cannot start (e.g. its package is missing).
        Every chosen back end is asked before any is built, so that a refusal leaves no file behind."""

    def begin_epoch(self, position: Position, images_in_epoch: int) -> None:
        """An epoch of `images_in_epoch` images starts at `position`."""

    def log_step(self, position: Position, losses: Mapping[str, float], lr: float, seconds_per_image: float,
                 data_seconds: float) -> None:
        """The current losses, learning rate, computation seconds per image and seconds spent waiting for
        the batch."""

    def log_images(self, position: Position, images: Mapping[str, np.ndarray], save_html: bool) -> None:
        """The current visuals; `save_html`: --update_html_freq asks for them to be kept on the HTML page."""

    def log_validation(self, position: Position, result: ValidationResult, epoch_seconds: float) -> None:
        """Scores on the held-out images (`result.visuals`: previews of the first one), and the seconds
        the epoch took with its validation."""

    def advance(self, position: Position) -> None:
        """One training step is done (called every step: keep it cheap)."""

    def message(self, text: str) -> None:
        """A line for the user."""

    def close(self) -> None:
        """Training ended: flush and finish. Called once."""


def previews(visuals: Mapping[str, Any], display_channels: list[int] | None) -> OrderedDict:
    """The 8-bit HxWx3 preview of the first image of each visual (tensors in [-1, 1], or arrays as they are)."""
    return OrderedDict((label, util.tensor2im(image, channels=display_channels)) for label, image in visuals.items())


class ImagesSeen:
    """The step of TensorBoard and wandb points: images seen since training began.

    A run continued with weights only (`--continue_train --epoch_count N`) starts its counter at 0
    again; its points are moved to where its first epoch says it is, so that they follow the earlier
    run's. The offset is fixed by the first point."""

    def __init__(self) -> None:
        self.expected_start = 0          # where the first epoch says we are
        self.offset: int | None = None

    def begin_epoch(self, position: Position, images_in_epoch: int) -> None:
        if self.offset is None:
            self.expected_start = (position.epoch - 1) * images_in_epoch + position.images_done

    def step(self, position: Position) -> int:
        if self.offset is None:
            self.offset = self.expected_start if position.total_iters <= self.expected_start else 0
        return int(position.total_iters) + self.offset
