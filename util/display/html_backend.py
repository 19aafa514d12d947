"""The training page `checkpoints/<name>/web/index.html` (on unless --no_html): the loss plot, the
latest validation (its metrics plot and images), then each epoch's images, newest first. While
training runs the page reloads itself; the final page, written at the end, does not.
"""
from __future__ import annotations

import os
import shutil
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from util import html, util
from util.display.backend import LoggerBackend, RunInfo
from util.display.console_backend import LOSS_PLOT, write_loss_plot
from util.display.validation_log import METRICS_PLOT
from util.position import Position

if TYPE_CHECKING:
    from util.evaluation.validation_result import ValidationResult

HTML_PLOT_EVERY = 300.0        # seconds between refreshes of the loss plot on the page
HTML_REFRESH = 30              # the page reloads itself this often while training runs


class HtmlBackend(LoggerBackend):
    """web/index.html and its images in web/images/ (needs `util.html.available()`)."""

    def __init__(self, run: RunInfo) -> None:
        super().__init__(run)
        self.web_dir = os.path.join(run.run_dir, "web")
        self.img_dir = os.path.join(self.web_dir, "images")
        util.mkdirs([self.web_dir, self.img_dir])
        self.win_size = run.opt.display_winsize
        self.saved = False                  # this epoch's images are on the page already
        self.last_plot: float | None = None
        self.epoch = 0                      # the newest epoch with images on the page
        self.labels: list[str] = []
        self.validation_caption = ""        # what the page says above the latest validation images
        self.validation_labels: list[str] = []

    def begin_epoch(self, position: Position, images_in_epoch: int) -> None:
        self.saved = False  # the first display of each epoch goes on the page

    def log_images(self, position: Position, images: Mapping[str, np.ndarray], save_html: bool) -> None:
        if not (save_html or not self.saved):
            return
        self.saved = True
        for label, image in images.items():
            util.save_image(image, os.path.join(self.img_dir, f"epoch{position.epoch:03d}_{label}.png"))
        self._write_page(position.epoch, list(images))

    def log_validation(self, position: Position, result: ValidationResult, epoch_seconds: float) -> None:
        self._copy_plot(METRICS_PLOT)  # drawn by the console back end a moment ago
        if not result.visuals:
            return
        for label, image in result.visuals.items():
            util.save_image(image, os.path.join(self.img_dir, f"val_latest_{label}.png"))
        self.validation_caption = f"validation after epoch {position.epoch}: " + (
            ", ".join(f"{k} {v:.4f}" for k, v in result.scores.items()) or "no metrics")
        self.validation_labels = list(result.visuals)
        self._write_page(self.epoch, self.labels)

    def close(self) -> None:
        self._copy_plot(LOSS_PLOT)  # drawn by the console back end, which closes first
        if self.epoch or self.validation_caption:
            try:
                self._write_page(self.epoch, self.labels, final=True)
            except OSError as err:
                self.run.say(f"warning: could not rewrite the HTML page ({err})")

    def _copy_plot(self, name: str) -> None:
        plot = os.path.join(self.run.run_dir, name)
        if os.path.exists(plot) and os.path.isdir(self.img_dir):
            shutil.copyfile(plot, os.path.join(self.img_dir, name))

    def _refresh_loss_plot(self) -> None:
        """Redraw the loss plot every HTML_PLOT_EVERY seconds (nothing, no matplotlib, before the first loss line)."""
        now = time.monotonic()
        if self.last_plot is None or now - self.last_plot >= HTML_PLOT_EVERY:
            self.last_plot = now
            if write_loss_plot(self.run):
                self._copy_plot(LOSS_PLOT)

    def _write_page(self, epoch: int, labels: list[str], final: bool = False) -> None:
        """web/index.html: the loss plot (if drawn yet), the latest validation, each epoch's images, newest first."""
        self.epoch, self.labels = max(epoch, self.epoch), labels
        if not final:
            self._refresh_loss_plot()
        webpage = html.HTML(self.web_dir, f"Experiment name = {self.run.name}", refresh=0 if final else HTML_REFRESH)
        if not final:
            webpage.add_text(f"Training is running; this page reloads every {HTML_REFRESH} s.")
        if os.path.exists(os.path.join(self.img_dir, LOSS_PLOT)):
            webpage.add_header("losses")
            webpage.add_figure(LOSS_PLOT, "losses from loss_log.txt (x: epochs completed)")
        if self.validation_caption:
            webpage.add_header(self.validation_caption)
            if os.path.exists(os.path.join(self.img_dir, METRICS_PLOT)):
                webpage.add_figure(METRICS_PLOT, "validation metrics from metrics.jsonl")
            names = [f"val_latest_{label}.png" for label in self.validation_labels]
            webpage.add_images(names, self.validation_labels, names, width=self.win_size)
        for n in range(self.epoch, 0, -1):
            names = [f"epoch{n:03d}_{label}.png" for label in labels]
            if not all(os.path.exists(os.path.join(self.img_dir, name)) for name in names):
                continue
            webpage.add_header(f"epoch [{n}]")
            webpage.add_images(names, labels, names, width=self.win_size)
        webpage.save()
