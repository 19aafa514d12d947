"""What the Translator (models/inference/translator.py) takes and gives when its generator translates volumes.

A generator of a 3-D family (`size_rule(...).dims == 3`) was trained on patches; the Translator runs it
over whole volumes in Gaussian-blended sliding windows of the patch size (models/inference/windows.py), as
test.py does, so `translate_file`'s output equals test.py's `volumes/<name>_fake_B.nii.gz`. Data values
map to the network's [-1, 1] through the run's --data_range window (data/volume_io.to_network; uint8
data without one by 0..255) and back through the output domain's window (from_network).

    WindowSettings                 the window: size (the training --patch_size), overlap, batch
    window_settings(...)           those checked against the generator, with one-paragraph refusals
    VolumeTranslation              each kind of volume in and out (path, array, tensor), files written
    unit_windows(...)              the input's and the output's value windows for data of one dtype
    volume_array(array, channels)  a (D, H, W) or (C, D, H, W) array checked and made (C, D, H, W) float32
"""
from __future__ import annotations

import numbers
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from PIL import Image

from data.image_folder import is_image_file
from data.volume_io import (
    VOLUME_EXTENSIONS,
    Window,
    from_network,
    is_volume_file,
    probe_volume,
    read_reference,
    read_volume,
    to_network,
    volume_stem,
    write_volume,
)
from data.volume_patches import WINDOW_BATCH, WINDOW_OVERLAP, batch_refusal
from models.inference.pictures import Decoded
from models.inference.windows import Windows, check_window
from util.errors import UserError
from util.safe_files import atomic_write_by_name

# What a volume translator takes, for the messages that refuse anything else.
VOLUME_INPUTS = ("a .nii, .nii.gz or .npy file, a NumPy array (D, H, W) or (C, D, H, W) in the data's units, or a "
                 "float tensor (C, D, H, W) or (N, C, D, H, W) in [-1, 1]")


@dataclass(frozen=True)
class WindowSettings:
    """Whole volumes go through the generator in windows of `size` voxels (D, H, W: the patch size it
    trained on) overlapping by the fraction `overlap` of a window, `batch` windows at a time."""

    size: tuple[int, int, int]
    overlap: float = WINDOW_OVERLAP
    batch: int = WINDOW_BATCH

    def windows(self) -> Windows:
        """These windows, as models/inference.InferenceGenerator translates whole volumes in them."""
        return Windows.for_volumes(self.size, self.overlap, self.batch)

    def describe(self) -> str:
        return f"windows of {'x'.join(map(str, self.size))} voxels, overlap {self.overlap:g}, {self.batch} at once"


def window_settings(flags: Any, source: str, patch_size: int | Sequence[int] | None, overlap: float | None,
                    batch: int | None) -> WindowSettings:
    """The window of the volume generator `flags` describes (netG and its shape flags) from `source`:
    `patch_size` (one side for a cube, or D, H, W) and the fraction `overlap` (0 <= f < 1) and `batch`
    (>= 1), None meaning the defaults; raises `UserError` in one paragraph for a missing patch size or a
    bad value."""
    if patch_size is None:
        raise UserError(f"{source} holds a volume generator (--netG {flags.netG}), which translates whole volumes "
                        f"in windows of the --patch_size it trained on, but no train_opt.json beside the weights "
                        f"says which; pass it: patch_size=(D, H, W) to Translator.load (scripts/translate.py: "
                        f"--patch_size D,H,W).")
    sides = (patch_size,) * 3 if isinstance(patch_size, (int, np.integer)) else tuple(patch_size)
    if len(sides) != 3 or not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s >= 1
                                  for s in sides):
        raise UserError(f"patch_size {patch_size!r} is not one whole number >= 1 (a cube) or three (D, H, W); pass "
                        f"the --patch_size the run trained with, e.g. 64 or (64, 64, 32).")
    sides = tuple(int(s) for s in sides)
    check_window(flags, sides)
    overlap = WINDOW_OVERLAP if overlap is None else overlap
    if not (isinstance(overlap, numbers.Real) and 0 <= overlap < 1):
        raise UserError(f"window_overlap {overlap!r} is not a fraction of a window from 0 up to (not including) 1; "
                        f"neighbouring windows overlap by it (default {WINDOW_OVERLAP}).")
    batch = WINDOW_BATCH if batch is None else batch
    if not (isinstance(batch, (int, np.integer)) and not isinstance(batch, bool) and batch >= 1):
        raise UserError(f"window_batch {batch!r} is not a whole number >= 1: how many windows go through the "
                        f"generator at once (default {WINDOW_BATCH}; fewer take less memory).")
    refused = batch_refusal("window_batch", int(batch), sides)
    if refused:
        raise UserError(f"{refused}.")
    return WindowSettings(sides, float(overlap), int(batch))


def unit_windows(dtype: np.dtype, input_range: Window | None, output_range: Window | None, what: str,
                 source: str) -> tuple[Window, Window]:
    """(input window, output window): the values of data of `dtype` that map to the network's -1 and 1,
    and those its output's -1 and 1 map back to, as test.py maps a volume dataset's (volume_io.volume_window):
    the --data_range windows, else 0..255 for uint8 data. Raises `UserError` naming `what` otherwise."""
    if input_range is not None and output_range is not None:
        return input_range, output_range
    if np.dtype(dtype) == np.uint8:
        return input_range or (0.0, 255.0), output_range or (0.0, 255.0)
    raise UserError(
        f"{what} holds {np.dtype(dtype).name} values, and {source} trained without --data_range, so nothing says "
        f"which of them map to the network's -1 and 1 (volumes need a window; values outside it are clipped). Pass "
        f"the window the data need: data_range=(MIN, MAX) for both domains, or (A_MIN, A_MAX, B_MIN, B_MAX), to "
        f"Translator.load (scripts/translate.py: --data_range), e.g. -1000 2000 for CT in Hounsfield units; "
        f"`python scripts/data_range.py --dataroot <dataroot>` suggests one from the training volumes.")


def volume_array(array: np.ndarray, channels: int) -> np.ndarray:
    """A (D, H, W) or (C, D, H, W) array of numbers, checked (finite, voxels, `channels` channels) and
    returned as float32 (C, D, H, W) in its own units. Raises `UserError` in one paragraph."""
    if array.ndim not in (3, 4):
        raise UserError(f"cannot translate an array of shape {array.shape} as a volume: pass (D, H, W) or "
                        f"(C, D, H, W).")
    if array.dtype.kind not in "iuf":
        raise UserError(f"cannot translate a {array.dtype} array: pass integer or float values in the data's units.")
    volume = array[None] if array.ndim == 3 else array
    if 0 in volume.shape:
        raise UserError(f"cannot translate an array of shape {array.shape}: it holds no voxels; pass (D, H, W) or "
                        f"(C, D, H, W) with at least one voxel.")
    if volume.shape[0] != channels:
        raise UserError(f"the generator takes {channels}-channel volumes, but this array of shape {array.shape} has "
                        f"{volume.shape[0]} (a (C, D, H, W) array holds C channels, a (D, H, W) array one); pass "
                        f"{channels} channels.")
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        raise UserError(f"this array holds {int((~np.isfinite(array)).sum())} NaN or infinite values; the network "
                        f"needs finite numbers (one NaN spreads through the whole output). Replace them first, e.g. "
                        f"np.nan_to_num(array, nan=...).")
    return np.ascontiguousarray(volume, dtype=np.float32)


@dataclass
class VolumeTranslation:
    """The volumes a Translator of a 3-D generator takes and gives (the module docstring of
    models/inference/translator.py lists them): `decode` makes the generator's batch (N, C, D, H, W) in
    [-1, 1] of each, and the Decoded it returns makes the output of the generator's (run in its sliding
    window). `who` names the generator in messages."""

    who: str
    input_nc: int
    output_nc: int
    input_range: Window | None
    output_range: Window | None

    def decode(self, volume: Any) -> Decoded:
        """One volume (a path, NumPy array or tensor) as the generator's batch, and how its output goes back
        into the same kind; anything else refused in one paragraph."""
        if isinstance(volume, torch.Tensor):
            return self._decode_tensor(volume)
        if isinstance(volume, (str, os.PathLike)):
            path = os.fspath(volume)
            self._require_volume_file(path)
            info = probe_volume(path)
            if info.shape[0] != self.input_nc:
                raise UserError(f"{self.who} takes {self.input_nc}-channel volumes, but volume {path} is "
                                f"{info.describe()}; pass volumes of {self.input_nc} channel(s).")
            return self._decode_units(read_volume(path, self.input_nc).array, info.dtype, f"volume {path}")
        if isinstance(volume, np.ndarray):
            if volume.ndim == 2:
                raise self.picture_error(f"an array of shape {volume.shape} (H x W) is a picture")
            decoded = self._decode_units(volume_array(volume, self.input_nc), volume.dtype, "this array")
            if volume.ndim == 3 and self.output_nc == 1:  # (D, H, W) in, (D, H, W) out
                return Decoded(decoded.batch, lambda out: decoded.encode(out)[0])
            return decoded
        if isinstance(volume, Image.Image):
            raise self.picture_error("a PIL image is a picture")
        raise UserError(f"cannot translate a {type(volume).__name__}: pass {VOLUME_INPUTS}, or a list of them.")

    def check_file_names(self, input_path: str, output_path: str) -> None:
        """Raise `UserError` unless `input_path` names a volume file and `output_path` a format that holds one."""
        self._require_volume_file(input_path)
        if not is_volume_file(output_path):
            extension = os.path.splitext(output_path)[1] or "no extension"
            raise UserError(f"cannot write the translation of volume {input_path} to {output_path}: a file with "
                            f"{extension} cannot hold a volume; name it with one of {', '.join(VOLUME_EXTENSIONS)} "
                            f"(NIfTI keeps the input's geometry).")

    def write(self, output_path: str, values: np.ndarray, input_path: str) -> list[str]:
        """Write `values` (C, D, H, W, in the output's units) to `output_path` (.nii, .nii.gz or .npy, its
        folder made if need be), NIfTI with the affine and header of the input (identity for an .npy
        input, which has none), so that the output lies exactly over it in a viewer. Written whole or
        not at all; returns [output_path]."""
        extension = output_path[len(volume_stem(output_path)):]  # nibabel and NumPy choose the format by it

        def write(temporary: str) -> None:
            named = temporary + extension
            try:
                write_volume(named, values, read_reference(input_path))
                os.replace(named, temporary)
            finally:
                if os.path.exists(named):
                    os.remove(named)

        try:
            atomic_write_by_name(output_path, write)
        except (OSError, ValueError, ImportError) as err:
            raise UserError(f"cannot write {output_path}: {' '.join(str(err).split())}.") from None
        return [output_path]

    def picture_error(self, what: str) -> UserError:
        """The refusal of a picture (`what`: e.g. "x.png is a picture")."""
        return UserError(f"{self.who} translates volumes, and {what}; pass {VOLUME_INPUTS}. Pictures need a run "
                         f"trained on pictures (a 2-D --netG).")

    def _require_volume_file(self, path: str) -> None:
        if not is_volume_file(path):
            raise self.picture_error(f"{path} is a picture" if is_image_file(path) else
                                     f"{path} is not a volume file ({', '.join(VOLUME_EXTENSIONS)})")

    def _decode_tensor(self, x: torch.Tensor) -> Decoded:
        if x.ndim == 3:
            raise self.picture_error(f"a tensor of shape {tuple(x.shape)} (C x H x W) is a picture")
        batch = x if x.ndim == 5 else x[None]
        if not x.is_floating_point() or x.ndim not in (4, 5) or batch.shape[1] != self.input_nc \
                or 0 in batch.shape[2:]:
            raise UserError(f"cannot translate a {x.dtype} tensor of shape {tuple(x.shape)}: {self.who} takes float "
                            f"tensors (C, D, H, W) or (N, C, D, H, W) in [-1, 1] with C = {self.input_nc} and at "
                            f"least one voxel.")
        if len(batch) == 0:
            return Decoded(batch, lambda out: x.new_zeros((0, self.output_nc, *batch.shape[2:])))

        def to_tensor(out: torch.Tensor) -> torch.Tensor:
            out = out.to(x.device, x.dtype).clone()  # clone: an ordinary tensor, usable with autograd
            return out if x.ndim == 5 else out[0]
        return Decoded(batch, to_tensor)

    def _decode_units(self, volume: np.ndarray, dtype: np.dtype, what: str) -> Decoded:
        """(C, D, H, W) float32 in the units of data of `dtype` as a batch of one; the output (C', D, H, W)
        float32 in the output's units."""
        input_window, output_window = unit_windows(dtype, self.input_range, self.output_range, what, self.who)
        return Decoded(torch.from_numpy(to_network(volume, input_window))[None],
                       lambda out: from_network(out[0].cpu().numpy(), output_window))
