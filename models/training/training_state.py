"""The training-state file: everything needed to continue a run exactly where it stopped.

The format part of the Checkpointer (models/training/checkpointer.py), which decides when and under
which label one is written. `<label>_train_state.pth` (label: latest, an epoch number, iter_<n>)
sits beside the reference-compatible `<label>_net_<name>.pth` files and holds, as plain tensors
and containers (so that it loads with `weights_only=True`):
  - the weights of every network (a copy, so the file is complete on its own even if a crash
    happened while the per-network files were being rewritten), optimizer and scheduler states
    (the model's `shared_training_state()`),
  - where training stands (a Position: the epoch, the images already done in it, in total),
  - the run's seed, the number of processes, the best-checkpoint tracker's state,
  - the options the run trained with (plain values; util/resume_flags.py compares them
    with a continuation's flags; states written before they were recorded have none),
  - for every rank its random generators (Python, NumPy, torch CPU/CUDA) and its own model state
    (the model's `rank_training_state()`).
Data augmentations need no saved state: they are drawn from (seed, epoch, image index); the
discriminator's (--diff_augment, models/losses/diff_augment.py) is part of the model's state.
"""
from __future__ import annotations

import glob
import logging
import os
import random
from dataclasses import asdict

import numpy as np
import torch

from util.checkpoint_io import atomic_torch_save, load_checkpoint_file
from util.errors import UserError
from util.position import Position

logger = logging.getLogger(__name__)

STATE_SUFFIX = "_train_state.pth"
FORMAT_VERSION = 1


def state_path(run_dir: str, label: str) -> str:
    """Where the training state saved under `label` lives."""
    return os.path.join(run_dir, f"{label}{STATE_SUFFIX}")


def capture_rng() -> dict:
    """This process's random generators (Python, NumPy, torch CPU and CUDA), as plain data."""
    numpy_state = np.random.get_state()
    return {
        "python": random.getstate(),
        # NumPy's key array would need NumPy's unpickler; as a tensor it loads with weights_only.
        "numpy": (numpy_state[0], torch.from_numpy(numpy_state[1].astype(np.int64)), *numpy_state[2:]),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def restore_rng(state: dict) -> None:
    """Put back what `capture_rng` returned."""
    random.setstate(state["python"])
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), *rest))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"][: torch.cuda.device_count()])


def write_training_state(path: str, position: Position, seed: int, world_size: int, model_state: dict,
                         rank_parts: list[dict], best: dict | None, options: dict | None = None) -> None:
    """Write one training-state file (crash-safe). `rank_parts[r]` is rank r's
    {"rng": capture_rng(), "model": its rank_training_state()}; `best` the tracker's state;
    `options` the run's options (resume_flags.recorded_options)."""
    state = {
        "format": FORMAT_VERSION,
        "progress": asdict(position),
        "seed": seed,
        "world_size": world_size,
        "model": model_state,
        "ranks": rank_parts,
        "best": best,
        "options": options,
    }
    atomic_torch_save(state, path)


def load_training_state(path: str) -> dict:
    """Load and sanity-check a training-state file (UserError if it is not one)."""
    state = load_checkpoint_file(path)
    if not isinstance(state, dict) or state.get("format") != FORMAT_VERSION or "progress" not in state:
        raise UserError(f"{path} is not a training-state file written by this version of train.py; "
                        f"delete it, or resume from weights only with --continue_train --epoch_count N.")
    return state


def newest_training_state(run_dir: str) -> tuple[str, dict] | None:
    """The newest training state in `run_dir` that loads, with its path; None if there is none. A
    damaged newer one is reported (a warning naming it) and skipped. UserError, naming them, if there
    are training states but none of them loads: starting afresh would throw their run away."""
    candidates = sorted(glob.glob(os.path.join(glob.escape(run_dir), "*" + STATE_SUFFIX)), key=os.path.getmtime,
                        reverse=True)
    damaged: list[tuple[str, UserError]] = []
    for path in candidates:
        try:
            state = load_training_state(path)
        except UserError as err:
            damaged.append((path, err))
            continue
        for bad, err in damaged:
            logger.warning(f"cannot resume from {bad}, trying an older checkpoint: {err}")
        return path, state
    if not damaged:
        return None
    others = f" Nor can the older {', '.join(os.path.basename(p) for p, _ in damaged[1:])}." if damaged[1:] else ""
    raise UserError(f"no training state in {run_dir} can be read, so the run cannot be continued exactly: "
                    f"{damaged[0][1]}{others} Or continue from the weights alone, with fresh optimizers: "
                    f"--continue_train --epoch <label of a *_net_*.pth> --epoch_count <the epoch to start at>.")


def rank_part(state: dict, rank: int) -> dict | None:
    """Rank `rank`'s saved random generators and model state, if the saved run had that rank."""
    ranks = state["ranks"]
    return ranks[rank] if rank < len(ranks) else None


def options_of(state: dict) -> dict | None:
    """The options the saved run trained with, or None for a state written before they were recorded."""
    return state.get("options")


def position_of(state: dict) -> Position:
    """Where the saved run stood."""
    return Position(**state["progress"])
