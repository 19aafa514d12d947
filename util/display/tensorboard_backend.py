"""TensorBoard (`--use_tensorboard`): event files in `checkpoints/<name>/tensorboard/`.

Scalars `loss/<name>`, `train/learning_rate`, `train/images_per_sec` every --print_freq images and
`val/<metric>` after each validation; the image grid `visuals` every --display_freq images. The step
is the number of images seen since training began (util.display.backend.ImagesSeen).
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from util import util
from util.display.backend import ImagesSeen, LoggerBackend, RunInfo
from util.errors import UserError
from util.position import Position

if TYPE_CHECKING:
    from util.evaluation.validation_result import ValidationResult


class TensorBoardBackend(LoggerBackend):
    @classmethod
    def check_can_start(cls) -> None:
        try:
            import torch.utils.tensorboard  # noqa: F401
        except ImportError:
            raise UserError("--use_tensorboard needs the tensorboard package, which is not installed; run `pip "
                            "install tensorboard` (or `bash scripts/setup.sh`) or drop --use_tensorboard.") from None

    def __init__(self, run: RunInfo) -> None:
        super().__init__(run)
        self.check_can_start()
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=os.path.join(run.run_dir, "tensorboard"), flush_secs=30)
        self.ncols = run.opt.display_ncols
        self.steps = ImagesSeen()

    def begin_epoch(self, position: Position, images_in_epoch: int) -> None:
        self.steps.begin_epoch(position, images_in_epoch)

    def log_step(self, position: Position, losses: Mapping[str, float], lr: float, seconds_per_image: float,
                 data_seconds: float) -> None:
        step = self.steps.step(position)
        for name, value in losses.items():
            self.writer.add_scalar(f"loss/{name}", float(value), step)
        self.writer.add_scalar("train/learning_rate", float(lr), step)
        self.writer.add_scalar("train/images_per_sec", 1.0 / max(seconds_per_image, 1e-9), step)

    def log_images(self, position: Position, images: Mapping[str, np.ndarray], save_html: bool) -> None:
        grid = util.image_grid(list(images.values()), self.ncols if self.ncols > 0 else len(images),
                               labels=list(images.keys()))
        self.writer.add_image("visuals", grid, self.steps.step(position), dataformats="HWC")

    def log_validation(self, position: Position, result: ValidationResult, epoch_seconds: float) -> None:
        step = self.steps.step(position)
        for name, value in result.scores.items():
            self.writer.add_scalar(f"val/{name}", float(value), step)

    def close(self) -> None:
        try:
            self.writer.close()
        except Exception as err:
            self.run.say(f"warning: could not finish the TensorBoard log ({err})")
