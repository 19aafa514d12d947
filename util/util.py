"""Image conversions and small file helpers (folders, broken symbolic links)."""
from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import torch
from PIL import Image

from util import distributed
from util.errors import UserError
from util.safe_files import atomic_write


def parse_display_channels(text: str) -> list[int] | None:
    """The channel list of --display_channels ("3,2,1" -> [3, 2, 1]; "" -> None, the default choice).
    Raises `UserError` unless it is 1 or 3 channel numbers >= 0."""
    if not text.strip():
        return None
    try:
        channels = [int(part) for part in text.split(",")]
    except ValueError:
        channels = []
    if len(channels) not in (1, 3) or min(channels) < 0:
        raise UserError(f"--display_channels {text} is not 1 or 3 comma-separated channel numbers counted from 0; use "
                        f"e.g. --display_channels 3,2,1 (shown as red, green, blue) or --display_channels 0 (gray).")
    return channels


def preview_channels(count: int, chosen: Sequence[int] | None = None) -> list[int]:
    """The channels of a `count`-channel image that its 8-bit preview shows (1 as gray, 3 as RGB):
    `chosen` (--display_channels) when the image has all of them; otherwise gray for 1 or 2 channels
    and the first three (as RGB) for 3 or more."""
    if chosen and max(chosen) < count:
        return list(chosen)
    return [0] if count < 3 else [0, 1, 2]


def middle_slice(volume: np.ndarray) -> np.ndarray:
    """The C x H x W picture a preview shows of a C x I x J x K volume: its middle slice across the third
    axis, the first axis running left to right and the second bottom to top (how viewers show an axial
    slice of a volume stored in RAS order, as NIfTI files usually are)."""
    plane = volume[:, :, :, volume.shape[3] // 2]  # C x I x J
    return np.ascontiguousarray(np.flip(plane.transpose(0, 2, 1), axis=1))


def tensor2im(input_image: torch.Tensor | np.ndarray, imtype=np.uint8, index: int = 0,
              channels: Sequence[int] | None = None) -> np.ndarray:
    """Image `index` of a batch in [-1, 1] (CxHxW, or a CxIxJxK volume's `middle_slice`) as an HxWx3
    uint8 preview: the channels that `preview_channels(C, channels)` picks, gray tiled to RGB; -1 -> 0
    and 1 -> 255."""
    if isinstance(input_image, np.ndarray):
        return input_image.astype(imtype)
    image = input_image.detach()[index].float().cpu().clamp(-1.0, 1.0).numpy()
    if image.ndim == 4:  # a volume: its middle slice
        image = middle_slice(image)
    image = image[preview_channels(image.shape[0], channels)]
    if image.shape[0] == 1:
        image = np.tile(image, (3, 1, 1))
    image = (np.transpose(image, (1, 2, 0)) + 1.0) / 2.0 * 255.0
    return np.round(image).astype(imtype)


def save_image(image_numpy: np.ndarray, image_path: str, aspect_ratio: float = 1.0) -> None:
    """Save an HxWx3 uint8 array as an image, optionally stretched to `aspect_ratio` (w/h)."""
    image = Image.fromarray(image_numpy)
    h, w = image_numpy.shape[:2]
    if aspect_ratio > 1.0:
        image = image.resize((int(w * aspect_ratio), h), Image.BICUBIC)
    elif aspect_ratio < 1.0:
        image = image.resize((w, int(h / aspect_ratio)), Image.BICUBIC)
    image_format = Image.registered_extensions().get(os.path.splitext(image_path)[1].lower(), "PNG")
    atomic_write(image_path, lambda f: image.save(f, format=image_format))  # a page never shows half an image


def mkdirs(paths: str | os.PathLike | list[str | os.PathLike]) -> None:
    """Create each folder of `paths` (one path or a list), with its parents; existing ones are kept."""
    for path in [paths] if isinstance(paths, (str, os.PathLike)) else paths:
        mkdir(path)


def mkdir(path: str | os.PathLike) -> None:
    """Compatibility face for the reference's users: one folder, as `mkdirs` makes them (os.makedirs)."""
    os.makedirs(path, exist_ok=True)


def pad_to(image: np.ndarray, height: int, width: int, value: int = 255) -> np.ndarray:
    """`image` (HxWx3) centred on a `height` x `width` canvas filled with `value`."""
    h, w = image.shape[:2]
    if (h, w) == (height, width):
        return image
    canvas = np.full((height, width, image.shape[2]), value, dtype=image.dtype)
    top, left = (height - h) // 2, (width - w) // 2
    canvas[top:top + h, left:left + w] = image[:height, :width]
    return canvas


def image_grid(images: list[np.ndarray], ncols: int, labels: list[str] | None = None,
               pad: int = 2, value: int = 255) -> np.ndarray:
    """HxWx3 uint8 images as one grid image, `ncols` per row, each tile optionally captioned below."""
    if not images:
        raise ValueError("image_grid needs at least one image")
    ncols = max(1, min(ncols if ncols > 0 else len(images), len(images)))
    tile_h = max(im.shape[0] for im in images)
    tile_w = max(im.shape[1] for im in images)
    caption_h = 12 if labels else 0
    nrows = -(-len(images) // ncols)
    cell_h, cell_w = tile_h + caption_h + pad, tile_w + pad
    grid = np.full((nrows * cell_h + pad, ncols * cell_w + pad, 3), value, dtype=np.uint8)
    for i, im in enumerate(images):
        row, col = divmod(i, ncols)
        top, left = pad + row * cell_h, pad + col * cell_w
        grid[top:top + tile_h, left:left + tile_w] = pad_to(im.astype(np.uint8), tile_h, tile_w, value)
    if labels:
        from PIL import ImageDraw
        for i, label in enumerate(labels[:len(images)]):
            caption = Image.new("RGB", (tile_w, caption_h), (value,) * 3)  # clipped to its tile
            ImageDraw.Draw(caption).text((1, 0), str(label), fill=(0, 0, 0))
            row, col = divmod(i, ncols)
            top, left = pad + row * cell_h + tile_h, pad + col * cell_w
            grid[top:top + caption_h, left:left + tile_w] = np.asarray(caption)
    return grid


# ------------------------------------------------------------------ the reference's helpers, for its users' code
def init_ddp() -> torch.device:
    """Compatibility face for the reference's users: `distributed.init_distributed()` (joins the process
    group when launched as one of several, picks the device); returns the device this process uses."""
    return distributed.init_distributed().device


def cleanup_ddp() -> None:
    """Compatibility face for the reference's users: `distributed.shutdown()` (leaves the process group)."""
    distributed.shutdown()


def diagnose_network(net: torch.nn.Module, name: str = "network") -> None:
    """Compatibility face for the reference's users: prints `name`, then the mean over `net`'s parameters
    that have a gradient of the mean absolute gradient (0.0 when none has one)."""
    means = [param.grad.detach().abs().mean() for param in net.parameters() if param.grad is not None]
    print(name)  # user-facing: the reference's debugging helper prints by design
    print(torch.stack(means).mean() if means else 0.0)  # user-facing (as above)


def print_numpy(x: np.ndarray, val: bool = True, shp: bool = False) -> None:
    """Compatibility face for the reference's users: prints the shape of `x` (with `shp`) and, with `val`,
    the mean, min, max, median and standard deviation of its values."""
    x = np.asarray(x, dtype=np.float64)
    if shp:
        print("shape,", x.shape)  # user-facing: the reference's debugging helper prints by design
    if val:
        print(f"mean = {x.mean():3.3f}, min = {x.min():3.3f}, max = {x.max():3.3f}, "  # user-facing (as above)
              f"median = {np.median(x):3.3f}, std={x.std():3.3f}")
