"""Reading and writing checkpoint files safely.

Writes go to a temporary file in the same folder, are flushed to disk and renamed over the
target, so a crash at any instant leaves either the old file or the new one, never half of one.
Reads use `weights_only=True`: a checkpoint is data, and a file that needs code to unpickle is
refused rather than executed.
"""
from __future__ import annotations

import os
import pickle
import tempfile
import warnings
from typing import Any, BinaryIO, Callable

import torch

from util.console import print0
from util.errors import UserError


def atomic_write(path: str, write: Callable[[BinaryIO], None]) -> None:
    """Call `write(file)` on a temporary file beside `path`, then rename it to `path`: a crash at
    any instant leaves the old `path` or the new one, never a truncated one."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp_path = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_path, path)
    except BaseException:
        if os.path.exists(tmp_path):
            os.remove(tmp_path)
        raise


def atomic_torch_save(obj: Any, path: str) -> None:
    """`torch.save(obj, path)` that never leaves a truncated `path` behind."""
    atomic_write(path, lambda f: torch.save(obj, f))


def load_checkpoint_file(path: str, map_location: torch.device | str = "cpu") -> Any:
    """Load a checkpoint written by `torch.save`, with a clear error for missing or bad files."""
    if not os.path.isfile(path):
        folder = os.path.dirname(path) or "."
        available = sorted(f for f in os.listdir(folder) if f.endswith(".pth")) if os.path.isdir(folder) else []
        hint = (f" Checkpoints in {folder}: {', '.join(available[:12])}." if available
                else f" The folder {folder} holds no checkpoints; check --checkpoints_dir and --name.")
        raise UserError(f"checkpoint file {path} does not exist.{hint} Choose one with --epoch "
                        f"(e.g. --epoch latest) or --load_iter.")
    try:
        with warnings.catch_warnings():
            # A plain pickle (protocol > 2) makes torch warn before refusing it; the UserError
            # below is the one message the user should see.
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        raise UserError(f"checkpoint {path} is not a plain weights file (loading it would run code "
                        f"stored inside it, which we refuse): {str(err).splitlines()[0]} "
                        f"Only load checkpoints written by this tool or the reference implementation.") from None
    except (RuntimeError, EOFError, OSError, ValueError) as err:
        raise UserError(f"checkpoint {path} is corrupt or truncated ({str(err).splitlines()[0]}); "
                        f"delete it or load another epoch with --epoch.") from None


def load_state_dict_file(path: str, map_location: torch.device | str = "cpu") -> dict:
    """Load a per-network weights file as a plain dict of tensors."""
    state = load_checkpoint_file(path, map_location)
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise UserError(f"checkpoint {path} does not hold network weights (a dict of tensors); "
                        f"pass a <epoch>_net_<name>.pth file written by train.py.")
    state = dict(state)
    state.pop("_metadata", None)
    return strip_wrapper_prefixes(state, path)


# Key prefixes added by wrappers when a checkpoint is saved from the wrapper instead of the network:
# DataParallel / DistributedDataParallel ("module.") and torch.compile ("_orig_mod.").
WRAPPER_PREFIXES = ("module.", "_orig_mod.")


def strip_wrapper_prefixes(state: dict, path: str) -> dict:
    """`state` without the prefixes that every key carries when it was saved from a wrapper
    (one line says so); unchanged otherwise."""
    stripped = []
    while state:
        prefix = next((p for p in WRAPPER_PREFIXES if all(key.startswith(p) for key in state)), None)
        if prefix is None:
            break
        state = {key[len(prefix):]: value for key, value in state.items()}
        stripped.append(prefix)
    if stripped:
        print0(f"note: {path} was saved from a wrapped network (keys start with {''.join(stripped)!r}); "
               f"loading it without that prefix")
    return state
