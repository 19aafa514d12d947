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
