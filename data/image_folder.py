"""Finding and loading the image files of a dataset folder.

`make_dataset` lists the images under a folder (recursively, sorted, so every process and
every run sees the same order); `pair_files_by_name` pairs the files of two folders;
`read_image_header` reads a file's size and pixel mode without decoding it (cheap enough to check
every file before training); `load_image` decodes one file into an 8-bit PIL image of the requested
mode; `load_for_network` loads a dataset image for the network with a given channel count, at the
file's full precision (data/image_io.py), and `network_input` turns an image already read into the
tensor the network gets for it (models/inference/translator.py). All turn unreadable files into a `UserError` that names
the file and says what is wrong with it. `ImageFolder` and `default_loader`, the reference's, are
faces over `make_dataset` and `load_image` for its users' code.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Union

import numpy as np
import torch
import torch.utils.data
from PIL import Image

from data.image_io import (
    NUMPY_EXTENSIONS,
    PIL_UNREADABLE,
    ImageInfo,
    ValueRange,
    layout_hint,
    match_channels,
    probe_image,
    read_image,
    require_finite,
    to_network,
    unreadable,
)
from util.errors import UserError
from util.paths import why_missing

# What the dataset transforms take: an 8-bit PIL image, or a float C x H x W tensor in [-1, 1].
Picture = Union[Image.Image, torch.Tensor]

IMG_EXTENSIONS: tuple[str, ...] = (
    ".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp", ".ppm", ".pgm", ".npy",
)
# The 8-bit-or-more pictures PIL decodes (what test.py saves and FID/KID reference folders hold).
PIL_EXTENSIONS = tuple(ext for ext in IMG_EXTENSIONS if ext not in NUMPY_EXTENSIONS)

# Modes that hold more than 8 bits per sample. PIL's convert("L") clips these to 0..255,
# which turns almost every 16-bit pixel white, so they are rescaled by hand instead.
_WIDE_GRAY_MODES = ("I;16", "I;16B", "I;16L", "I;16N", "I")

# Modes PIL cannot convert to both "RGB" and "L" directly: go through this mode first.
_CONVERT_VIA = {"La": "LA", "LAB": "RGB"}


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


def _not_a_folder(path: str) -> str:
    """Why `path`, which is not a folder, is not: a file, missing, or behind a symbolic link leading nowhere."""
    return "is a file, not a folder" if os.path.exists(path) else why_missing(path)


def make_dataset(dir: str, max_dataset_size: float = float("inf")) -> list[str]:
    """Return the sorted paths of all images under `dir`, at most `max_dataset_size` of them.

    The cap keeps the first paths in sorted order, so it selects the same files in every run.
    Raises `UserError` if `dir` is not a folder or holds no image with an accepted extension.
    """
    if not os.path.isdir(dir):
        raise UserError(
            f"dataset folder {dir} {_not_a_folder(dir)}; check --dataroot/--phase "
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
    except PIL_UNREADABLE as e:
        raise unreadable(path, e) from e


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
    except PIL_UNREADABLE as e:
        raise unreadable(path, e) from e


def list_images(folder: str, suffix: str = "") -> list[str]:
    """Image files PIL reads directly in `folder` (not its subfolders; no .npy) whose name without the
    extension ends with `suffix`, sorted: e.g. test.py's saved results, a folder of real images."""
    if not os.path.isdir(folder):
        raise UserError(f"image folder {folder} {_not_a_folder(folder)}; pass a folder of images.")
    names = sorted(n for n in os.listdir(folder) if n.lower().endswith(PIL_EXTENSIONS) and not n.startswith("._")
                   and os.path.splitext(n)[0].endswith(suffix))
    return [os.path.join(folder, n) for n in names]


def load_image_tensor(path: str) -> torch.Tensor:
    """An image file as a 1x3xHxW tensor in [-1, 1], as the networks' images are (`load_image`'s RGB)."""
    array = np.asarray(load_image(path, "RGB"), dtype=np.float32)
    return torch.from_numpy(array).permute(2, 0, 1)[None] / 127.5 - 1.0


def image_batches(paths: Sequence[str], batch_size: int) -> Iterator[torch.Tensor]:
    """The images at `paths` in order, as batches of up to `batch_size` images of one size."""
    batch: list[torch.Tensor] = []
    for path in paths:
        image = load_image_tensor(path)
        if batch and (len(batch) == batch_size or batch[0].shape != image.shape):
            yield torch.cat(batch)
            batch = []
        batch.append(image)
    if batch:
        yield torch.cat(batch)


def default_loader(path: str) -> Image.Image:
    """Compatibility face for the reference's users: `load_image(path, "RGB")`."""
    return load_image(path, "RGB")


class ImageFolder(torch.utils.data.Dataset):
    """Compatibility face for the reference's users: the images `make_dataset(root)` lists, each read by
    `loader` and passed through `transform`; an item is the image, or (image, path) with `return_paths`."""

    def __init__(self, root: str, transform: Callable[[Any], Any] | None = None, return_paths: bool = False,
                 loader: Callable[[str], Any] = default_loader) -> None:
        self.root = root
        self.imgs = make_dataset(root)
        self.transform = transform
        self.return_paths = return_paths
        self.loader = loader

    def __getitem__(self, index: int) -> Any:
        path = self.imgs[index]
        img = self.loader(path)
        if self.transform is not None:
            img = self.transform(img)
        return (img, path) if self.return_paths else img

    def __len__(self) -> int:
        return len(self.imgs)


# ------------------------------------------------------------------------------------- pairing by name
def pair_files_by_name(dir_A: str, dir_B: str, max_dataset_size: float = float("inf"), *,
                       list_files: Callable[[str], list[str]] = make_dataset,
                       stem: Callable[[str], str] = lambda path: os.path.splitext(path)[0],
                       unpaired_mode: str = "unaligned") -> list[tuple[str, str]]:
    """Pairs (A file, B file) of the images in two folders whose paths relative to their folder match
    without the extension (`trainA/0001.tif` with `trainB/0001.npy`), in sorted order, at most
    `max_dataset_size`. Raises `UserError` naming files without a partner, or two files of one folder
    that differ only in their extension. Other kinds of files: `list_files` lists a folder's (raising
    `UserError` for none), `stem` strips a path's extension, and `unpaired_mode` is the --dataset_mode
    the refusal suggests for unpaired data (volumes: data/volume_io.py)."""
    def by_name(folder: str) -> dict[str, str]:
        names: dict[str, str] = {}
        for path in list_files(folder):
            key = stem(os.path.relpath(path, folder))
            if key in names:
                raise UserError(f"{names[key]} and {path} have the same name apart from the extension, so it is "
                                f"not clear which one pairs with the file of that name in the other folder; "
                                f"remove or rename one of them.")
            names[key] = path
        return names

    files_A, files_B = by_name(dir_A), by_name(dir_B)
    lonely = [files_A[k] for k in sorted(files_A.keys() - files_B.keys())] + \
             [files_B[k] for k in sorted(files_B.keys() - files_A.keys())]
    if lonely:
        shown = ", ".join(lonely[:5]) + (f" and {len(lonely) - 5} more" if len(lonely) > 5 else "")
        raise UserError(
            f"paired data in two folders pairs {dir_A} and {dir_B} file by file by name (0001.tif with 0001.npy), "
            f"but {len(lonely)} file{'s have' if len(lonely) > 1 else ' has'} no partner of the same name: {shown}. "
            f"Add or remove files so that both folders hold the same names, or, for unpaired data, use "
            f"--dataset_mode {unpaired_mode}.")
    pairs = [(files_A[k], files_B[k]) for k in sorted(files_A)]
    return pairs[: int(min(max_dataset_size, len(pairs)))]


# ------------------------------------------------------------------------------------- loading for the network
def channel_mismatch(path: str, info: ImageInfo, channels: int, flag: str) -> UserError:
    """The error for an image whose channels cannot be converted to the `channels` that `flag` asks for."""
    what = f"{info.channels} channel{'s' if info.channels > 1 else ''}"
    what += " (the last one alpha)" if info.alpha else ""
    hint = layout_hint(path, info)
    if hint:  # the channel count is another axis of the data: no flag would fix it
        return UserError(f"image {path} has {what}{hint}, but {flag} is {channels}. Save the files again that way, "
                         f"then set {flag} to their channel count if it is not {channels}.")
    return UserError(
        f"image {path} has {what}, but {flag} is {channels}. Set {flag} {info.channels} if the data has "
        f"{info.channels} channels, or convert the files; only gray and RGB convert into each other (with an "
        f"alpha channel composited on white).")


@dataclass(frozen=True)
class DomainSpec:
    """How the images of one domain are loaded: with `channels` channels (asked for by the option
    `flag`), float data mapped from `data_range` (None: [0, 1]) to [-1, 1]."""
    channels: int
    flag: str
    data_range: tuple[float, float] | None = None


def _odd_width(path: str, width: int) -> UserError:
    return UserError(
        f"image {path} is {width} pixels wide: aligned images must be A and B side by side, with an even "
        f"width; fix or remove the file, or use --dataset_mode unaligned for separate A and B folders.")


def load_for_network(path: str, specs: Sequence[DomainSpec], side_by_side: bool = False) -> list[Picture]:
    """The image in `path` as `get_transform` takes it, once per spec: the whole image for one spec,
    or with `side_by_side` its left half for the first spec and its right half for the second (A|B).

    Ordinary 8-bit images wanted as gray or RGB come back as 8-bit PIL images in mode "L" or "RGB"
    (converted as `load_image` does), so that their preprocessing and values are the reference's
    exactly. Everything else - 16-bit or float data, other channel counts - comes back as float32
    C x H x W tensors in [-1, 1] at the file's full precision: values mapped by their dtype's range
    (float data by the spec's `data_range`), channels converted by `image_io.match_channels`.
    Raises `UserError` naming the file if it is unreadable, holds NaN or infinite values, an A|B image has
    an odd width, or its channels cannot be converted to a spec's.
    """
    alpha = probe_image(path).alpha
    array = read_image(path)
    require_finite(array, f"image {path}")
    height, width, count = array.shape
    if side_by_side and width % 2:
        raise _odd_width(path, width)
    parts = [array[:, :width // 2], array[:, width // 2:]] if side_by_side else [array]
    eight_bit = _takes_8bit_path(array, alpha, specs)
    pictures = [_picture(part, alpha, spec, eight_bit) for part, spec in zip(parts, specs)]
    for picture, spec in zip(pictures, specs):
        if picture is None:
            raise channel_mismatch(path, ImageInfo(width, height, count, array.dtype, alpha), spec.channels, spec.flag)
    return pictures


def network_input(array: np.ndarray, alpha: bool, spec: DomainSpec) -> torch.Tensor | None:
    """An H x W x C image as `read_image` returns it (the last channel opacity when `alpha`) as the
    C x H x W float32 tensor in [-1, 1] that `load_for_network(path, [spec])` and the dataset's
    conversion to a tensor give for its file (no resizing, cropping or flipping: test.py with
    --preprocess none); None when its channels cannot be converted to `spec.channels`."""
    picture = _picture(array, alpha, spec, _takes_8bit_path(array, alpha, [spec]))
    if isinstance(picture, Image.Image):
        return to_network(np.asarray(picture), ValueRange.for_dtype(np.uint8))  # x / 127.5 - 1, as the datasets
    return picture


def _takes_8bit_path(array: np.ndarray, alpha: bool, specs: Sequence[DomainSpec]) -> bool:
    """Whether the image is ordinary 8-bit gray or RGB (with or without alpha) wanted as gray or RGB."""
    return array.dtype == np.uint8 and array.shape[2] - alpha in (1, 3) and all(s.channels in (1, 3) for s in specs)


def _picture(part: np.ndarray, alpha: bool, spec: DomainSpec, eight_bit: bool) -> Picture | None:
    if eight_bit:
        picture = Image.fromarray(np.ascontiguousarray(part[:, :, 0] if part.shape[2] == 1 else part))
        return _convert(picture, "L" if spec.channels == 1 else "RGB")
    return match_channels(to_network(part, ValueRange.for_dtype(part.dtype, spec.data_range)), alpha, spec.channels)
