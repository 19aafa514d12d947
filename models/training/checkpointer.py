"""The Checkpointer: the one object a training loop talks to for saving and resuming.

It owns every file a run writes to carry on or to keep its best weights, in the run folder
(`--checkpoints_dir/--name`):

    latest_net_<name>.pth        every --save_latest_freq images, at a stop signal, and after every
    latest_train_state.pth       --save_epoch_freq-th and the last epoch         (save_latest, save_progress)
    <epoch>_net_<name>.pth       after every --save_epoch_freq-th epoch          (save_epoch)
    <epoch>_train_state.pth
    iter_<n>_net_<name>.pth      with --save_by_iter, instead of latest every
    iter_<n>_train_state.pth     --save_latest_freq images                       (save_progress)
    <label>_ema_net_<G>.pth      with every save above, under --ema_decay
    best_net_<name>.pth          --save_best: when a validation beats every
    best_ema_net_<G>.pth         earlier one (trained weights, moving averages)  (keep_best)
    best.json                    which validation those are from

`<label>_net_<name>.pth` is the reference's format (models/networks/checkpoint_files.py), which its test.py
loads; `<label>_train_state.pth` holds everything an exact resume needs (its format:
models/training/training_state.py); best_checkpoint.py decides what is best. The Checkpointer lives
in util/, below models/: it drives what it saves (the training engine, models/training/engine.py,
which holds the model) only through `check_finite`, `save_networks`, `save_ema_networks`,
`shared_training_state` and `rank_training_state`. Every rank calls every save - the ranks' states are gathered and the
replicas checked to agree - and only the main process writes.
"""
from __future__ import annotations

import argparse
import glob
import logging
import os
from dataclasses import dataclass
from typing import Protocol

from models.training.best_checkpoint import EMA_WEIGHTS, TRAINED_WEIGHTS, BestTracker
from models.training.training_state import (
    capture_rng,
    load_training_state,
    newest_training_state,
    options_of,
    position_of,
    rank_part,
    restore_rng,
    state_path,
    write_training_state,
)
from util import distributed
from util.console import print0
from util.distributed import DistContext
from util.errors import UserError
from util.position import Position
from util.resume_flags import check_changed_flags, recorded_options
from util.seeding import seed_everything

logger = logging.getLogger(__name__)


class CheckpointedTraining(Protocol):
    """What the Checkpointer needs of what it saves (models/training_engine.TrainingEngine has it all)."""

    ema: object | None  # the generators' moving averages (--ema_decay), or None

    def check_finite(self, epoch: int, total_iters: int, images_per_step: int, weights: bool = False) -> None: ...
    def save_networks(self, epoch: str, include_ema: bool = True) -> None: ...
    def save_ema_networks(self, epoch: str) -> None: ...
    def shared_training_state(self) -> dict: ...
    def rank_training_state(self) -> dict: ...


@dataclass
class StartPoint:
    """Where a run begins: from a saved training state (an exact resume) or afresh."""

    position: Position
    seed: int                       # the saved run's, or a new one shared by every rank
    state: dict | None = None       # the training state resumed from (None: afresh, or weights only)
    rank_state: dict | None = None  # this rank's part of it (None if the saved run had fewer ranks)


class Checkpointer:
    """Saves and resumes one run in `run_dir` (see the module docstring for its files).

    `images_per_step` (the global batch) places a divergence in the error message; `save_by_iter`
    is --save_by_iter. Call `find_start` first (it decides the run's seed, which every save records),
    and `track_best` to keep best files.
    """

    def __init__(self, run_dir: str, ctx: DistContext, images_per_step: int, save_by_iter: bool = False) -> None:
        self.run_dir = run_dir
        self.ctx = ctx
        self.images_per_step = images_per_step
        self.save_by_iter = save_by_iter
        self.seed: int | None = None  # the run's seed, once `find_start` has decided it
        self.best: BestTracker | None = None  # the best validation so far (--save_best)
        self.options: dict | None = None  # the run's options, recorded in every training state
        self.flag_classes: dict = {}  # what a change of each does on a continue (opt._flag_classes)

    def remove_stale_temporary_files(self) -> None:
        """Delete the temporary files of a process killed while writing (util/safe_files.py), in the
        run folder and below it (web/images), on the main process, which holds the run lock, so no
        live run is writing them; does nothing on other ranks."""
        if self.ctx.is_main:
            for path in glob.glob(os.path.join(glob.escape(self.run_dir), "**", ".*.tmp"), recursive=True):
                os.remove(path)

    # ------------------------------------------------------------------ resuming
    def find_start(self, opt: argparse.Namespace) -> StartPoint:
        """Where this run begins (collective: every rank must call).

        `--continue_train` on its own continues from the newest complete training state. So do
        `--auto_resume`, every restart of the workers by torchrun (--max-restarts) and every requeue
        of a SLURM job, but they start afresh where nothing was saved yet. With `--epoch`,
        `--load_iter` or `--epoch_count`, `--continue_train` behaves as the reference's: weights only
        (the model loads them), counting from --epoch_count. UserError if `--continue_train` finds
        nothing to continue from. Reads --continue_train, --auto_resume, --epoch, --load_iter,
        --epoch_count and --seed. A training state that recorded the options it was trained with
        is checked against `opt` (util/resume_flags.py): UserError for a flag that cannot
        change, a note for one that is honoured or ignored.
        """
        self.flag_classes = getattr(opt, "_flag_classes", {})  # each flag's class as declared (on_resume)
        self.options = recorded_options({key: value for key, value in vars(opt).items() if not key.startswith("_")},
                                        self.flag_classes)
        saved = self._saved_state(opt)
        if saved is None:
            self.seed = distributed.shared_seed(opt.seed)
            return StartPoint(Position(epoch=opt.epoch_count), self.seed)
        self.seed = saved["seed"]
        return StartPoint(position_of(saved), self.seed, saved, rank_part(saved, self.ctx.rank))

    def _saved_state(self, opt: argparse.Namespace) -> dict | None:
        """The training state to continue from, or None (start afresh, or load weights only)."""
        reference_style = opt.epoch != "latest" or opt.load_iter > 0 or opt.epoch_count != 1
        restarted = any(int(os.environ.get(count) or 0) > 0 for count in ("TORCHELASTIC_RESTART_COUNT",
                                                                            "SLURM_RESTART_COUNT"))
        if reference_style or not (opt.continue_train or opt.auto_resume or restarted):
            return None
        found, refusal = None, None
        if self.ctx.is_main:  # rank 0 picks; all load it
            try:
                found = newest_training_state(self.run_dir)
            except UserError as err:
                refusal = str(err)
        path, refusal = distributed.broadcast_object((found[0] if found else None, refusal))
        if refusal:  # on every rank, so that none waits for the others in a collective
            raise UserError(refusal)
        if path is None:
            if opt.continue_train:
                self._continue_from_weights_only(opt.epoch)
            return None
        state = found[1] if self.ctx.is_main else load_training_state(path)
        notes = check_changed_flags(options_of(state), self.options, getattr(opt, "_defaults", {}), path,
                                    classes=self.flag_classes)
        p = position_of(state)
        print0(f"resuming from {path}: epoch {p.epoch}, {p.images_done} images into it, {p.total_iters} in total")
        for note in notes:
            print0(note)
        return state

    def _continue_from_weights_only(self, epoch: str) -> None:
        """--continue_train found no training state: the weights of --epoch will do (with a
        warning); UserError if there are none either."""
        if not glob.glob(os.path.join(self.run_dir, f"{epoch}_net_*.pth")):
            raise UserError(f"--continue_train: {self.run_dir} holds no checkpoint to continue from (no "
                            f"*_train_state.pth, no {epoch}_net_*.pth); check --name and --checkpoints_dir, or "
                            f"leave out --continue_train to start a new run.")
        logger.warning(f"no training state (*_train_state.pth) in {self.run_dir}: loading the weights of --epoch "
                       f"{epoch} only; optimizers and the learning-rate schedule start afresh.")

    def restore_random_streams(self, start: StartPoint) -> None:
        """This rank's random generators exactly as they were saved, or (afresh, or a rank the
        saved run did not have) seeded by the seed, the rank and the images done."""
        if start.rank_state is not None:
            restore_rng(start.rank_state["rng"])
        else:
            seed_everything(start.seed + self.ctx.rank + start.position.total_iters)

    # ------------------------------------------------------------------ saving (every rank calls)
    def save_latest(self, engine: CheckpointedTraining, position: Position) -> None:
        """`latest_*`: at the end of an epoch, or when stopped by a signal."""
        self._save(engine, "latest", position)

    def save_progress(self, engine: CheckpointedTraining, position: Position) -> None:
        """The save every --save_latest_freq images: `latest_*`, or `iter_<n>_*` with --save_by_iter."""
        self._save(engine, f"iter_{position.total_iters}" if self.save_by_iter else "latest", position)

    def save_epoch(self, engine: CheckpointedTraining, epoch: int, position: Position) -> None:
        """`<epoch>_*`, kept for good (`position`: where the next epoch starts)."""
        self._save(engine, str(epoch), position)

    def _save(self, engine: CheckpointedTraining, label: str, position: Position) -> None:
        """Reference-compatible weights (`<label>_net_<name>.pth`, the EMA files with them) plus the
        full training state; refused (TrainingDiverged) if a loss or weight went non-finite since the
        last check."""
        if self.seed is None:
            raise RuntimeError("Checkpointer.find_start must decide the run's seed before the first save")
        engine.check_finite(position.epoch, position.total_iters, self.images_per_step, weights=True)
        engine.save_networks(label)
        rank_parts = distributed.gather_objects({"rng": capture_rng(), "model": engine.rank_training_state()})
        if self.ctx.is_main:
            write_training_state(state_path(self.run_dir, label), position, self.seed, self.ctx.world_size,
                                 engine.shared_training_state(), rank_parts,
                                 self.best.state_dict() if self.best else None, self.options)

    def track_best(self, metric: str, start: StartPoint) -> None:
        """From now on `keep_best` keeps the best validation by `metric` (--save_best; "": keep
        none), going on from the resumed run's best when it tracked the same metric. UserError for
        a metric that cannot be compared."""
        if not metric:
            return
        self.best = BestTracker(metric)
        if start.state is not None and start.state.get("best"):
            self.best.load_state_dict(start.state["best"])

    def keep_best(self, engine: CheckpointedTraining, scores: dict[str, float], epoch: int,
                  iteration: int) -> float | None:
        """--save_best, after a validation: `best_net_*.pth` (and, with --ema_decay,
        `best_ema_net_*.pth`) when it beats every earlier one, and best.json. Returns the new best
        value of the trained weights' metric, or None if they did not improve (or no --save_best)."""
        if self.best is None:
            return None
        improved = self.best.improved(TRAINED_WEIGHTS, scores, epoch, iteration)
        if improved:
            engine.save_networks("best", include_ema=False)
        if engine.ema is not None and self.best.improved(EMA_WEIGHTS, scores, epoch, iteration):
            engine.save_ema_networks("best")
        if self.ctx.is_main:
            self.best.write(self.run_dir)
        return scores[self.best.metric] if improved else None
