"""Image conversions and small file helpers."""
from __future__ import annotations

import os

import numpy as np
import torch
from PIL import Image


def tensor2im(input_image: torch.Tensor | np.ndarray, imtype=np.uint8, index: int = 0) -> np.ndarray:
    """Image `index` of a batch in [-1, 1] (CxHxW) as an HxWx3 uint8 array (gray is tiled to RGB)."""
    if isinstance(input_image, np.ndarray):
        return input_image.astype(imtype)
    image = input_image.detach()[index].float().cpu().clamp(-1.0, 1.0).numpy()
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
    image.save(image_path)


def mkdirs(paths: str | list[str]) -> None:
    for path in [paths] if isinstance(paths, str) else paths:
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
