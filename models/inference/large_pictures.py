"""Pictures too large to hold as the network's values, translated by regions: a TIFF (or BigTIFF) read and written
by regions, any other picture held as its file's samples only.

`Translator.translate_file` hands a picture here (`streamed_picture`) when its float32 values would take more than a
quarter of the exact budget's memory; smaller pictures go the whole way (pictures.py), as before. Such a picture's
float32 values are never whole in memory:

- A TIFF is read by regions from the file (data/large_tiff.py): `PictureRegions` (a MapSource, exact/storage.py)
  reads the regions the exact executor asks for and maps them to [-1, 1] with pictures.py's own `network_batch`,
  so every dtype, channel conversion and data range maps as a whole picture does. It turns them as the file's
  orientation tag says (as image_io.read_image_as_shown does) and pads them by reflection to the generator's size
  multiple as InferenceGenerator does (application.py), reading the reflected positions from the file.
- Any other picture is held as its file's samples (held_pictures.py: PNG, JPEG, ... decoded, an 8-bit RGB picture a
  quarter of its float32 values; a .npy file mapped from disk), upright as shown, and `PictureRegions` reads its
  regions from them instead. Float samples are checked for NaN and infinity first, a band of rows at a time.
- The exact executor (exact/) computes the generator's output tile by tile, every normalisation's statistics over
  the whole picture, and hands each tile to
- `RegionSink`, which cuts the padding off and maps [-1, 1] back to the input's dtype with pictures.py's
  `pictures_out` (8-bit in, 8-bit out; 16-bit, 16-bit; float data as float32 in the output's range), then writes
  the regions to a TiffRegionWriter (a TIFF in: a tiled TIFF out) or, for a held picture, to a HeldCanvas that
  writes them in the format the output's name says, as the whole way would: the output appears only once
  complete, and a failure leaves nothing at its path.

The output is the whole way's to float rounding. A TIFF by regions is refused, each in one paragraph, for what
needs it whole: `tile` (cross-faded tiles), an output not named .tif/.tiff, training mode (eval_mode=False), and
generators that take a latent code (BicycleGAN) or walk a bridge (--model sb). A held picture asked for tiles,
training mode, a latent code, a bridge or several answers goes the whole way, as it always has (it can be read
whole); its output may be any format that holds it.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tifffile
import torch

from data.image_io import (
    TIFF_EXTENSIONS,
    as_shown,
    as_stored,
    probe_image_as_shown,
    require_finite_by_rows,
    stored_dtype,
)
from data.large_tiff import TiffRegions, TiffRegionWriter
from models.inference.application import reflect_pad, split_padding
from models.inference.exact import translate_exactly
from models.inference.exact.regions import Box
from models.inference.held_pictures import HeldCanvas, HeldRegions, held_samples
from models.inference.pictures import PictureTranslation
from models.inference.records import LoadedGenerator, RunSettings
from util.errors import UserError

# How each orientation tag turns the stored pixels into the picture as shown (image_io.as_shown turns them so):
# (transposed, then rows flipped, columns flipped).
_TURNS = {1: (False, False, False), 2: (False, False, True), 3: (False, True, True), 4: (False, True, False),
          5: (True, False, False), 6: (True, False, True), 7: (True, True, True), 8: (True, True, False)}


# What a translation may ask for beside the picture, each for generators that a picture by regions cannot run (several
# answers, a latent code, a bridge's steps).
_ANSWERS = ("n_samples", "codes", "reference", "steps")


def streamed_picture(path: str, loaded: LoadedGenerator, running: RunSettings, pictures: PictureTranslation,
                     tile: int = 0, answers: dict | None = None) -> StreamedPicture | None:
    """The picture at `path` to translate by regions, or None where it goes the whole way: a volume generator, no
    exact budget (always whole), a picture whose float32 values (height x width x the generator's input channels x
    4 bytes) fit a quarter of the budget, a TIFF data/large_tiff.py does not read by regions (colours to convert,
    several pages that make one image: the whole way reads those or says why not), a file that cannot be probed
    (the whole way says why), and a picture of another format asked for what needs it whole (`tile`, training
    mode, a latent code or bridge, `answers`: it is decoded whole anyway)."""
    if loaded.volumes or running.exact is None:
        return None
    if path.lower().endswith(TIFF_EXTENSIONS):
        return _streamed_tiff(path, loaded, running, pictures)
    needs_it_whole = tile or not running.eval_mode or loaded.latent_size or loaded.bridge is not None or \
        any((answers or {}).get(name) is not None for name in _ANSWERS)
    if needs_it_whole:
        return None
    try:
        info = probe_image_as_shown(path)
    except UserError:
        return None
    if not _too_large(info.height, info.width, loaded, running):
        return None
    held = held_samples(path)  # its samples only (8-bit RGB: 3 bytes a pixel, not 12; a .npy file: mapped)
    return StreamedPicture(path, held.shape[:2], 1, info.alpha, stored_dtype(held.dtype), loaded, running, pictures,
                           held)


def _streamed_tiff(path: str, loaded: LoadedGenerator, running: RunSettings,
                   pictures: PictureTranslation) -> StreamedPicture | None:
    try:
        with TiffRegions(path) as regions:
            height, width, bands = regions.shape
            dtype = regions.dtype
    except UserError:
        return None
    with tifffile.TiffFile(path) as tif:
        page = tif.pages.first
        if len(tif.series[0].pages) != 1:
            return None
        tag = page.tags.get(274)  # Orientation
        orientation = int(tag.value) if tag is not None and int(tag.value) in _TURNS else 1
        # the alpha rule of image_io's TIFF reading: the last extra sample marked as opacity
        alpha = bool(page.extrasamples) and int(page.extrasamples[-1]) in (1, 2) and bands in (2, 4)
    if not _too_large(height, width, loaded, running):
        return None
    try:
        dtype = stored_dtype(dtype)
    except ValueError:  # not image data: the whole way says so, naming the file
        return None
    return StreamedPicture(path, (height, width), orientation, alpha, dtype, loaded, running, pictures)


def _too_large(height: int, width: int, loaded: LoadedGenerator, running: RunSettings) -> bool:
    """Whether a picture's float32 values would take more than a quarter of the exact budget's memory."""
    return height * width * loaded.input_nc * 4 > running.exact.memory // 4


@dataclass(frozen=True)
class StreamedPicture:
    """A picture too large to hold as float32 values and how it is translated: `translate` writes its translation."""

    path: str
    stored_size: tuple[int, int]  # height, width as the file stores them (a held picture: as held, upright)
    orientation: int              # the file's orientation tag (1: as stored; a held picture is turned already)
    alpha: bool                   # whether its last band is opacity
    dtype: np.dtype               # its samples as read_image reads them, and the output's
    loaded: LoadedGenerator
    running: RunSettings
    pictures: PictureTranslation
    # a picture of a format read whole: its samples (held_pictures.py); None: a TIFF read by regions
    held: np.ndarray | None = field(default=None, compare=False, repr=False)

    @property
    def shown_size(self) -> tuple[int, int]:
        height, width = self.stored_size
        return (width, height) if _TURNS[self.orientation][0] else (height, width)

    def translate(self, output_path: str, *, tile: int = 0, **answers: Any) -> list[str]:
        """Translate the picture into `output_path` (its folder made if need be) by regions: a TIFF into a tiled
        TIFF, a held picture in the format its name says; returns [output_path]. Raises `UserError` for what it
        refuses (see the module docstring), unreadable regions and an output its format cannot hold."""
        if self.held is None:
            self._refuse_what_needs_it_whole(output_path, tile, answers)
        height, width = self.shown_size
        rule, running = self.loaded.size_rule, self.running
        rows = _PaddedAxis(height, *split_padding(height, rule.multiple, rule.minimum))
        columns = _PaddedAxis(width, *split_padding(width, rule.multiple, rule.minimum))
        regions = TiffRegions(self.path) if self.held is None else HeldRegions(self.held)
        with regions:
            self._require_finite(regions)  # before the output's file is begun
            with self._writer(output_path) as writer, _TileBar(self.path) as progress:
                source = PictureRegions(self, regions, rows, columns)
                sink = RegionSink(writer, rows, columns, self.pictures, self.dtype)
                with torch.inference_mode(), torch.autocast(running.device.type, enabled=running.autocast is not None,
                                                            dtype=running.autocast or torch.bfloat16):
                    translate_exactly(self.loaded.generator, source, budget=running.exact, sink=sink,
                                      progress=progress)
        return [output_path]

    def _writer(self, output_path: str) -> TiffRegionWriter | HeldCanvas:
        height, width = self.shown_size
        if self.held is not None:
            return HeldCanvas(output_path, (height, width, self.loaded.output_nc), self.dtype, self.pictures, self.path)
        try:  # deflate, as image_io writes a whole picture's TIFF
            return TiffRegionWriter(output_path, height, width, self.loaded.output_nc, self.dtype, compression="zlib")
        except OSError as err:
            raise UserError(f"cannot write {output_path}: {' '.join(str(err).split())}; choose a folder you can "
                            f"write to.") from None

    def _require_finite(self, regions: TiffRegions | HeldRegions) -> None:
        """Float samples checked for NaN and infinity before the first tile, as the whole way checks its picture, a
        band of rows at a time (its float32 values a sixteenth of the budget): found at once, and named at the row
        and column the picture shows."""
        if self.dtype.kind != "f":
            return
        height, width = self.shown_size
        rows = max(1, self.running.exact.memory // 16 // (width * regions.shape[2] * 4))
        stored = ((top, _stored_box((top, min(top + rows, height)), (0, width), self.orientation, self.stored_size))
                  for top in range(0, height, rows))
        bands = ((top, as_shown(regions.read(*box[0], *box[1]), self.orientation)) for top, box in stored)
        require_finite_by_rows(bands, f"image {self.path}", "then translate it")

    def _refuse_what_needs_it_whole(self, output_path: str, tile: int, answers: dict) -> None:
        height, width = self.shown_size
        what = (f"{self.path} ({height} x {width} pixels) is too large to hold in memory (its float32 values exceed a "
                f"quarter of --exact_memory), so it is read, translated and written by regions")
        whole = "or give --exact_memory (Translator.load's exact) over 4 times its float32 size to translate it whole"
        if tile:
            raise UserError(f"--tile {tile} (tile={tile}): {what}, while cross-faded tiles need the picture whole. "
                            f"Leave --tile out: the translation by regions is exact, every normalisation taken over "
                            f"the whole picture.")
        if not output_path.lower().endswith(TIFF_EXTENSIONS):
            raise UserError(f"{output_path}: {what}, into a tiled TIFF; name the output .tif or .tiff.")
        if not self.running.eval_mode:
            raise UserError(f"--no_eval (eval_mode=False): {what}, in eval mode only (the seeded dropout masks and "
                            f"the serialised calls of training mode are the whole way's); leave --no_eval out, "
                            f"{whole}.")
        if self.loaded.latent_size or self.loaded.bridge is not None:
            kind = "takes a latent code (BicycleGAN)" if self.loaded.latent_size else "walks a Schrödinger bridge"
            raise UserError(f"the generator of {self.loaded.name} {kind}, and {what}, which is done for generators "
                            f"of one pass only; crop the picture into pieces that fit, {whole}.")
        given = [name for name in _ANSWERS if answers.get(name) is not None]
        if given:
            raise UserError(f"{' and '.join(given)}: the generator of {self.loaded.name} gives one translation per "
                            f"input in one pass; leave {' and '.join(given)} out.")


@dataclass(frozen=True)
class _PaddedAxis:
    """One axis of the picture (`size` positions) padded by reflection with `before` and `after` positions."""

    size: int
    before: int
    after: int

    @property
    def padded(self) -> int:
        return self.before + self.size + self.after

    def positions(self, start: int, stop: int) -> torch.Tensor:
        """The picture's positions that padded positions start..stop-1 hold, as application.reflect_pad fills them."""
        if max(self.before, self.after) <= self.size - 1:  # one reflection: every picture large enough to come here
            index = torch.arange(start - self.before, stop - self.before)
            index = torch.where(index < 0, -index, index)
            return torch.where(index >= self.size, 2 * (self.size - 1) - index, index)
        # a side shorter than its padding: reflected repeatedly, as reflect_pad does (a short axis: small)
        line = torch.arange(self.size, dtype=torch.float64).view(1, 1, self.size, 1)
        return reflect_pad(line, self.before, self.after, 0, 0).view(-1)[start:stop].long()

    def inside(self, start: int, stop: int) -> tuple[int, int]:
        """Padded positions start..stop-1 cut to the picture, in the picture's positions (may be empty)."""
        return max(start, self.before) - self.before, min(stop, self.before + self.size) - self.before


class PictureRegions:
    """The generator's input for a StreamedPicture: 1 x input_nc x padded height x padded width float32 in [-1, 1],
    read by regions (a MapSource: `shape`, `dtype`, `read(box)`); see the module docstring."""

    def __init__(self, picture: StreamedPicture, regions: TiffRegions | HeldRegions, rows: _PaddedAxis,
                 columns: _PaddedAxis):
        self.picture, self.regions, self.rows, self.columns = picture, regions, rows, columns
        self.shape = torch.Size((1, picture.loaded.input_nc, rows.padded, columns.padded))
        self.dtype = torch.float32

    def read(self, box: Box) -> torch.Tensor:
        """The input over `box` (padded positions ((top, bottom), (left, right))), 1 x input_nc x h x w."""
        rows, columns = self.rows.positions(*box[0]), self.columns.positions(*box[1])
        row_span, column_span = (int(rows.min()), int(rows.max()) + 1), (int(columns.min()), int(columns.max()) + 1)
        region = self._decoded(row_span, column_span)
        if not torch.equal(rows, torch.arange(*row_span)):
            region = region.index_select(2, rows - row_span[0])
        if not torch.equal(columns, torch.arange(*column_span)):
            region = region.index_select(3, columns - column_span[0])
        return region

    def _decoded(self, rows: tuple[int, int], columns: tuple[int, int]) -> torch.Tensor:
        """The picture as shown over `rows` x `columns`, in [-1, 1] as pictures.py maps a whole picture."""
        picture = self.picture
        (top, bottom), (left, right) = _stored_box(rows, columns, picture.orientation, picture.stored_size)
        samples = as_shown(self.regions.read(top, bottom, left, right), picture.orientation)
        return picture.pictures.network_batch(as_stored(samples)[None], picture.alpha, f"image {picture.path}")


class RegionSink:
    """Receives the generator's output tile by tile (padded positions, row-major) and writes the picture's part of
    each, mapped back to `dtype` as pictures.py maps a whole picture, to `writer`."""

    def __init__(self, writer: TiffRegionWriter | HeldCanvas, rows: _PaddedAxis, columns: _PaddedAxis,
                 pictures: PictureTranslation, dtype: np.dtype):
        self.writer, self.rows, self.columns, self.pictures, self.dtype = writer, rows, columns, pictures, dtype

    def __call__(self, box: Box, region: torch.Tensor) -> None:
        (top, bottom), (left, right) = self.rows.inside(*box[0]), self.columns.inside(*box[1])
        if top >= bottom or left >= right:  # a tile of padding only
            return
        rows_cut, columns_cut = top + self.rows.before - box[0][0], left + self.columns.before - box[1][0]
        out = region[:, :, rows_cut:rows_cut + bottom - top, columns_cut:columns_cut + right - left].float().cpu()
        values = self.pictures.pictures_out(out, (1, bottom - top, right - left), self.dtype)[0]
        self.writer.write(top, bottom, left, right, values)


class _TileBar:
    """The executor's tiles as a progress bar on stderr, on a terminal only (tqdm's own choice)."""

    def __init__(self, path: str):
        self.name, self.bar = os.path.basename(path), None

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=self.name, unit="tile", file=sys.stderr, disable=None, leave=False)
        self.bar.update(done - self.bar.n)

    def __enter__(self) -> _TileBar:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self.bar is not None:
            self.bar.close()


def _stored_box(rows: tuple[int, int], columns: tuple[int, int], orientation: int,
                stored_size: tuple[int, int]) -> tuple[tuple[int, int], tuple[int, int]]:
    """The stored pixels that `rows` x `columns` of the picture as shown come from (as_shown turns them back)."""
    transposed, rows_flipped, columns_flipped = _TURNS[orientation]
    height, width = stored_size[::-1] if transposed else stored_size
    if rows_flipped:
        rows = (height - rows[1], height - rows[0])
    if columns_flipped:
        columns = (width - columns[1], width - columns[0])
    return (columns, rows) if transposed else (rows, columns)
