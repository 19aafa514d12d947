"""Reading and writing checkpoint files safely.

Writes go to a temporary file in the same folder, are flushed to disk and renamed over the
target (util/safe_files.py), so a crash at any instant leaves either the old file or the new one,
never half of one. Reads use `weights_only=True`: a checkpoint is data, and a file that needs code
to unpickle is refused rather than executed. A file that cannot be read (empty, cut short, not a
checkpoint at all) is a UserError that names it and says what it holds instead.
"""
from __future__ import annotations

import os
import pickle
import warnings
from typing import Any

import torch

from util.console import print0
from util.errors import UserError
from util.safe_files import atomic_write


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
        if _looks_like_a_checkpoint(path):
            raise UserError(f"checkpoint {path} is not a plain weights file (loading it would run code "
                            f"stored inside it, which we refuse): {_first_line(err)} Only load "
                            f"checkpoints written by this tool or the reference implementation.") from None
        raise UserError(damaged_checkpoint_message(path, err)) from None
    except Exception as err:  # torch.load fails on damaged bytes in many ways (EOFError, KeyError, ...)
        raise UserError(damaged_checkpoint_message(path, err)) from None


# How the files torch.save writes begin: a zip archive (PyTorch >= 1.6), or a pickle (older ones).
ZIP_MAGIC, PICKLE_MAGIC = b"PK\x03\x04", b"\x80"
GIT_LFS_POINTER = b"version https://git-lfs"


def _looks_like_a_checkpoint(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(4).startswith((ZIP_MAGIC, PICKLE_MAGIC))


def _first_line(err: BaseException) -> str:
    """The first line of an exception's message, or its type's name when it has none (EOFError)."""
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__


def damaged_checkpoint_message(path: str, err: BaseException) -> str:
    """One paragraph naming the unreadable checkpoint `path`, what it holds instead of weights and
    what to do; `err` is what torch.load raised."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(32)
    fix = "Copy it again from where it came from, or delete it and load another checkpoint (--epoch, --load_iter)."
    if size == 0:
        what = "is empty (0 bytes: a copy or save that was interrupted, or a full disk)"
    elif head.startswith(GIT_LFS_POINTER):
        what, fix = "is a Git LFS pointer, not the weights themselves", "Run `git lfs pull` in its repository."
    elif head.startswith(ZIP_MAGIC):
        what = f"is cut short or damaged ({size} bytes; its zip archive cannot be read: {_first_line(err)})"
    elif head.startswith(PICKLE_MAGIC):
        what = f"is cut short or damaged ({size} bytes; {_first_line(err)})"
    else:
        what = f"is not a PyTorch checkpoint (it begins with {head[:16]!r})"
    return f"checkpoint {path} {what}. {fix}"


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
