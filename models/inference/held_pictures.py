"""Pictures of formats read whole, translated by regions (large_pictures.py): held as their file's samples, never as
float32 values, and their output gathered as its samples.

A PNG, JPEG, ... is decoded and held (8-bit RGB: 3 bytes a pixel, where the float32 values take 12). A .npy file is
mapped instead of read (numpy's memmap): its samples stay in the file, and the regions the translation asks for are
read from it; a .npy output is likewise written into a mapped file beside the output's name and renamed into place
once complete, so a float picture of any size goes in and out without its samples whole in memory (the mapped pages
are the file's: the system reads and writes them back as it needs the memory).
"""
from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np

from data.image_io import NUMPY_EXTENSIONS, check_writable, read_image_as_shown, unreadable
from models.inference.pictures import PictureTranslation
from util.errors import UserError


def held_samples(path: str) -> np.ndarray:
    """The picture at `path` as shown, H x W x C, in its file's sample type: a .npy file mapped (read_image's dtype
    conversion is made region by region), any other format decoded (image_io.read_image_as_shown)."""
    if not path.lower().endswith(NUMPY_EXTENSIONS):
        return read_image_as_shown(path)
    try:
        samples = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as err:  # e.g. a file shorter than its header says
        raise unreadable(path, err) from err
    return samples[:, :, None] if samples.ndim == 2 else samples


class HeldRegions:
    """Regions of a held picture's samples, read as TiffRegions reads a file's (`read(top, bottom, left, right)`)."""

    def __init__(self, samples: np.ndarray):
        self.samples = samples
        self.shape = samples.shape

    def read(self, top: int, bottom: int, left: int, right: int) -> np.ndarray:
        return np.asarray(self.samples[top:bottom, left:right])

    def __enter__(self) -> HeldRegions:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        pass


class HeldCanvas:
    """The output of a held picture, received by regions as a TiffRegionWriter receives them, and written once every
    region has come in the format its name says: a .npy into a mapped temporary file, then renamed; any other format
    held, then written whole as pictures.py writes the whole way's. Refuses at once an output its format cannot hold;
    a failure leaves nothing at the output's path."""

    def __init__(self, path: str, shape: tuple[int, int, int], dtype: np.dtype, pictures: PictureTranslation,
                 input_path: str):
        self.path, self.pictures, self.input_path = path, pictures, input_path
        self.temporary = None
        try:
            check_writable(path, dtype, shape[2])
            if not path.lower().endswith(NUMPY_EXTENSIONS):
                self.samples = np.empty(shape, dtype)
                return
            folder, name = os.path.split(os.path.abspath(path))
            os.makedirs(folder, exist_ok=True)
            # as image_io.write_image names its temporary files: the process and thread make it unique
            self.temporary = os.path.join(folder, f".{name}.{os.getpid()}-{threading.get_ident()}.tmp.npy")
            self.samples = np.lib.format.open_memmap(self.temporary, mode="w+", dtype=dtype, shape=shape)
        except (OSError, ValueError) as err:
            self._remove_temporary()
            raise UserError(f"cannot write {path}: {' '.join(str(err).split())}.") from None

    def write(self, top: int, bottom: int, left: int, right: int, values: np.ndarray) -> None:
        self.samples[top:bottom, left:right] = values.reshape(bottom - top, right - left, -1)

    def __enter__(self) -> HeldCanvas:
        return self

    def __exit__(self, error_type: type | None, *exc_info: Any) -> None:
        samples, self.samples = self.samples, None
        if self.temporary is None:
            if error_type is None:
                self.pictures.write(self.path, samples, self.input_path)
            return
        try:
            if error_type is None:
                samples.flush()
                del samples  # the mapping closed before the file moves
                os.replace(self.temporary, self.path)
        except OSError as err:
            raise UserError(f"cannot write {self.path}: {' '.join(str(err).split())}.") from None
        finally:
            self._remove_temporary()

    def _remove_temporary(self) -> None:
        if self.temporary is not None and os.path.exists(self.temporary):
            os.remove(self.temporary)
