"""Weights & Biases (`--use_wandb`, optional package; WANDB_MODE=offline works without network).

The losses, `learning_rate` and `images_per_sec` every --print_freq images, `val/<metric>` after each
validation and the current images every --display_freq images, at the step TensorBoard uses (images
seen since training began), to the project --wandb_project_name. The run files go to
`checkpoints/<name>/wandb/` unless $WANDB_DIR says otherwise.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from util.display.backend import ImagesSeen, LoggerBackend, RunInfo
from util.errors import UserError
from util.position import Position

if TYPE_CHECKING:
    from util.evaluation.validation_result import ValidationResult


def start_wandb_run(run: RunInfo):
    """The wandb run to log to: the one already started in this process, else a new one."""
    WandbBackend.check_can_start()
    import wandb

    if wandb.run is not None:
        return wandb.run
    opt = run.opt
    config = opt.as_dict() if hasattr(opt, "as_dict") else dict(vars(opt))
    kwargs = {} if os.environ.get("WANDB_DIR") else {"dir": run.run_dir}  # wandb/ next to the checkpoints
    os.makedirs(run.run_dir, exist_ok=True)
    return wandb.init(project=opt.wandb_project_name, name=opt.name, config=config, **kwargs)


class WandbBackend(LoggerBackend):
    @classmethod
    def check_can_start(cls) -> None:
        try:
            import wandb  # noqa: F401
        except ImportError:
            raise UserError("--use_wandb needs the wandb package, which is not installed; "
                            "run `pip install wandb` or drop --use_wandb.") from None

    def __init__(self, run: RunInfo) -> None:
        super().__init__(run)
        self.wandb_run = start_wandb_run(run)
        self.steps = ImagesSeen()

    def begin_epoch(self, position: Position, images_in_epoch: int) -> None:
        self.steps.begin_epoch(position, images_in_epoch)

    def log_step(self, position: Position, losses: Mapping[str, float], lr: float, seconds_per_image: float,
                 data_seconds: float) -> None:
        self._log({**{k: float(v) for k, v in losses.items()}, "learning_rate": float(lr),
                   "images_per_sec": 1.0 / max(seconds_per_image, 1e-9)}, position)

    def log_images(self, position: Position, images: Mapping[str, np.ndarray], save_html: bool) -> None:
        import wandb
        self._log({label: wandb.Image(image, caption=label) for label, image in images.items()}, position)

    def log_validation(self, position: Position, result: ValidationResult, epoch_seconds: float) -> None:
        self._log({f"val/{name}": float(value) for name, value in result.scores.items()}, position)

    def close(self) -> None:
        try:
            self.wandb_run.finish()
        except Exception as err:
            self.run.say(f"warning: could not finish the wandb run ({err})")

    def _log(self, data: dict, position: Position) -> None:
        step = self.steps.step(position)
        current = getattr(self.wandb_run, "step", 0) or 0
        if step >= current:
            self.wandb_run.log(data, step=step)
        else:  # a run we did not start, already further along: let wandb number the point
            self.wandb_run.log(data)
