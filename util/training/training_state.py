"""Everything needed to continue a run exactly where it stopped, in one file per save.

`<label>_train_state.pth` (label: latest, an epoch number, iter_<n>) sits beside the
reference-compatible `<label>_net_<name>.pth` files and holds, as plain tensors and containers
(so that it loads with `weights_only=True`):
  - the weights of every network (a copy, so the file is complete on its own even if a crash
    happened while the per-network files were being rewritten),
  - optimizer and scheduler states,
  - where training stands: the epoch, the images already done in it, the images done in total,
  - the run's seed, and for every rank its random generators (Python, NumPy, torch CPU/CUDA)
    and its own model state (e.g. CycleGAN's image pools).
Augmentations need no saved state: they are drawn from (seed, epoch, image index).
"""
from __future__ import annotations

import glob
import os
import random
import sys
from dataclasses import asdict

import numpy as np
import torch

from util import distributed
from util.training.position import Position
from util.training.checkpoint_io import atomic_torch_save, load_checkpoint_file
from util.errors import UserError

STATE_SUFFIX = "_train_state.pth"
FORMAT_VERSION = 1


def capture_rng() -> dict:
    numpy_state = np.random.get_state()
    return {
        "python": random.getstate(),
        # NumPy's key array would need NumPy's unpickler; as a tensor it loads with weights_only.
        "numpy": (numpy_state[0], torch.from_numpy(numpy_state[1].astype(np.int64)), *numpy_state[2:]),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def restore_rng(state: dict) -> None:
    random.setstate(state["python"])
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), *rest))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"][: torch.cuda.device_count()])


def save_training_state(model, label: str, progress: Position, seed: int, best: dict | None = None) -> None:
    """Write `<label>_train_state.pth` (every rank must call: the ranks' parts are gathered);
    `best` is the best-checkpoint tracker's state (util/training/best_checkpoint.py)."""
    rank_parts = distributed.gather_objects({"rng": capture_rng(), "model": model.rank_training_state()})
    if not distributed.is_main_process():
        return
    state = {
        "format": FORMAT_VERSION,
        "progress": asdict(progress),
        "seed": seed,
        "world_size": distributed.world_size(),
        "model": model.shared_training_state(),
        "ranks": rank_parts,
        "best": best,
    }
    atomic_torch_save(state, os.path.join(model.save_dir, f"{label}{STATE_SUFFIX}"))


def load_training_state(path: str) -> dict:
    """Load and sanity-check a training-state file (UserError if it is not one)."""
    state = load_checkpoint_file(path)
    if not isinstance(state, dict) or state.get("format") != FORMAT_VERSION or "progress" not in state:
        raise UserError(f"{path} is not a training-state file written by this version of train.py; "
                        f"delete it, or resume from weights only with --continue_train --epoch_count N.")
    return state


def find_resume_state(save_dir: str) -> tuple[str, dict] | None:
    """The newest training state in `save_dir` that loads; a corrupt one is reported and skipped."""
    candidates = sorted(glob.glob(os.path.join(save_dir, "*" + STATE_SUFFIX)), key=os.path.getmtime, reverse=True)
    for path in candidates:
        try:
            return path, load_training_state(path)
        except UserError as err:
            print(f"warning: cannot resume from {path}, trying an older checkpoint: {err}", file=sys.stderr)
    return None


def rank_part(state: dict, rank: int) -> dict | None:
    """This rank's saved random generators and model state, if the saved run had this rank."""
    ranks = state["ranks"]
    return ranks[rank] if rank < len(ranks) else None


def position_of(state: dict) -> Position:
    return Position(**state["progress"])


def remove_stale_temporary_files(save_dir: str) -> None:
    """Temporary files left by a process killed while writing; safe once we hold the run lock."""
    for path in glob.glob(os.path.join(save_dir, ".*.tmp")):
        os.remove(path)
