"""Progress of the training run on the main process: images done, images/s and the time left.

On a terminal this is a tqdm bar per epoch (iterations, images/s, time left in the epoch and in the
whole run). When stdout is not a terminal (a CI log, `nohup`, a pipe) it prints plain lines instead,
no carriage returns: one every `interval` seconds and one at the end of each epoch, e.g.

    [progress] epoch 3/200: 120/400 images (30%), 15.2 img/s, epoch ETA 0:00:18, run ETA 2:27:11

Other output (the loss lines, messages) goes through `write`, which prints it above the bar so that
the bar never garbles it. `update` is called after every training step and costs a clock read.
"""
from __future__ import annotations

import io
import os
import sys
import time
from typing import Callable, TextIO


def format_seconds(seconds: float) -> str:
    """`H:MM:SS` (days as `Nd H:MM:SS`), or `?` when unknown."""
    if seconds is None or seconds != seconds or seconds == float("inf") or seconds < 0:
        return "?"
    seconds = int(round(seconds))
    days, seconds = divmod(seconds, 86400)
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    text = f"{hours}:{minutes:02d}:{seconds:02d}"
    return f"{days}d {text}" if days else text


def stream_is_terminal(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or not a real file
        return False


def terminal_width(stream: TextIO) -> int:
    """Columns of the terminal behind `stream`; 0 if unknown."""
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError, io.UnsupportedOperation):
        return 0


class ProgressBar:
    """Per-epoch progress: a bar on a terminal, periodic plain lines otherwise, nothing if disabled.

    `last_epoch` is the number of the final epoch (for the whole-run ETA); `interval` the seconds
    between plain lines (0: a line after every step); `terminal` overrides the detection.
    """

    def __init__(self, last_epoch: int, stream: TextIO | None = None, enabled: bool = True,
                 interval: float = 60.0, terminal: bool | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.stream = stream if stream is not None else sys.stdout
        self.enabled = enabled
        self.terminal = stream_is_terminal(self.stream) if terminal is None else terminal
        self.interval = max(0.0, float(interval))
        self.last_epoch = last_epoch
        self.clock = clock
        self.bar = None
        self.active = False          # an epoch has begun and not yet ended
        self.epoch = 0
        self.total = 0               # images in this epoch
        self.start_done = 0          # images already done when the epoch (or the resumed run) began
        self.done = 0
        self.start_time = 0.0
        self.last_line = 0.0
        self.last_postfix = 0.0
        self.previous_rate = None    # images/s of the last finished epoch, for the ETA at a start

    # ------------------------------------------------------------------ the training loop's calls
    def begin_epoch(self, epoch: int, total: int, done: int = 0) -> None:
        if self.active:
            self.end_epoch()
        self.epoch, self.total = epoch, max(int(total), 1)
        self.start_done = self.done = min(max(int(done), 0), self.total)
        self.start_time = self.last_line = self.last_postfix = self.clock()
        self.active = True
        if self.enabled and self.terminal:
            from tqdm import tqdm
            sized = terminal_width(self.stream) > 0  # a terminal of unknown size (0x0): 100 columns
            self.bar = tqdm(total=self.total, initial=self.start_done, desc=f"epoch {epoch}/{self.last_epoch}",
                            unit="img", file=self.stream, dynamic_ncols=sized, ncols=None if sized else 100,
                            nrows=None if sized else 24, leave=True, mininterval=0.5, smoothing=0.1)

    def update(self, done: int) -> None:
        """Called after every step with the images done in this epoch (cheap)."""
        if not self.active:
            return
        done = min(int(done), self.total)
        step, self.done = done - self.done, done
        if not self.enabled:
            pass
        elif self.bar is not None:
            if step > 0:
                self.bar.update(step)
            now = self.clock()
            if now - self.last_postfix >= 2.0:
                self.last_postfix = now
                self.bar.set_postfix_str(f"run ETA {format_seconds(self.run_eta(now))}", refresh=False)
        else:
            now = self.clock()
            if done < self.total and now - self.last_line >= self.interval:
                self.last_line = now
                self._line(now)
        if done >= self.total:
            self.end_epoch()

    def end_epoch(self) -> None:
        """Close this epoch's bar, or print its final plain line (also done when the epoch is full)."""
        if not self.active:
            return
        self.active = False
        now = self.clock()
        rate = self.rate(now)
        if rate:
            self.previous_rate = rate
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.set_postfix_str(f"run ETA {format_seconds(self.run_eta(now))}", refresh=False)
            self.bar.close()
            self.bar = None
        else:
            self._line(now, final=True)

    def write(self, message: str) -> None:
        """Print a line of other output above the bar (or plainly when there is none)."""
        if self.bar is not None:
            from tqdm import tqdm
            tqdm.write(message, file=self.stream)
            self.stream.flush()
        else:
            print(message, file=self.stream, flush=True)  # user-facing: the run's console lines

    def close(self) -> None:
        self.end_epoch()

    # ------------------------------------------------------------------ numbers
    def rate(self, now: float) -> float | None:
        """Images per second in this epoch so far (the last epoch's rate before the first step)."""
        elapsed = now - self.start_time
        if self.done > self.start_done and elapsed > 0:
            return (self.done - self.start_done) / elapsed
        return self.previous_rate

    def run_eta(self, now: float) -> float | None:
        rate = self.rate(now)
        if not rate:
            return None
        left = (self.total - self.done) + max(0, self.last_epoch - self.epoch) * self.total
        return left / rate

    def _line(self, now: float, final: bool = False) -> None:
        rate = self.rate(now) if self.done > self.start_done else None
        speed = f"{rate:.1f} img/s" if rate else "? img/s"
        head = (f"[progress] epoch {self.epoch}/{self.last_epoch}: {self.done}/{self.total} images "
                f"({100.0 * self.done / self.total:.0f}%), {speed}")
        if final:
            tail = f"took {format_seconds(now - self.start_time)}, run ETA {format_seconds(self.run_eta(now))}"
        else:
            epoch_eta = (self.total - self.done) / rate if rate else None
            tail = f"epoch ETA {format_seconds(epoch_eta)}, run ETA {format_seconds(self.run_eta(now))}"
        print(f"{head}, {tail}", file=self.stream, flush=True)  # user-facing: the progress line
