"""Image files in and out at full precision, and the mapping of their values to the network's [-1, 1].

Public interface (no `opt`: plain values, usable from scripts and the inference API):

    probe_image(path) -> ImageInfo            size, channel count, dtype and alpha from the header only (at
                                              most MAX_IMAGE_VALUES values, checked before any is allocated)
    read_image(path) -> np.ndarray            H x W x C in the file's own dtype: uint8, uint16 or float32
    read_image_as_shown(path), probe_image_as_shown(path)   the same, turned upright as viewers show it (the
                                              EXIF orientation, `exif_orientation`, applied by `as_shown`)
    write_image(path, array)                  by extension: .png (8/16-bit), .tif/.tiff (any dtype and
                                              band count), .npy; other extensions 8-bit through PIL
    output_extension(ext, dtype, channels)    `ext`, or .tif where that format cannot hold such images
    array_from_pil(image) -> (array, alpha)   an image PIL has opened, decoded as read_image decodes files
    require_finite(array, what)               UserError naming `what` when float data hold NaN or infinity
    layout_hint(path, info)                   how a file whose channel count looks like another axis was written
    ValueRange(low, high)                     the data values that map to -1 and 1; `ValueRange.for_dtype`
    to_network(array, value_range)            H x W x C array -> C x H x W float32 tensor in [-1, 1]
    from_network(tensor, value_range, dtype)  back to H x W x C in `dtype`, rounded and clipped for integers
    match_channels(image, alpha, channels)    gray <-> RGB and alpha on white, or None when not `convertible`

Readers: NumPy for .npy (H x W or H x W x C); tifffile for TIFF (multi-band, planar or pages as bands,
any sample type; compressed files may need the imagecodecs package); PIL for everything else, and
for TIFFs whose colours need converting (palette, CMYK, Lab, YCbCr, min-is-white). PIL reduces
16-bit PNGs with colour or alpha to 8 bits, so those go through imagecodecs. Other sample types are
read as: bool -> uint8 (0/255), float16/float64 and integers other than uint8/uint16 -> float32.
Unreadable files raise `UserError` naming the file.
"""
from __future__ import annotations

import logging
import os
import threading
import warnings
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

from util.errors import UserError
from util.paths import broken_link

logger = logging.getLogger(__name__)

TIFF_EXTENSIONS = (".tif", ".tiff")
NUMPY_EXTENSIONS = (".npy",)

# What PIL raises for files it cannot open or decode.
PIL_UNREADABLE = (OSError, SyntaxError, ValueError, Image.DecompressionBombError)

# The most values (width x height x channels) an image file may declare: its pixels are allocated whole,
# then as float32 for the network (4 GiB at this limit), so a header asking for more (damaged, hostile,
# or a mosaic to cut into tiles first) is refused from the header, before anything is allocated for it.
# (PIL refuses its formats from about 179 million pixels: Image.MAX_IMAGE_PIXELS, twice.)
MAX_IMAGE_VALUES = 2 ** 30

# PIL modes as read_image returns them: (mode to convert to, channels, alpha).
_PIL_MODES = {
    "1": ("L", 1, False), "L": ("L", 1, False), "LA": ("LA", 2, True), "La": ("LA", 2, True),
    "RGB": ("RGB", 3, False), "RGBX": ("RGB", 3, False), "CMYK": ("RGB", 3, False), "YCbCr": ("RGB", 3, False),
    "LAB": ("RGB", 3, False), "HSV": ("RGB", 3, False), "RGBA": ("RGBA", 4, True), "RGBa": ("RGBA", 4, True),
    "PA": ("RGBA", 4, True),
}
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_COLOUR_TYPES = {0: (1, False), 2: (3, False), 3: (3, False), 4: (2, True), 6: (4, True)}
_TIFF_DATA_PHOTOMETRICS = ("MINISBLACK", "RGB")  # others hold colours that PIL converts


@dataclass(frozen=True)
class ImageInfo:
    """What `read_image` will return for a file, known from its header: width x height x channels of
    `dtype`; `alpha` when the last channel is opacity (gray+alpha, RGBA), not data."""
    width: int
    height: int
    channels: int
    dtype: np.dtype
    alpha: bool = False


# ------------------------------------------------------------------------------------------ errors
def _content_hint(path: str) -> str:
    """A few words on what a file that is not an image holds, judged from its first bytes."""
    try:
        with open(path, "rb") as f:
            head = f.read(200)
    except OSError:
        return ""
    if head.startswith(b"version https://git-lfs"):
        return (" (it is a Git LFS pointer, not the image itself: fetch the real files with "
                "`git lfs pull`)")
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return ""
    if not text.strip() or any(not (c.isprintable() or c.isspace()) for c in text):
        return ""
    start = " ".join(text.split())[:40]
    if text.lstrip()[:1] == "<":
        return f" (it holds HTML starting {start!r}, e.g. an error page saved by a failed download)"
    return f" (it holds text starting {start!r})"


def decoded_size(path: str) -> tuple[int, int]:
    """(width, height) of the image `path`, every pixel decoded: a file cut short after its header (which
    the header alone does not show) is a UserError naming it (`unreadable`), before a tool writes anything."""
    try:
        with Image.open(path) as img:
            img.load()
            return img.size
    except PIL_UNREADABLE as err:
        raise unreadable(path, err) from None


def unreadable(path: str, err: BaseException) -> UserError:
    """The `UserError` for a file that could not be opened or decoded: what is wrong, and the fix."""
    try:
        empty = os.path.getsize(path) == 0
    except OSError:
        empty = False
    link = broken_link(path) if isinstance(err, OSError) else None
    if link:  # not "moved or deleted": the link itself is there, what it points to is not
        return UserError(f"cannot read image {path}: {link}; fix the link or remove it.")
    if empty:
        problem = "the file is empty (0 bytes), e.g. left behind by an interrupted copy or download"
    elif isinstance(err, FileNotFoundError):
        problem = "the file no longer exists (it was moved or deleted after the dataset folder was listed)"
    elif isinstance(err, UnidentifiedImageError):
        problem = (f"it is not an image in any format PIL can read, although its name ends in "
                   f"{os.path.splitext(path)[1]}{_content_hint(path)}")
    elif "imagecodecs" in str(err):
        problem = (f"it is compressed in a way that needs the imagecodecs package ({' '.join(str(err).split())}): "
                   f"pip install imagecodecs")
        return UserError(f"cannot read image {path}: {problem}.")
    else:
        reason = " ".join((str(err) or type(err).__name__).split())
        problem = f"the file is damaged or not in the format its name suggests ({reason}{_content_hint(path)})"
    return UserError(f"cannot read image {path}: {problem}; remove or replace the file.")


def require_finite(array: np.ndarray, what: str, fix: str = "") -> None:
    """Raise `UserError` naming `what` (e.g. "image x.tif") if the float array (H x W x C, or N x H x W x C)
    holds NaN or infinite values, saying how to replace them (`fix`: how else to get rid of them, default
    removing the file); integer data pass at no cost. One pass over the data (about 35 us for 256 x 256 x 3
    float32, against milliseconds to decode it): one NaN spreads through the whole output and every loss,
    and an infinite value would be clipped to the end of the data range, which is never what it meant."""
    if array.dtype.kind != "f" or np.isfinite(array).all():
        return
    where = np.argwhere(~np.isfinite(array))[0]
    first = tuple(int(v) for v in where[-3:]) if array.ndim >= 3 else (int(where[0]), int(where[1]), 0)
    raise _non_finite(what, int(np.isnan(array).sum()), int(np.isinf(array).sum()), first, fix)


def require_finite_by_rows(parts: Iterable[tuple[int, np.ndarray]], what: str, fix: str = "") -> None:
    """`require_finite` for an H x W x C picture given as bands of rows, each (its first row, its samples): a
    picture too large to hold is checked a band at a time, its first non-finite value named at the picture's row."""
    nan = infinite = 0
    first = None
    for top, part in parts:
        if part.dtype.kind != "f" or np.isfinite(part).all():
            continue
        nan, infinite = nan + int(np.isnan(part).sum()), infinite + int(np.isinf(part).sum())
        if first is None:
            row, column, band = (int(v) for v in np.argwhere(~np.isfinite(_hwc(part)))[0])
            first = (top + row, column, band)
    if first is not None:
        raise _non_finite(what, nan, infinite, first, fix)


def _non_finite(what: str, nan: int, infinite: int, first: tuple[int, int, int], fix: str) -> UserError:
    counts = " and ".join(text for count, text in ((nan, f"{nan} NaN"), (infinite, f"{infinite} infinite"))
                          if count)
    row, column, band = first
    return UserError(f"{what} holds non-finite values: {counts} (the first at row {row}, column {column}, band "
                     f"{band}); the networks need finite numbers (one NaN spreads through the whole output and every "
                     f"loss). Replace them with values in the data range (e.g. np.nan_to_num(array, nan=..., "
                     f"posinf=..., neginf=...), or a fill value for missing data), {fix or 'or remove the file'}.")


def _extension(path: str) -> str:
    return os.path.splitext(path)[1].lower()


# ------------------------------------------------------------------------------------------ dtypes
def stored_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype `read_image` returns for samples of `dtype`."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return np.dtype(np.uint8)
    if dtype in (np.uint8, np.uint16, np.float32):
        return dtype
    if dtype.kind in "fiu":
        return np.dtype(np.float32)
    raise ValueError(f"samples of type {dtype} are not image data")


def as_stored(array: np.ndarray) -> np.ndarray:
    """`array` as `read_image` returns such samples (bilevel as 0 and 255)."""
    if array.dtype == np.bool_:
        return array.astype(np.uint8) * np.uint8(255)
    return array.astype(stored_dtype(array.dtype), copy=False)


def _hwc(array: np.ndarray) -> np.ndarray:
    return array[:, :, None] if array.ndim == 2 else array


# ------------------------------------------------------------------------------------------ PNG header
def _png_header(path: str) -> tuple[int, int, int, int] | None:
    """(width, height, bit depth, colour type) of a PNG file, or None for other files."""
    with open(path, "rb") as f:
        head = f.read(26)
    if len(head) < 26 or not head.startswith(_PNG_SIGNATURE) or head[12:16] != b"IHDR":
        return None
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big"), head[24], head[25]


def _is_wide_colour_png(header: tuple[int, int, int, int] | None) -> bool:
    return header is not None and header[2] == 16 and header[3] in (2, 4, 6)


# ------------------------------------------------------------------------------------------ probing
def _pil_info(img: Image.Image) -> ImageInfo:
    w, h = img.size
    if img.mode.startswith("I;16"):
        return ImageInfo(w, h, 1, np.dtype(np.uint16))
    if img.mode in ("I", "F"):
        return ImageInfo(w, h, 1, np.dtype(np.uint16 if img.mode == "I" and img.format in ("PNG", "PPM")
                                            else np.float32))
    if img.mode == "P":
        alpha = "transparency" in img.info
        return ImageInfo(w, h, 4 if alpha else 3, np.dtype(np.uint8), alpha)
    _, channels, alpha = _PIL_MODES.get(img.mode, ("RGB", 3, False))
    return ImageInfo(w, h, channels, np.dtype(np.uint8), alpha)


def _tiff_layout(shape: tuple[int, ...], axes: str, path: str) -> tuple[tuple[int, ...], int | None]:
    """(kept shape, index of the channel axis or None) of a TIFF series: length-1 axes dropped,
    Y and X kept, at most one other axis (samples, planes or pages) taken as the channels."""
    kept = [(n, a) for n, a in zip(shape, axes) if n > 1 or a in "YX"]
    if "Y" not in axes or "X" not in axes or len(kept) > 3:
        raise UserError(f"cannot read image {path}: it holds a {'x'.join(map(str, shape))} array (TIFF axes "
                        f"{axes}), not one image of height x width x bands; save one image (with its bands) per file.")
    others = [i for i, (_, a) in enumerate(kept) if a not in "YX"]
    return tuple(n for n, _ in kept), (others[0] if others else None)


def _tifffile():
    import tifffile

    # tifffile logs what it finds wrong with a file (at ERROR, too) as well as raising; the raised error
    # is reported, naming the file, so its own records would only repeat it in other words.
    logging.getLogger("tifffile").setLevel(logging.CRITICAL)
    return tifffile


def _tiff_info(path: str) -> tuple[ImageInfo | None, str]:
    """The ImageInfo of a TIFF that tifffile reads as data, or (None, reason) when PIL should read it."""
    with _tifffile().TiffFile(path) as tif:
        page = tif.pages[0]
        if page.photometric.name not in _TIFF_DATA_PHOTOMETRICS:
            return None, page.photometric.name
        series = tif.series[0]
        shape, channel_axis = _tiff_layout(series.shape, series.axes, path)
        spatial = [n for i, n in enumerate(shape) if i != channel_axis]
        channels = 1 if channel_axis is None else shape[channel_axis]
        alpha = bool(page.extrasamples) and int(page.extrasamples[-1]) in (1, 2) and channels in (2, 4)
        return _checked_size(path, ImageInfo(spatial[1], spatial[0], channels, stored_dtype(series.dtype), alpha)), ""


def _tiff_rows_as_pages(path: str) -> tuple[int, int, int] | None:
    """(H, W, C) when the TIFF holds H one-band pages of W x C pixels with C small: what
    `tifffile.imwrite(path, array)` makes of an H x W x C array unless C is 3 or 4."""
    with _tifffile().TiffFile(path) as tif:
        series, page = tif.series[0], tif.pages[0]
        if len(series.shape) != 3 or series.axes[1:] != "YX" or page.samplesperpixel != 1:
            return None
        height, width, channels = series.shape
        return (height, width, channels) if channels <= 16 and channels < min(height, width) else None


def layout_hint(path: str, info: ImageInfo) -> str:
    """A few words on how the file was probably written when its channel count looks like another axis
    of the array (" (...)"), or "": a .npy saved as channels x height x width, or a TIFF whose rows
    tifffile stored as pages (read as one channel per row)."""
    if _extension(path) in NUMPY_EXTENSIONS and info.channels > 16 and info.height <= 16:
        return (" (.npy images are height x width x channels; this one looks like channels x height x width: "
                "save array.transpose(1, 2, 0) instead)")
    try:
        rows = _tiff_rows_as_pages(path) if _extension(path) in TIFF_EXTENSIONS else None
    except Exception as err:  # no hint for a file tifffile cannot read; the error itself says what is wrong
        logger.debug("no layout hint for %s: tifffile cannot read it (%s: %s)", path, type(err).__name__, err)
        rows = None
    if rows is None:
        return ""
    h, w, c = rows
    return (f" (it holds {h} pages of {w}x{c} pixels, which are read as {h} channels: this is what "
            f"tifffile.imwrite(path, array) makes of a {h} x {w} x {c} array, as it stores only 3 or 4 channels as "
            f"one image. Write it with tifffile.imwrite(path, array, photometric=\"minisblack\", "
            f"planarconfig=\"contig\") to store one {w}x{h} image with {c} channels)")


def _npy_info(path: str) -> ImageInfo:
    header = np.load(path, mmap_mode="r", allow_pickle=False)  # maps the file: reads the header only
    shape, dtype = header.shape, header.dtype
    del header
    if len(shape) not in (2, 3):
        raise UserError(f"cannot read image {path}: it holds an array of shape {shape}; .npy images must be "
                        f"height x width or height x width x channels.")
    return _checked_size(path, ImageInfo(shape[1], shape[0], 1 if len(shape) == 2 else shape[2], stored_dtype(dtype)))


def _checked_size(path: str, info: ImageInfo) -> ImageInfo:
    """`info`, or a UserError naming the file when its header declares no pixel, or more than
    `MAX_IMAGE_VALUES` values."""
    values = info.width * info.height * info.channels
    if values == 0:
        raise UserError(f"cannot read image {path}: it is {info.width}x{info.height} pixels x {info.channels} "
                        f"channels, an image without a single value, so there is nothing to train on or translate; "
                        f"remove or replace the file.")
    if values > MAX_IMAGE_VALUES:
        raise UserError(f"cannot read image {path}: its header declares {info.width}x{info.height} pixels x "
                        f"{info.channels} channels ({values:.3g} values, {4 * values / 2 ** 30:.3g} GiB as float32), "
                        f"more than the {MAX_IMAGE_VALUES:.3g} an image may hold here (MAX_IMAGE_VALUES, "
                        f"data/image_io.py); a damaged header, or an image to cut into tiles first. Remove or "
                        f"replace the file.")
    return info


def probe_image(path: str) -> ImageInfo:
    """What `read_image(path)` will return, from the file's header only (no pixel decoding, so it does
    not notice damage behind the header). Raises `UserError` naming the file if it is unreadable or
    declares more than `MAX_IMAGE_VALUES` values."""
    try:
        ext = _extension(path)
        if ext in NUMPY_EXTENSIONS:
            return _npy_info(path)
        if ext in TIFF_EXTENSIONS:
            info, _ = _tiff_info(path)
            if info is not None:
                return info
        header = _png_header(path)
        if _is_wide_colour_png(header):
            return _wide_png_info(path, header)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # damaged metadata: the file is loaded (and warned about) later
            with Image.open(path) as img:
                return _checked_size(path, _pil_info(img))
    except UserError:
        raise
    except Exception as err:  # a damaged file can make the readers raise almost anything
        raise unreadable(path, err) from err


def _wide_png_info(path: str, header: tuple[int, int, int, int]) -> ImageInfo:
    channels, alpha = _PNG_COLOUR_TYPES[header[3]]
    return _checked_size(path, ImageInfo(header[0], header[1], channels, np.dtype(np.uint16), alpha))


# ------------------------------------------------------------------------------------------ reading
def array_from_pil(img: Image.Image) -> tuple[np.ndarray, bool]:
    """(H x W x C array, whether its last channel is alpha) of an image PIL has opened, decoded as
    `read_image` decodes files: 16-bit gray as uint16, mode "F" as float32, palettes expanded, other
    modes as 8-bit gray, gray+alpha, RGB or RGBA. Raises what PIL raises for damaged pixel data."""
    img.load()  # decode now so that truncated files fail here
    info = _pil_info(img)
    if img.mode == "P":
        img = img.convert("RGBA" if info.alpha else "RGB")
    elif img.mode in _PIL_MODES and img.mode != _PIL_MODES[img.mode][0]:
        img = img.convert(_PIL_MODES[img.mode][0])
    array = np.asarray(img)
    if info.dtype == np.uint16:
        array = np.clip(array, 0, 65535)
    return _hwc(array.astype(info.dtype, copy=False)), info.alpha


def _read_pil(path: str) -> np.ndarray:
    with Image.open(path) as img:
        return array_from_pil(img)[0]


def _read_tiff(path: str) -> np.ndarray:
    info, _ = _tiff_info(path)
    if info is None:
        return _read_pil(path)
    with _tifffile().TiffFile(path) as tif:
        series = tif.series[0]
        array = series.asarray()
        shape, channel_axis = _tiff_layout(series.shape, series.axes, path)
    array = array.reshape(shape)
    if channel_axis is not None:
        array = np.moveaxis(array, channel_axis, -1)
    return _hwc(as_stored(np.ascontiguousarray(array)))


def _read_npy(path: str) -> np.ndarray:
    _npy_info(path)  # the shape check
    return _hwc(as_stored(np.load(path, allow_pickle=False)))


def read_image(path: str) -> np.ndarray:
    """The image in `path` as an H x W x C array of uint8, uint16 or float32 (see the module docstring),
    alpha kept as the last channel. Raises `UserError` naming the file if it is missing, empty,
    damaged or not an image."""
    try:
        ext = _extension(path)
        if ext in NUMPY_EXTENSIONS:
            return _read_npy(path)
        if ext in TIFF_EXTENSIONS:
            return _read_tiff(path)
        header = _png_header(path)
        if _is_wide_colour_png(header):
            import imagecodecs

            _wide_png_info(path, header)  # the size its header declares, before imagecodecs allocates it
            with open(path, "rb") as f:
                return _hwc(imagecodecs.png_decode(f.read()))
        return _read_pil(path)
    except UserError:
        raise
    except ImportError as err:
        raise UserError(f"cannot read image {path}: 16-bit PNGs with colour or alpha need the imagecodecs "
                        f"package ({err}); pip install imagecodecs.") from err
    except Exception as err:  # a damaged file can make the readers raise almost anything
        raise unreadable(path, err) from err


# ------------------------------------------------------------------------------------------ orientation
# EXIF's Orientation tag (also TIFF's): how a viewer turns the stored pixels to show the picture upright; a
# phone stores a portrait photo as a landscape one with orientation 6 (turn 90 degrees clockwise).
EXIF_ORIENTATION = 0x0112
# Each orientation's turn of an H x W x C array, as PIL.ImageOps.exif_transpose turns an image.
_SHOWN = {2: lambda a: a[:, ::-1], 3: lambda a: a[::-1, ::-1], 4: lambda a: a[::-1], 5: lambda a: a.swapaxes(0, 1),
          6: lambda a: np.rot90(a, -1), 7: lambda a: np.rot90(a, -1)[::-1], 8: lambda a: np.rot90(a, 1)}


def exif_orientation(source: str | Image.Image) -> int:
    """The EXIF orientation (1 to 8) of an image file or of an image PIL has opened; 1 (upright as stored)
    where there is none, or none can be read (a format without it, as .npy; damaged metadata)."""
    try:
        if isinstance(source, Image.Image):
            value = source.getexif().get(EXIF_ORIENTATION, 1)
        elif _extension(source) in NUMPY_EXTENSIONS:
            return 1
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # damaged metadata: read as stored, the pixels are what count
                with Image.open(source) as img:
                    if img.format == "PNG" and "exif" not in img.info:
                        return 1  # no eXIf chunk before the pixels: PIL would decode them all to look behind them
                    value = img.getexif().get(EXIF_ORIENTATION, 1)
    except Exception as err:  # PIL cannot open it (a TIFF tifffile reads) or its EXIF: as stored
        logger.debug("no EXIF orientation read from %s (%s: %s)", source, type(err).__name__, err)
        return 1
    return value if value in _SHOWN else 1


def as_shown(array: np.ndarray, orientation: int) -> np.ndarray:
    """An H x W x C array (any dtype, any channels) turned as a viewer shows an image of EXIF `orientation`:
    what PIL.ImageOps.exif_transpose does to an image PIL holds."""
    turn = _SHOWN.get(orientation)
    return array if turn is None else np.ascontiguousarray(turn(array))


def read_image_as_shown(path: str) -> np.ndarray:
    """`read_image(path)` turned upright as image viewers show it (its EXIF orientation applied): what
    translation reads a user's photo as. (Datasets read pixels as stored, as the reference does.)"""
    return as_shown(read_image(path), exif_orientation(path))


def probe_image_as_shown(path: str) -> ImageInfo:
    """`probe_image(path)` of the image as shown (`read_image_as_shown`): width and height swapped where its
    EXIF orientation turns it by a quarter (5 to 8)."""
    info = probe_image(path)
    if exif_orientation(path) < 5:
        return info
    return ImageInfo(info.height, info.width, info.channels, info.dtype, info.alpha)


# ------------------------------------------------------------------------------------------ writing
def output_extension(source_ext: str, dtype: np.dtype, channels: int) -> str:
    """The extension to write an image of `channels` channels of `dtype` under, for data read from a file
    with extension `source_ext`: `source_ext` itself when that format holds such images (.npy and TIFF
    anything, PNG 8 or 16 bits with 1 to 4 channels, every other format 8-bit gray and RGB), else ".tif"."""
    source_ext = source_ext.lower()
    dtype = np.dtype(dtype)
    holds = (source_ext in NUMPY_EXTENSIONS + TIFF_EXTENSIONS
             or (source_ext == ".png" and dtype in (np.uint8, np.uint16) and channels <= 4)
             or (dtype == np.uint8 and channels in (1, 3)))
    return source_ext if holds else ".tif"


def write_image(path: str, array: np.ndarray, alpha: bool = False) -> None:
    """Write an H x W x C (or H x W) array, choosing the format by extension: .npy (as it is); .tif/.tiff
    (any dtype and band count, deflate-compressed; `alpha` marks the last of 2 or 4 channels as
    opacity); .png (uint8 or uint16, 1 to 4 channels: gray, gray+alpha, RGB, RGBA); other extensions
    through PIL (uint8, 1, 3 or 4 channels; JPEG at quality 95). The file is written whole or not at all
    (into a temporary file beside it, then renamed). Raises ValueError for an extension no format is
    known for, or data the format cannot hold (e.g. float in a PNG); OSError when PIL cannot save the
    mode (an RGBA JPEG) or the folder is not writable."""
    array = _hwc(np.asarray(array))
    ext = _extension(path)
    folder, name = os.path.split(os.path.abspath(path))
    # Same extension: the writers (np.save, tifffile, PIL) go by it. Process and thread make it unique.
    temporary = os.path.join(folder, f".{name}.{os.getpid()}-{threading.get_ident()}.tmp{ext}")
    try:
        _write(temporary, ext, array, alpha)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def check_writable(path: str, dtype: np.dtype, channels: int) -> None:
    """Raise ValueError, as `write_image` would, where no format is known for the extension of `path` or its format
    cannot hold images of `channels` channels of `dtype`: before a long computation whose output it is."""
    ext = _extension(path)
    if ext in NUMPY_EXTENSIONS + TIFF_EXTENSIONS:
        return
    image_format = Image.registered_extensions().get(ext)  # also fills Image.SAVE
    if image_format not in Image.SAVE:
        raise ValueError(f"no image format that can be written is known for the extension {ext or '(none)'}; "
                         f"name it .png, .jpg, .tif, .npy, ...")
    if dtype not in (np.uint8, np.uint16) or channels > 4 or (dtype == np.uint16 and ext != ".png"):
        raise ValueError(f"{ext} files cannot hold {channels}-channel {np.dtype(dtype)} images; use .tif or .npy")


def _write(path: str, ext: str, array: np.ndarray, alpha: bool) -> None:
    channels = array.shape[2]
    check_writable(path, array.dtype, channels)
    if ext in NUMPY_EXTENSIONS:
        np.save(path, array, allow_pickle=False)
        return
    if ext in TIFF_EXTENSIONS:
        alpha = alpha and channels in (2, 4)
        rgb = channels - alpha == 3 and array.dtype in (np.uint8, np.uint16)
        extrasamples = ["unspecified"] * (channels - (3 if rgb else 1) - alpha) + ["unassalpha"] * alpha
        _tifffile().imwrite(path, array if channels > 1 else array[:, :, 0], photometric="rgb" if rgb else "minisblack",
                            planarconfig="contig" if channels > 1 else None, extrasamples=extrasamples or None,
                            compression="zlib")
        return
    image_format = Image.registered_extensions()[ext]
    if array.dtype == np.uint16 and channels > 1:
        import imagecodecs

        with open(path, "wb") as f:
            f.write(imagecodecs.png_encode(np.ascontiguousarray(array)))
        return
    image = Image.fromarray(np.ascontiguousarray(array[:, :, 0] if channels == 1 else array))
    image.save(path, format=image_format, **({"quality": 95} if image_format == "JPEG" else {}))


# ------------------------------------------------------------------------------------------ values
@dataclass(frozen=True)
class ValueRange:
    """Data values `low` and `high` map to -1 and 1 in the network (linearly; outside is clipped)."""
    low: float
    high: float

    @classmethod
    def for_dtype(cls, dtype: np.dtype, data_range: tuple[float, float] | None = None) -> ValueRange:
        """The full range of an integer dtype (uint8: 0..255, uint16: 0..65535); for float data
        `data_range`, or [0, 1] without it."""
        dtype = np.dtype(dtype)
        if dtype.kind in "ui":
            info = np.iinfo(dtype)
            return cls(float(info.min), float(info.max))
        low, high = data_range if data_range is not None else (0.0, 1.0)
        return cls(float(low), float(high))

    @property
    def half_span(self) -> float:
        return (self.high - self.low) / 2.0


def to_network(array: np.ndarray, value_range: ValueRange) -> torch.Tensor:
    """An H x W x C (or H x W) array as a C x H x W float32 tensor in [-1, 1]: `value_range.low` -> -1,
    `value_range.high` -> 1, values outside clipped. For uint8 with 0..255 this is exactly x/127.5 - 1."""
    tensor = torch.from_numpy(_hwc(np.asarray(array)).transpose(2, 0, 1).copy()).float()
    half = value_range.half_span
    # Divide, then subtract, in float32: the 8-bit path has always computed x / 127.5 - 1 this way.
    return tensor.div_(half).sub_(value_range.low / half + 1.0).clamp_(-1.0, 1.0)


def from_network(tensor: torch.Tensor, value_range: ValueRange, dtype: np.dtype) -> np.ndarray:
    """A C x H x W (or 1 x C x H x W) tensor in [-1, 1] as an H x W x C array of `dtype` in the data's
    range (inverse of `to_network`); integers are rounded and clipped to the dtype."""
    x = tensor.detach().cpu().double()
    if x.dim() == 4:
        x = x[0]
    values = ((x.clamp(-1.0, 1.0) + 1.0) * value_range.half_span + value_range.low).permute(1, 2, 0).numpy()
    dtype = np.dtype(dtype)
    if dtype.kind in "ui":
        info = np.iinfo(dtype)
        values = np.clip(np.rint(values), info.min, info.max)
    return np.ascontiguousarray(values.astype(dtype))


# ITU-R 601-2 luma, the weights of PIL's convert("L").
_LUMA = (0.299, 0.587, 0.114)


def convertible(count: int, alpha: bool, channels: int) -> bool:
    """Whether `match_channels` turns `count` channels (the last one opacity when `alpha`) into `channels`."""
    colours = count - 1 if alpha and count in (2, 4) else count
    return count == channels or (channels in (1, 3) and colours in (1, 3))


def match_channels(image: torch.Tensor, alpha: bool, channels: int) -> torch.Tensor | None:
    """A C x H x W tensor in [-1, 1] with `channels` channels, or None when it cannot be converted.

    Same count: unchanged (alpha stays a channel). To 1 or 3 channels: an alpha channel (the last, when
    `alpha`) is composited on white, then gray is repeated to RGB or RGB weighted to gray (ITU-R
    601-2, as PIL). Anything else (e.g. 4 bands without alpha to 3) is not convertible.
    """
    count = image.shape[0]
    if count == channels:
        return image
    if not convertible(count, alpha, channels):
        return None
    if alpha and count in (2, 4):
        opacity = (image[-1:] + 1.0) / 2.0
        image = image[:-1] * opacity + (1.0 - opacity)  # white (1.0) behind transparent pixels
        count -= 1
    if count == channels:
        return image
    if count == 1:
        return image.expand(3, -1, -1).clone()
    weights = torch.tensor(_LUMA, dtype=image.dtype)
    return (image * weights[:, None, None]).sum(0, keepdim=True)
