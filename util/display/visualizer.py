"""What the training loop talks to: one call per event, fanned out to every back end of the run.

    visualizer = make_visualizer(opt, ctx.is_main)       # a NullVisualizer on every other rank
    visualizer.begin_epoch(position, images_in_epoch)
    visualizer.log_images(position, visuals, save_html)  # every --display_freq images
    visualizer.log_step(position, losses, lr, seconds_per_image, data_seconds)   # every --print_freq
    visualizer.advance(position)                         # after every step
    visualizer.log_validation(position, result, epoch_seconds)
    visualizer.message(text)
    visualizer.close()

The back ends (util/display/*_backend.py; see docs/visualization.md), in the order they hear events:
  console + files     always: loss lines, loss_log.txt, val_log.txt, metrics.jsonl, the plots, the progress
                      bar (--no_progress turns it off). First: the others draw from the files it writes.
  TensorBoard         --use_tensorboard
  wandb               --use_wandb
  visdom              --display_id > 0
  HTML page           unless --no_html
  your own loggers    --logger MODULE (util/display/user_loggers.py), in the order given
Only the main process shows or writes anything, so the loop needs no rank checks.
"""
from __future__ import annotations

import atexit
import dataclasses
import os
import traceback
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from util import html, util
from util.display.backend import LoggerBackend, RunInfo, previews
from util.display.console_backend import ConsoleBackend
from util.display.html_backend import HtmlBackend
from util.display.progress import ProgressBar
from util.display.tensorboard_backend import TensorBoardBackend
from util.display.user_loggers import logger_classes
from util.display.visdom_backend import VisdomBackend
from util.display.wandb_backend import WandbBackend
from util.errors import UserError
from util.position import Position

if TYPE_CHECKING:
    from util.evaluation.validation_result import ValidationResult

Backend = TypeVar("Backend", bound=LoggerBackend)
# The built-in back ends, in the order they hear events; train.py takes their flags (options/train_options.py).
BUILT_IN_BACKENDS: tuple[type[LoggerBackend], ...] = (ConsoleBackend, TensorBoardBackend, WandbBackend,
                                                       VisdomBackend, HtmlBackend)


def create_backends(opt: Any, progress: ProgressBar) -> list[LoggerBackend]:
    """The back ends the flags ask for, the console's first. Those that need an optional package are
    started before anything is written, so that a missing one (a UserError) leaves no trace."""
    run = RunInfo(opt=opt, run_dir=os.path.join(opt.checkpoints_dir, opt.name), say=progress.write)
    optional: list[type[LoggerBackend]] = [kind for kind, wanted in ((TensorBoardBackend, opt.use_tensorboard),
                                                                     (WandbBackend, opt.use_wandb),
                                                                     (VisdomBackend, opt.display_id > 0)) if wanted]
    users = logger_classes(list(opt.logger))
    for kind in optional + users:
        kind.check_can_start()  # all of them before any writes a file
    chosen = [kind(run) for kind in optional]
    if not opt.no_html and not html.available():  # a display, like visdom: training goes on without it
        run.say(f"warning: {html.MISSING}; training goes on without web/index.html. Pass --no_html to silence this.")
    elif not opt.no_html:
        chosen.append(HtmlBackend(run))
    os.makedirs(run.run_dir, exist_ok=True)  # --logger classes may write there from their constructor
    chosen += [_start_user_logger(logger, run) for logger in users]
    return [ConsoleBackend(run, progress)] + chosen


def _start_user_logger(kind: type[LoggerBackend], run: RunInfo) -> LoggerBackend:
    """An instance of the user's logger class; its constructor's error is a UserError naming it (before training)."""
    try:
        return kind(run)
    except Exception as err:  # noqa: BLE001 - the user's code: any error, named
        where = traceback.extract_tb(err.__traceback__)[-1]
        raise UserError(f"--logger {kind.__module__}: creating its {kind.__name__} raised {type(err).__name__}: {err} "
                        f"({where.filename}, line {where.lineno}); fix the logger or drop that --logger "
                        f"(docs/visualization.md).") from err


class Visualizer:
    """Every event of the training loop, passed to each back end in turn (see the module docstring).
    `Visualizer(opt)` builds the back ends the training flags ask for."""

    def __init__(self, opt: Any) -> None:
        self.display_channels = util.parse_display_channels(opt.display_channels)
        progress = ProgressBar(opt.n_epochs + opt.n_epochs_decay, enabled=not opt.no_progress,
                               interval=opt.progress_interval)
        self.backends = create_backends(opt, progress)
        self.closed = False
        atexit.register(self.close)  # also flush TensorBoard/wandb if training ends early

    def _each(self, event: str, *args: Any) -> None:
        """Pass an event to every back end. A logger of the user's own (--logger) that raises is named in
        one warning and switched off: training goes on (a display must not end a run); built-in back ends'
        errors are the project's and propagate."""
        for backend in list(self.backends):
            if type(backend) in BUILT_IN_BACKENDS:
                getattr(backend, event)(*args)
                continue
            try:
                getattr(backend, event)(*args)
            except Exception as err:  # noqa: BLE001 - the user's code: any error, reported and contained
                self.backends.remove(backend)
                where = traceback.extract_tb(err.__traceback__)[-1]
                self.message(f"warning: --logger {type(backend).__module__}: its {type(backend).__name__}.{event} "
                             f"raised {type(err).__name__}: {err} ({where.filename}, line {where.lineno}); that logger "
                             f"is switched off for the rest of this run and training goes on. Fix it, then continue "
                             f"the run with --continue_train to have it log again (docs/visualization.md).")

    def backend(self, kind: type[Backend]) -> Backend | None:
        """The back end of class `kind`, if this run has one."""
        return next((b for b in self.backends if isinstance(b, kind)), None)

    def begin_epoch(self, position: Position, images_in_epoch: int) -> None:
        """An epoch of `images_in_epoch` images starts (position.images_done > 0 when resuming mid-epoch)."""
        position = dataclasses.replace(position)  # a copy per event: the loop's own keeps changing
        self._each("begin_epoch", position, images_in_epoch)

    def log_step(self, position: Position, losses: Mapping[str, float], lr: float, seconds_per_image: float,
                 data_seconds: float) -> None:
        """The losses (averaged over all ranks), learning rate and timings at a print point."""
        position = dataclasses.replace(position)
        self._each("log_step", position, losses, lr, seconds_per_image, data_seconds)

    def log_images(self, position: Position, visuals: Mapping[str, Any], save_html: bool) -> None:
        """The model's current visuals (tensors), shown as 8-bit previews; `save_html`: keep them on the page."""
        position, images = dataclasses.replace(position), previews(visuals, self.display_channels)
        self._each("log_images", position, images, save_html)

    def log_validation(self, position: Position, result: ValidationResult, epoch_seconds: float) -> None:
        """A validation's scores and first images (as previews), after `epoch_seconds` of the epoch."""
        position = dataclasses.replace(position)
        result = dataclasses.replace(result, visuals=previews(result.visuals, self.display_channels))
        self._each("log_validation", position, result, epoch_seconds)

    def advance(self, position: Position) -> None:
        """A training step is done (every step: the back ends keep this cheap)."""
        position = dataclasses.replace(position)
        self._each("advance", position)

    def message(self, text: str) -> None:
        """A line for the user: the console and loss_log.txt, and any logger that wants it."""
        self._each("message", text)

    def close(self) -> None:
        """Finish every back end (the progress bar, TensorBoard, wandb, loss_plot.png, the final HTML
        page); a second call does nothing."""
        if self.closed:
            return
        self.closed = True
        atexit.unregister(self.close)  # does nothing if it is not registered
        self._each("close")


class NullVisualizer(Visualizer):
    """The visualizer of non-main ranks: the same calls, no back end, so nothing is shown or written."""

    def __init__(self) -> None:  # no super().__init__: that would start the back ends
        self.display_channels = None
        self.backends: list[LoggerBackend] = []
        self.closed = True

    def log_images(self, position: Position, visuals: Mapping[str, Any], save_html: bool) -> None:
        pass  # no previews to make for nobody

    def log_validation(self, position: Position, result: ValidationResult, epoch_seconds: float) -> None:
        pass


def make_visualizer(opt: Any, is_main: bool) -> Visualizer:
    """The run's visualizer on the main process, a NullVisualizer on every other rank."""
    return Visualizer(opt) if is_main else NullVisualizer()
