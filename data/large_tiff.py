"""TIFF and BigTIFF images too large to hold whole, read and written one region at a time.

    TiffRegions(path)                         a reader: `shape` (height, width, bands), `dtype`, and
                                              `read(top, bottom, left, right)` -> (rows, cols, bands)
    TiffRegionWriter(path, height, width, bands, dtype, tile=512, compression=None)
                                              a writer fed regions in row-major grid order; the file
                                              appears at `path` only once complete
    needs_bigtiff(height, width, bands, dtype, compression)   whether such a file may pass 4 GB
    MAX_TIFF_PIXELS, MAX_TIFF_BANDS, MAX_SEGMENT_BYTES   the header limits the reader checks
    WRITER_COMPRESSIONS                       the lossless codecs the writer offers

Reading decodes only the tiles (tiled TIFF) or strips (striped TIFF) that overlap the region asked
for; uncompressed strips are read row by row, so a file stored as one uncompressed strip (what
`tifffile.imwrite` writes by default) is never read whole either. Every size the header declares is
checked before anything is allocated for it. Writing keeps at most one row of the caller's grid (plus
fewer than `tile` rows carried over to the next) and hands tifffile finished tiles as they complete.
"""
from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import tifffile

from util.errors import UserError
from util.safe_files import new_temporary_file

logger = logging.getLogger(__name__)

# The most pixels (height x width) a header may declare by default: 2**31, e.g. 32768 x 65536. Far below
# what a damaged or hostile header can claim (2**64 in BigTIFF), far above what a scanner or a mosaic
# writes; callers with genuinely larger images pass `max_pixels`.
MAX_TIFF_PIXELS = 2 ** 31
MAX_TIFF_BANDS = 64
# The most bytes one tile or compressed strip may decode to: it is decoded whole, so its size, a header
# number too, is checked like the image's (256 MiB: a 8192 x 8192 x 4 uint8 tile).
MAX_SEGMENT_BYTES = 2 ** 28
# How many bytes of uncompressed strip rows, or of consecutive segments, are read from the file at once.
_READ_CHUNK_BYTES = 2 ** 24
# Photometric interpretations whose samples are the image's values; the others (palette, CMYK, YCbCr,
# min-is-white, ...) hold colours to convert, which data/image_io.py's read_image does for whole images.
_DATA_PHOTOMETRICS = ("MINISBLACK", "RGB")
_JPEG_COMPRESSIONS = (6, 7, 33007, 34892)
# Lossless codecs the writer offers, by the names tifffile knows them.
WRITER_COMPRESSIONS = ("zlib", "deflate", "lzw", "zstd", "lzma", "packbits")


class TiffRegions:
    """Reads rectangular regions of the first page of a TIFF or BigTIFF file.

    Multi-page files and pyramids (pages or SubIFDs of reduced resolution) are read as their page 0,
    the full-resolution image of a pyramid. Tiled and striped pages, any compression and sample type
    tifffile decodes (uint8, uint16, float32, ...), any band count up to MAX_TIFF_BANDS, and chunky or
    planar sample layouts are read. A 2-D page reads as one band. Refused with a `UserError`: a file
    that is not a TIFF or holds no page, a header declaring more than `max_pixels` pixels, more than
    MAX_TIFF_BANDS bands or tiles/strips decoding to more than MAX_SEGMENT_BYTES, volumetric (SGI
    depth) pages, colour encodings other than grey or RGB, and damaged tiles or strips (when read).
    Use as a context manager, or call `close()`.
    """

    shape: tuple[int, int, int]  # (height, width, bands)
    dtype: np.dtype  # of the samples, in the machine's byte order

    def __init__(self, path: str | Path, max_pixels: int = MAX_TIFF_PIXELS) -> None:
        self.path = str(path)
        # tifffile logs what it finds wrong with a file as well as raising; the raised error is
        # reported, naming the file, so its records would only repeat it (as in data/image_io.py).
        logging.getLogger("tifffile").setLevel(logging.CRITICAL)
        try:
            self._tif = tifffile.TiffFile(self.path)
        except FileNotFoundError as err:
            raise UserError(f"{self.path} does not exist; check the path.") from err
        except (tifffile.TiffFileError, ValueError, OSError) as err:
            raise UserError(f"{self.path} cannot be read as a TIFF file ({err}). Check that the path names a "
                            f"TIFF or BigTIFF image, or convert the image to TIFF (e.g. tifffile.imwrite).") from err
        try:
            self._page = self._first_page()
            self._check_header(max_pixels)
            self._lay_out()
        except BaseException:
            self._tif.close()
            raise

    def _first_page(self) -> tifffile.TiffPage:
        try:
            page = self._tif.pages.first
        except (tifffile.TiffFileError, IndexError, ValueError) as err:
            raise UserError(f"{self.path} holds no image (a TIFF without a readable first page: {err}). "
                            f"Write the image again.") from err
        return page

    def _check_header(self, max_pixels: int) -> None:
        page, path = self._page, self.path
        height, width, bands = page.imagelength, page.imagewidth, page.samplesperpixel
        if height < 1 or width < 1:
            raise UserError(f"{path} declares an empty image of {height} x {width} pixels; write the image again.")
        if height * width > max_pixels:
            raise UserError(
                f"{path} declares an image of {height} x {width} pixels ({height * width} pixels), more than the "
                f"limit of {max_pixels} pixels. If the image is genuine, pass a larger max_pixels (regions are "
                f"read one at a time, never the whole image); otherwise crop or split it into smaller files.")
        if bands > MAX_TIFF_BANDS:
            raise UserError(f"{path} declares {bands} bands per pixel, more than the limit of {MAX_TIFF_BANDS}. "
                            f"Split the bands into several files of at most {MAX_TIFF_BANDS} bands each.")
        if page.imagedepth != 1:
            raise UserError(f"{path} is a volumetric TIFF (image depth {page.imagedepth}), which is read as a "
                            f"volume, not by regions of one image; save its slices as separate pages or files.")
        # JPEG stores RGB as YCbCr, which its decoder turns back into RGB
        ycbcr_jpeg = page.photometric.name == "YCBCR" and page.compression in _JPEG_COMPRESSIONS
        if page.photometric.name not in _DATA_PHOTOMETRICS and not ycbcr_jpeg:
            raise UserError(f"{path} stores its pixels as {page.photometric.name} colours, which are not read by "
                            f"region; re-save it as greyscale or RGB (or read it whole with read_image).")
        if page.dtype is None:
            raise UserError(f"{path} stores samples of {page.bitspersample} bits (sample format "
                            f"{page.sampleformat}) that cannot be decoded; re-save it as 8/16-bit integers or "
                            f"32-bit floats.")
        if page.compression != 1:
            try:
                tifffile.TIFF.DECOMPRESSORS[page.compression]
            except (KeyError, NotImplementedError) as err:
                name = getattr(page.compression, "name", page.compression)
                raise UserError(f"{path} is compressed as {name}, which cannot be decoded here "
                                f"({err}); re-save it with deflate, LZW or no compression.") from err

    def _lay_out(self) -> None:
        """Where the tiles or strips lie, checked against the header's other numbers and the file's size."""
        page, path = self._page, self.path
        self.shape = (page.imagelength, page.imagewidth, page.samplesperpixel)
        self.dtype = np.dtype(page.dtype).newbyteorder("=")
        self._planes = page.samplesperpixel if page.planarconfig == 2 else 1
        self._samples_per_segment = page.samplesperpixel // self._planes
        if page.is_tiled:
            self._segment_size = (page.tilelength, page.tilewidth)
        else:
            self._segment_size = (page.rowsperstrip, page.imagewidth)
        kind = self._kind
        if min(self._segment_size) < 1:
            raise UserError(f"{path} is damaged: it declares {kind}s of {self._segment_size[0]} x "
                            f"{self._segment_size[1]} pixels; write the image again.")
        self._segments_down = -(-page.imagelength // self._segment_size[0])
        self._segments_across = -(-page.imagewidth // self._segment_size[1])
        self._file_size = self._tif.filehandle.size
        expected = self._planes * self._segments_down * self._segments_across
        if len(page.dataoffsets) < expected or len(page.databytecounts) < expected:
            raise UserError(f"{path} is damaged: its image needs {expected} {kind}s but the header lists "
                            f"{min(len(page.dataoffsets), len(page.databytecounts))}; write the image again.")
        # Uncompressed strips hold their rows one after another: read just the rows a region needs.
        self._raw_rows = (not page.is_tiled and page.compression == 1 and page.predictor == 1
                          and page.fillorder == 1 and page.bitspersample == self.dtype.itemsize * 8
                          and page.sampleformat != 5)
        rows, cols = self._segment_size
        self._segment_bytes = rows * cols * self._samples_per_segment * self.dtype.itemsize
        if self._segment_bytes > MAX_SEGMENT_BYTES and not self._raw_rows:
            raise UserError(f"{path} stores its image in {kind}s of {rows} x {cols} pixels ({self._segment_bytes} "
                            f"bytes each), more than the {MAX_SEGMENT_BYTES} bytes one {kind} may hold here. Re-save "
                            f"it tiled, e.g. tifffile.imwrite(..., tile=(512, 512)) or gdal_translate -co TILED=YES.")
        self._decode_args = {}
        if page.compression in _JPEG_COMPRESSIONS:  # JPEG segments need the page's shared tables
            self._decode_args = {"jpegtables": page.jpegtables, "jpegheader": page.jpegheader}

    @property
    def bigtiff(self) -> bool:
        """Whether the file is a BigTIFF (64-bit offsets)."""
        return self._tif.is_bigtiff

    def read(self, top: int, bottom: int, left: int, right: int) -> np.ndarray:
        """The pixels of rows top..bottom-1 and columns left..right-1: (bottom-top, right-left, bands) in
        `dtype`. Only the tiles or strips overlapping the region are read and decoded, one row of them at
        a time. A damaged one raises a `UserError` naming the file."""
        height, width, bands = self.shape
        if not (0 <= top <= bottom <= height and 0 <= left <= right <= width):
            raise ValueError(f"region rows {top}:{bottom}, columns {left}:{right} is not inside the "
                             f"{height} x {width} image of {self.path}")
        out = np.empty((bottom - top, right - left, bands), self.dtype)
        if out.size == 0:
            return out
        if self._raw_rows:
            self._read_raw_rows(out, top, bottom, left, right)
            return out
        seg_height, seg_width = self._segment_size
        for plane in range(self._planes):
            for seg_row in range(top // seg_height, (bottom - 1) // seg_height + 1):
                first = (plane * self._segments_down + seg_row) * self._segments_across
                indices = [first + col for col in range(left // seg_width, (right - 1) // seg_width + 1)]
                for data, index in self._read_segments(indices):
                    self._place(out, data, index, plane, top, bottom, left, right)
        return out

    def _read_segments(self, indices: list[int]) -> Iterator[tuple[bytes | None, int]]:
        offsets = [self._page.dataoffsets[i] for i in indices]
        counts = [self._page.databytecounts[i] for i in indices]
        # Compressed data may be a little larger than what it decodes to, never much.
        most = 2 * self._segment_bytes + 65536
        for index, offset, count in zip(indices, offsets, counts):
            if count > most or offset + count > self._file_size:
                raise UserError(f"{self.path} is damaged: its {self._kind} {index} declares {count} bytes at "
                                f"offset {offset}, beyond the file's {self._file_size} bytes or more than one "
                                f"{self._kind} can hold; write the image again.")
        fh = self._tif.filehandle
        yield from fh.read_segments(offsets, counts, indices=indices, lock=fh.lock, buffersize=_READ_CHUNK_BYTES)

    @property
    def _kind(self) -> str:
        return "tile" if self._page.is_tiled else "strip"

    def _place(self, out: np.ndarray, data: bytes | None, index: int, plane: int,
               top: int, bottom: int, left: int, right: int) -> None:
        """Decode segment `index` and copy its overlap with the region into `out`."""
        seg_height, seg_width = self._segment_size
        position = index % (self._segments_down * self._segments_across)
        y0, x0 = position // self._segments_across * seg_height, position % self._segments_across * seg_width
        ys, ye, xs, xe = max(top, y0), min(bottom, y0 + seg_height), max(left, x0), min(right, x0 + seg_width)
        bands = slice(plane, plane + 1) if self._planes > 1 else slice(None)
        target = out[ys - top:ye - top, xs - left:xe - left, bands]
        if data is None:  # a sparse file's missing tile: what the file says stands for no data
            target[...] = self._page.nodata
            return
        try:
            segment, _, _ = self._page.decode(data, index, **self._decode_args)
        except Exception as err:  # each codec fails its own way (zlib.error, imagecodecs' RuntimeErrors,
            # lzma.LZMAError, tifffile's TiffFileError, NumPy's reshape); the message names what was caught
            raise UserError(f"{self.path} is damaged: its {self._kind} {index} (rows {y0}.., columns {x0}..) "
                            f"cannot be decoded ({type(err).__name__}: {err}); write the image again.") from err
        segment = segment[0]  # (rows, cols, samples): tifffile's leading axis is depth, always 1 here
        if segment.shape[0] < ye - y0 or segment.shape[1] < xe - x0:
            raise UserError(f"{self.path} is damaged: its {self._kind} {index} decodes to {segment.shape[:2]} "
                            f"pixels, fewer than its place needs; write the image again.")
        target[...] = segment[ys - y0:ye - y0, xs - x0:xe - x0]

    def _read_raw_rows(self, out: np.ndarray, top: int, bottom: int, left: int, right: int) -> None:
        """Fill `out` from uncompressed strips, reading only its rows, a few megabytes at a time."""
        page, fh = self._page, self._tif.filehandle
        rows_per_strip = self._segment_size[0]
        file_dtype = np.dtype(self._tif.byteorder + self.dtype.char)
        row_bytes = self.shape[1] * self._samples_per_segment * file_dtype.itemsize
        rows_per_read = max(1, _READ_CHUNK_BYTES // row_bytes)
        for plane in range(self._planes):
            bands = slice(plane, plane + 1) if self._planes > 1 else slice(None)
            for strip in range(top // rows_per_strip, (bottom - 1) // rows_per_strip + 1):
                index = plane * self._segments_down + strip
                offset, count = page.dataoffsets[index], page.databytecounts[index]
                y0 = strip * rows_per_strip
                for ys in range(max(top, y0), min(bottom, y0 + rows_per_strip), rows_per_read):
                    ye = min(ys + rows_per_read, bottom, y0 + rows_per_strip)
                    target = out[ys - top:ye - top, :, bands]
                    if offset == 0 or count == 0:
                        target[...] = page.nodata
                        continue
                    start, size = offset + (ys - y0) * row_bytes, (ye - ys) * row_bytes
                    if (ye - y0) * row_bytes > count or start + size > self._file_size:
                        raise UserError(f"{self.path} is damaged: its strip {index} holds {count} bytes at offset "
                                        f"{offset}, too few for its rows or beyond the file's {self._file_size} "
                                        f"bytes; write the image again.")
                    with fh.lock:
                        fh.seek(start)
                        data = fh.read(size)
                    rows = np.frombuffer(data, file_dtype).reshape(ye - ys, self.shape[1], -1)
                    target[...] = rows[:, left:right]

    def close(self) -> None:
        self._tif.close()

    def __enter__(self) -> TiffRegions:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class _Aborted(Exception):
    """Raised inside tifffile's tile iterator to stop the write of an abandoned file."""


_ABORT = object()


class TiffRegionWriter:
    """Writes a tiled TIFF (BigTIFF when the file may exceed 4 GB) one region at a time.

    Regions arrive in row-major order of a grid: every region of one grid row (same top and bottom)
    from left to right, then the next row; grid rows may have any height, not only multiples of `tile`.
    The writer keeps the current grid row and the fewer than `tile` rows left over from the one before,
    and passes each row of `tile` x `tile` tiles to tifffile (in a thread of its own, which pulls tiles as
    `TiffWriter.write` asks for them) once complete.

    The file is written as `.<name>.<random>.partial.tif` in the destination's folder and renamed
    to `path` by `close()` once every row has been written, replacing any file there. If anything fails,
    or the writer is closed early, the partial file is removed and `path` is left as it was. Use as a
    context manager: leaving it on an exception discards the file.
    """

    def __init__(self, path: str | Path, height: int, width: int, bands: int, dtype: np.dtype | str | type,
                 tile: int = 512, compression: str | None = None, bigtiff: bool | None = None) -> None:
        """`dtype`: an integer or float NumPy type; `tile`: the tile side, a multiple of 16 (TIFF's rule);
        `compression`: None or one of WRITER_COMPRESSIONS; `bigtiff`: None to choose by the size."""
        self.path = str(path)
        self.shape = (height, width, bands)
        self.dtype = np.dtype(dtype)
        if min(self.shape) < 1:
            raise ValueError(f"image size {height} x {width} x {bands} must be positive")
        if self.dtype.kind not in "uif":
            raise ValueError(f"dtype {self.dtype} is not an integer or float type")
        if tile < 16 or tile % 16:
            raise ValueError(f"tile {tile} must be a positive multiple of 16 (TIFF tiles are)")
        if compression is not None and compression.lower() not in WRITER_COMPRESSIONS:
            raise ValueError(f"compression {compression!r} is not one of None, {', '.join(WRITER_COMPRESSIONS)}")
        self.tile = tile
        self.bigtiff = needs_bigtiff(height, width, bands, self.dtype, compression) if bigtiff is None else bigtiff
        self._next_top = 0  # first row of the grid row being received (or of the next one)
        self._row_bottom = 0
        self._next_left = 0
        self._buffer: np.ndarray | None = None  # carried rows + the grid row being received
        self._carried = np.empty((0, width, bands), self.dtype)
        self._tiles_across = -(-width // tile)
        self._tiles: queue.Queue = queue.Queue(maxsize=self._tiles_across)
        self._failure: BaseException | None = None
        self._closed = False
        self._partial_path = _new_partial_file(self.path)
        options = dict(shape=self.shape if bands > 1 else self.shape[:2], dtype=self.dtype, tile=(tile, tile),
                       compression=compression, photometric="rgb" if _is_rgb(bands, self.dtype) else "minisblack",
                       planarconfig="contig" if bands > 1 else None, metadata=None,
                       # tifffile encodes tiles in batches of `buffersize` bytes: one row of tiles, no more
                       buffersize=tile * tile * self._tiles_across * bands * self.dtype.itemsize)
        self._thread = threading.Thread(target=self._write_file, args=(options,), daemon=True,
                                        name=f"TiffRegionWriter({os.path.basename(self.path)})")
        self._thread.start()

    def _write_file(self, options: dict) -> None:
        """The thread's work: tifffile writes the file, pulling tiles from the queue."""
        try:
            with tifffile.TiffWriter(self._partial_path, bigtiff=self.bigtiff) as tif:
                tif.write(self._queued_tiles(), **options)
        except BaseException as err:  # handed to the caller's thread, which raises it
            self._failure = err

    def _queued_tiles(self) -> Iterator[np.ndarray]:
        tiles_down = -(-self.shape[0] // self.tile)
        for _ in range(tiles_down * self._tiles_across):
            tile = self._tiles.get()
            if tile is _ABORT:
                raise _Aborted()
            yield tile

    def write(self, top: int, bottom: int, left: int, right: int, array: np.ndarray) -> None:
        """Rows top..bottom-1, columns left..right-1 of the image: `array` of (bottom-top, right-left, bands)
        (or 2-D for one band) in `dtype`. Regions must come in the row-major grid order described above."""
        if self._closed:
            raise ValueError(f"the writer of {self.path} is closed")
        self._raise_failure()
        height, width, bands = self.shape
        if self._next_left == 0:  # the first region of a grid row sets its height
            if top != self._next_top or left != 0 or not top < bottom <= height:
                raise ValueError(f"expected the first region of the grid row starting at row {self._next_top} "
                                 f"(top={self._next_top}, left=0, top < bottom <= {height}), got rows {top}:{bottom}, "
                                 f"columns {left}:{right}")
            self._row_bottom = bottom
            self._buffer = np.empty((len(self._carried) + bottom - top, width, bands), self.dtype)
            self._buffer[:len(self._carried)] = self._carried
        elif (top, bottom, left) != (self._next_top, self._row_bottom, self._next_left):
            raise ValueError(f"expected the next region of grid row {self._next_top}:{self._row_bottom} at column "
                             f"{self._next_left}, got rows {top}:{bottom}, columns {left}:{right}")
        if not left < right <= width:
            raise ValueError(f"columns {left}:{right} are not inside the image's {width} columns")
        array = np.asarray(array)
        if array.ndim == 2 and bands == 1:
            array = array[:, :, None]
        if array.shape != (bottom - top, right - left, bands) or array.dtype != self.dtype:
            expected = (bottom - top, right - left, bands)
            raise ValueError(f"region rows {top}:{bottom}, columns {left}:{right} needs a {expected} {self.dtype} "
                             f"array, got {array.shape} {array.dtype}")
        self._buffer[len(self._carried):, left:right] = array
        self._next_left = right
        if right == width:
            self._finish_grid_row()

    def _finish_grid_row(self) -> None:
        """Hand every complete row of tiles to tifffile; carry the rows left over to the next grid row."""
        buffer, tile = self._buffer, self.tile
        last = self._row_bottom == self.shape[0]
        ready = len(buffer) if last else len(buffer) // tile * tile
        for tile_top in range(0, ready, tile):
            for tile_left in range(0, self.shape[1], tile):
                piece = buffer[tile_top:tile_top + tile, tile_left:tile_left + tile]
                self._put(np.ascontiguousarray(piece if self.shape[2] > 1 else piece[:, :, 0]))
        self._carried = buffer[ready:].copy()
        self._buffer = None
        self._next_top, self._next_left = self._row_bottom, 0

    def _put(self, item: object) -> None:
        while True:
            try:
                self._tiles.put(item, timeout=0.1)
                return
            except queue.Full:
                if not self._thread.is_alive():  # tifffile stopped: raise why
                    self._raise_failure()
                    raise RuntimeError(f"the thread writing {self._partial_path} ended early")

    def _raise_failure(self) -> None:
        if self._failure is None:
            return
        failure = self._failure
        self.abort()
        if isinstance(failure, OSError):
            raise UserError(f"could not write {self.path} ({failure}); free some space on its disk or "
                            f"choose another folder.") from failure
        raise failure

    def close(self) -> None:
        """Complete the file and rename it to `path`. Raises ValueError (after removing the partial
        file) if not every row has been written."""
        if self._closed:
            return
        if self._next_top < self.shape[0]:
            self.abort()
            raise ValueError(f"{self.path} was closed after {self._next_top} of its {self.shape[0]} rows; "
                             f"nothing was written")
        self._thread.join()
        self._raise_failure()
        try:
            with open(self._partial_path, "rb") as f:
                os.fsync(f.fileno())  # on disk before the rename, so the rename never points at nothing
            os.replace(self._partial_path, self.path)
        except BaseException:
            self.abort()
            raise
        self._closed = True

    def abort(self) -> None:
        """Stop writing and remove the partial file; `path` is left as it was."""
        if self._closed:
            return
        self._closed = True
        while self._thread.is_alive():
            try:
                self._tiles.put(_ABORT, timeout=0.1)
                break
            except queue.Full:  # tifffile is busy writing tiles; it takes this one when done
                continue
        self._thread.join()
        if os.path.exists(self._partial_path):
            os.remove(self._partial_path)

    def __enter__(self) -> TiffRegionWriter:
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def needs_bigtiff(height: int, width: int, bands: int, dtype: np.dtype, compression: str | None) -> bool:
    """Whether a tiled file of this image may exceed classic TIFF's 4 GB: its pixel bytes, doubled when
    compressed (LZW can grow incompressible data by half), plus room for tags and tile tables."""
    data_bytes = height * width * bands * np.dtype(dtype).itemsize * (2 if compression else 1)
    return data_bytes + 2 ** 25 > 2 ** 32


def _is_rgb(bands: int, dtype: np.dtype) -> bool:
    return bands == 3 and dtype in (np.uint8, np.uint16)


def _new_partial_file(path: str) -> str:
    """A new empty file `.<name>.<random>.partial.tif` beside `path` (its folder made)."""
    folder, name = os.path.split(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    return new_temporary_file(folder, name, ".partial.tif")
