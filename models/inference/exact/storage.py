"""Where the exact executor keeps the full-size maps it materialises: in memory while they fit the budget's share,
otherwise in a file under the scratch folder, mapped and read by regions. After each read and write the file's
pages are given back (madvise), so the process's resident memory stays bounded by the budget, not by the map; the
operating system's page cache keeps what it can of the file."""
from __future__ import annotations

import mmap
import os
import shutil
import tempfile
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from models.inference.exact.regions import Box
from util.errors import UserError

_NUMPY_TYPES = {torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16,
                torch.bfloat16: np.uint16}  # bf16: numpy has none; the bits are kept as uint16


class MapSource(Protocol):
    """A map read by regions that is never whole in memory: the input of a picture read from its file."""

    shape: torch.Size  # N x C x spatial...
    dtype: torch.dtype

    def read(self, box: Box) -> torch.Tensor:
        """The values over `box` (within the map), N x C x the box's sizes, on the CPU."""
        ...


class StoredMap:
    """One full-size map (N x C x spatial...) on the CPU: `read(box)` and `write(box, values)` a region."""

    def __init__(self, values: torch.Tensor, mapping: mmap.mmap | None = None, path: Path | None = None):
        self.values = values
        self.mapping = mapping
        self.path = path
        self.nbytes = values.numel() * values.element_size()

    # A file-backed map gives its pages back after every read and write, not once per tile: a region is a row
    # segment per channel and row, shorter than a page where the tile is narrow, so the pages a tile touches
    # in one map can hold several times the region's bytes (docs/benchmarks.md, "Large pictures, exactly").

    def read(self, box: Box) -> torch.Tensor:
        """A copy of the region: the operations reading it may work in place (ReLU(inplace=True))."""
        region = self.values[_slices(box)].clone()
        self._release_pages()
        return region

    def write(self, box: Box, values: torch.Tensor) -> None:
        self.values[_slices(box)].copy_(values)
        self._release_pages()

    def whole(self) -> torch.Tensor:
        copy = self.values.clone()
        self._release_pages()
        return copy

    def take(self) -> torch.Tensor:
        """The whole map, handed over (no copy of a map held in memory): its last reading."""
        return self.values if self.mapping is None else self.whole()

    def _release_pages(self) -> None:
        """Give back the pages of a file-backed map (its data stay in the file and the page cache)."""
        if self.mapping is not None:
            self.mapping.madvise(mmap.MADV_DONTNEED)

    def free(self) -> None:
        self.values = torch.empty(0)
        if self.mapping is not None:
            self.mapping.close()
            self.path.unlink(missing_ok=True)
            self.mapping = None


class MapStore:
    """Allocates StoredMaps: in memory while the maps held there stay within `memory` bytes, else in files in a
    folder of their own under `scratch` (the system's temporary folder by default), removed by `close`."""

    def __init__(self, memory: int, scratch: str | os.PathLike | None = None):
        self.memory = memory
        self.held = 0
        self.scratch = Path(scratch) if scratch else None
        self.folder: Path | None = None
        self.files = 0

    def new(self, shape: torch.Size, dtype: torch.dtype) -> StoredMap:
        nbytes = int(np.prod(shape)) * torch.empty(0, dtype=dtype).element_size()
        if self.held + nbytes <= self.memory:
            self.held += nbytes
            return StoredMap(torch.empty(shape, dtype=dtype))
        try:
            if self.folder is None:
                self.folder = Path(tempfile.mkdtemp(prefix="img2img-exact-", dir=self.scratch))
            self.files += 1
            path = self.folder / f"map-{self.files}.bin"
            with open(path, "w+b") as file:
                file.truncate(nbytes)  # sparse until written
                mapping = mmap.mmap(file.fileno(), nbytes)
        except OSError as err:
            where = self.scratch or "the system's temporary folder"
            raise UserError(f"cannot keep the maps of exact translation that exceed its memory budget in {where}: "
                            f"{' '.join(str(err).split())}; give --scratch (ExactBudget's scratch) a folder you can "
                            f"write to with room for them, or a larger --exact_memory.") from None
        array = np.frombuffer(mapping, dtype=_NUMPY_TYPES[dtype]).reshape(shape)
        values = torch.from_numpy(array)
        return StoredMap(values.view(dtype) if dtype == torch.bfloat16 else values, mapping, path)

    def free(self, stored: StoredMap) -> None:
        if stored.mapping is None:
            self.held -= stored.nbytes
        stored.free()

    def close(self) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None


def _slices(box: Box) -> tuple[slice, ...]:
    return (slice(None), slice(None), *(slice(start, stop) for start, stop in box))
