"""Finding and loading the image files of a dataset folder.

`make_dataset` lists the images under a folder (recursively, sorted, so every process and
every run sees the same order); `read_image_header` reads a file's size and pixel mode without
decoding it (cheap enough to check every file before training); `load_image` decodes one file
into an 8-bit PIL image of the requested mode. Both turn unreadable files into a `UserError`
that names the file and says what is wrong with it.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from typing import Literal

import numpy as np
from PIL import Image, UnidentifiedImageError

from util.errors import UserError

IMG_EXTENSIONS: tuple[str, ...] = (
    ".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp", ".ppm", ".pgm",
)

# Modes that hold more than 8 bits per sample. PIL's convert("L") clips these to 0..255,
# which turns almost every 16-bit pixel white, so they are rescaled by hand instead.
_WIDE_GRAY_MODES = ("I;16", "I;16B", "I;16L", "I;16N", "I")

# Modes PIL cannot convert to both "RGB" and "L" directly: go through this mode first.
_CONVERT_VIA = {"La": "LA", "LAB": "RGB"}

# What PIL raises for files it cannot open or decode.
_UNREADABLE = (OSError, SyntaxError, ValueError, Image.DecompressionBombError)


def is_image_file(filename: str) -> bool:
    """True when `filename` ends with one of `IMG_EXTENSIONS`, in any letter case."""
    return filename.lower().endswith(IMG_EXTENSIONS)


def _is_listed_image(filename: str) -> bool:
    # "._name.png" files are macOS AppleDouble metadata copied along with datasets; they
    # carry an image extension but are not images, so they would fail at load time.
    return is_image_file(filename) and not filename.startswith("._")


def iter_image_files(folder: str) -> Iterator[str]:
    """Yield image paths under `folder` in sorted walk order (lazy: cheap to stop early)."""
    for root, dirs, files in os.walk(folder):
        dirs.sort()  # os.walk visits subfolders in this (now sorted) order
        for name in sorted(files):
            if _is_listed_image(name):
                yield os.path.join(root, name)


def make_dataset(dir: str, max_dataset_size: float = float("inf")) -> list[str]:
    """Return the sorted paths of all images under `dir`, at most `max_dataset_size` of them.

    The cap keeps the first paths in sorted order, so it selects the same files in every run.
    Raises `UserError` if `dir` is not a folder or holds no image with an accepted extension.
    """
    if not os.path.isdir(dir):
        raise UserError(
            f"dataset folder {dir} does not exist; check --dataroot/--phase "
            f"(and --dataset_mode, which decides the expected subfolders)."
        )
    images = sorted(iter_image_files(dir))
    if not images:
        raise UserError(
            f"dataset folder {dir} contains no images; put images with one of the extensions "
            f"{', '.join(IMG_EXTENSIONS)} (any letter case) in it, or point --dataroot elsewhere."
        )
    if max_dataset_size < len(images):
        images = images[: int(max_dataset_size)]
    return images


def _wide_gray_to_8bit(img: Image.Image) -> Image.Image:
    """Rescale a 16/32-bit grayscale image to mode "L" by its data type's range."""
    arr = np.asarray(img, dtype=np.float64)
    # I;16* is 16-bit data. Mode "I" is 32-bit in PIL but in practice holds 16-bit PNG/PGM
    # samples (older Pillow opened 16-bit PNGs as "I"); treat it as 16-bit whenever its
    # values leave the 8-bit range or it came from a PNG, otherwise as plain 8-bit values.
    if img.mode.startswith("I;16") or img.format == "PNG" or arr.max(initial=0) > 255:
        arr = arr / 257.0  # 65535 / 257 == 255 exactly
    return Image.fromarray(np.clip(np.rint(arr), 0, 255).astype(np.uint8), mode="L")


def _convert(img: Image.Image, mode: str) -> Image.Image:
    if img.mode in _WIDE_GRAY_MODES:
        img = _wide_gray_to_8bit(img)
    if img.mode in _CONVERT_VIA:
        img = img.convert(_CONVERT_VIA[img.mode])
    if img.mode == "P":
        # Palette images may mark a palette entry transparent; go through RGBA so that
        # transparency is handled like a real alpha channel below.
        img = img.convert("RGBA" if "transparency" in img.info else "RGB")
    if img.mode in ("RGBA", "LA", "PA", "La", "RGBa"):
        # Alpha is composited on white, not dropped: the colour stored under fully
        # transparent pixels is arbitrary (often black), while viewers show them as background.
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        img = Image.alpha_composite(background, rgba).convert("RGB")
    # copy() when no conversion is needed: the caller closes the file-backed original.
    return img.copy() if img.mode == mode else img.convert(mode)


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


def _unreadable(path: str, err: BaseException) -> UserError:
    """The `UserError` for a file PIL could not open or decode: what is wrong, and the fix."""
    try:
        empty = os.path.getsize(path) == 0
    except OSError:
        empty = False
    if empty:
        problem = "the file is empty (0 bytes), e.g. left behind by an interrupted copy or download"
    elif isinstance(err, FileNotFoundError):
        problem = "the file no longer exists (it was moved or deleted after the dataset folder was listed)"
    elif isinstance(err, UnidentifiedImageError):
        problem = (f"it is not an image in any format PIL can read, although its name ends in "
                   f"{os.path.splitext(path)[1]}{_content_hint(path)}")
    else:
        reason = " ".join((str(err) or type(err).__name__).split())
        problem = f"the file is damaged or not in the format its name suggests ({reason})"
    return UserError(f"cannot read image {path}: {problem}; remove or replace the file.")


def read_image_header(path: str) -> tuple[int, int, str]:
    """(width, height, PIL mode) of the image file `path`, read from its header only.

    Does not decode the pixels, so it is fast (well under a millisecond per file) but does not
    notice files cut off after the header (truncated JPEGs): `load_image` reports those.
    Raises `UserError` naming the file if it is empty, missing or not a readable image.
    """
    try:
        with warnings.catch_warnings():
            # Damaged metadata makes PIL warn; the file is loaded (and warned about) later anyway.
            warnings.simplefilter("ignore")
            with Image.open(path) as img:
                width, height = img.size
                return width, height, img.mode
    except _UNREADABLE as e:
        raise _unreadable(path, e) from e


def load_image(path: str, mode: Literal["RGB", "L"] = "RGB") -> Image.Image:
    """Open `path`, fully decode it and return an 8-bit image in `mode` ("RGB" or "L").

    Transparent pixels are composited on white; 16-bit grayscale is scaled to 8 bits
    (value / 257). Raises `UserError` naming the file if it is missing, empty, truncated
    or not an image.
    """
    if mode not in ("RGB", "L"):
        raise ValueError(f"load_image mode must be 'RGB' or 'L', got {mode!r}")
    try:
        with Image.open(path) as img:
            img.load()  # decode now so that truncated files fail here, not inside a transform
            return _convert(img, mode)
    except _UNREADABLE as e:
        raise _unreadable(path, e) from e


def convert_image(img: Image.Image, mode: Literal["RGB", "L"] = "RGB") -> Image.Image:
    """An image already opened (e.g. from bytes received over a network) converted as `load_image`
    converts files: alpha composited on white, 16-bit grayscale scaled to 8 bits. Raises
    `UserError` if its pixels cannot be decoded (a truncated or damaged image)."""
    if mode not in ("RGB", "L"):
        raise ValueError(f"convert_image mode must be 'RGB' or 'L', got {mode!r}")
    try:
        img.load()
        return _convert(img, mode)
    except _UNREADABLE as e:
        reason = " ".join((str(e) or type(e).__name__).split())
        raise UserError(f"cannot decode the {img.format or 'given'} image: it is damaged or truncated ({reason}).") from e
