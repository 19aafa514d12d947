"""Base class of all datasets and the shared preprocessing (resize, crop, flip, normalize).

Reproducibility contract: every random choice made while producing sample `index` (crop
position, flip, the random B image of unaligned datasets) is drawn from `sample_rng(index)`,
a generator seeded only by (seed, epoch, index). The same sample therefore gets the same
augmentation whatever the number of DataLoader workers or DDP ranks, and when training
resumes in the middle of an epoch. Global `random` and the torch RNG are never used here.
"""

from __future__ import annotations

import abc
import argparse
import hashlib
import random
from functools import partial
from typing import Any, Callable

import numpy as np
import torch
import torch.utils.data as data
from PIL import Image

from util.errors import UserError

BICUBIC = Image.Resampling.BICUBIC

PREPROCESS_MODES = ("resize_and_crop", "crop", "scale_width", "scale_width_and_crop", "none", "resize")


class BaseDataset(data.Dataset, abc.ABC):
    """A map-style dataset whose `__getitem__(index)` returns a dict of tensors and paths.

    Subclasses implement `__init__(opt)` (call super first), `__len__`, `__getitem__`, and
    optionally `modify_commandline_options`. `create_dataset` calls `set_seed` once and the
    loader calls `set_epoch` before each epoch (before the DataLoader starts its workers, which
    is why workers see the new epoch: they are not persistent).
    """

    def __init__(self, opt: argparse.Namespace) -> None:
        self.opt = opt
        self.root = opt.dataroot
        self.seed = 0
        self.epoch = 0

    @staticmethod
    def modify_commandline_options(parser: argparse.ArgumentParser, is_train: bool) -> argparse.ArgumentParser:
        """Add dataset-specific flags or change defaults; return the parser."""
        return parser

    def set_seed(self, seed: int) -> None:
        """Set the run seed that, with epoch and index, determines every augmentation."""
        self.seed = int(seed)

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch, so each epoch draws new (but reproducible) augmentations."""
        self.epoch = int(epoch)

    def sample_rng(self, index: int) -> random.Random:
        """A fresh generator determined only by (seed, epoch, index)."""
        # A digest, not hash(): str hashing is salted per process, so workers would disagree.
        key = f"{self.seed}/{self.epoch}/{int(index)}".encode()
        return random.Random(int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big"))

    @abc.abstractmethod
    def __len__(self) -> int:
        """Number of samples in the dataset."""

    @abc.abstractmethod
    def __getitem__(self, index: int) -> dict[str, Any]:
        """The sample at `index` as a dict (tensors plus '*_paths' strings)."""


def check_preprocess(opt: argparse.Namespace) -> None:
    """Raise `UserError` for an unknown --preprocess or --load_size smaller than --crop_size."""
    if opt.preprocess not in PREPROCESS_MODES:
        raise UserError(
            f"unknown --preprocess {opt.preprocess!r}; use one of {', '.join(PREPROCESS_MODES)}."
        )
    if ("resize" in opt.preprocess or "scale_width" in opt.preprocess) and "crop" in opt.preprocess \
            and opt.load_size < opt.crop_size:
        raise UserError(
            f"--load_size {opt.load_size} is smaller than --crop_size {opt.crop_size}: images are "
            f"resized to --load_size and then cropped to --crop_size; make --load_size >= --crop_size."
        )


def _resized_size(opt: argparse.Namespace, w: int, h: int) -> tuple[int, int]:
    """Image size after the resize step of `get_transform` (before cropping)."""
    if "resize" in opt.preprocess:
        return opt.load_size, opt.load_size
    if "scale_width" in opt.preprocess:
        return _scale_width_size(w, h, opt.load_size, opt.crop_size)
    return w, h


def _scale_width_size(w: int, h: int, target_width: int, min_height: int) -> tuple[int, int]:
    if w == target_width and h >= min_height:
        return w, h
    # Keep the aspect ratio, but never go below the crop height so a crop always fits.
    return target_width, int(max(target_width * h / w, min_height))


def get_params(opt: argparse.Namespace, size: tuple[int, int], rng: random.Random) -> dict[str, Any]:
    """Draw the crop position and flip for an image of `size` (width, height) from `rng`.

    Returns {"crop_pos": (x, y), "flip": bool}; flip is always False with --no_flip. Pass the
    same dict to several `get_transform` calls to augment paired images identically.
    """
    new_w, new_h = _resized_size(opt, *size)
    x = rng.randint(0, max(0, new_w - opt.crop_size))
    y = rng.randint(0, max(0, new_h - opt.crop_size))
    flip = rng.random() > 0.5  # drawn even with --no_flip so later draws do not shift
    return {"crop_pos": (x, y), "flip": flip and not opt.no_flip}


def _pil_method(method: Any) -> Any:
    # Accept torchvision's InterpolationMode too, since callers of the original API pass it
    # (recognised by name: importing torchvision would double every start-up time).
    if type(method).__name__ == "InterpolationMode":
        return getattr(Image.Resampling, method.name, BICUBIC)
    return method


class Compose:
    """Apply `transforms` in order (the interface of torchvision's Compose)."""

    def __init__(self, transforms: list[Callable[[Any], Any]]) -> None:
        self.transforms = transforms

    def __call__(self, img: Any) -> Any:
        for transform in self.transforms:
            img = transform(img)
        return img


def _to_gray(img: Image.Image) -> Image.Image:
    return img.convert("L")


def _resize(img: Image.Image, size: tuple[int, int], method: Any) -> Image.Image:
    return img if img.size == size else img.resize(size, method)


def _scale_width(img: Image.Image, target_width: int, min_height: int, method: Any) -> Image.Image:
    return _resize(img, _scale_width_size(*img.size, target_width, min_height), method)


def _crop(img: Image.Image, pos: tuple[int, int], size: int) -> Image.Image:
    ow, oh = img.size
    if ow > size or oh > size:  # like the reference, an image no larger than the crop is kept
        x, y = pos
        return img.crop((x, y, x + size, y + size))
    return img


def _make_multiple(img: Image.Image, base: int, method: Any) -> Image.Image:
    # Generators downsample by powers of 2; sizes must divide evenly. max() avoids 0 for tiny images.
    ow, oh = img.size
    return _resize(img, (max(base, round(ow / base) * base), max(base, round(oh / base) * base)), method)


def _flip(img: Image.Image) -> Image.Image:
    return img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)


def _to_normalized_tensor(img: Image.Image) -> torch.Tensor:
    # 8-bit values to [-1, 1] per channel (mean 0.5, std 0.5), for any number of channels.
    array = np.asarray(img, dtype=np.uint8)
    if array.ndim == 2:
        array = array[:, :, None]
    return torch.from_numpy(array.transpose(2, 0, 1).copy()).float().div_(127.5).sub_(1.0)


def get_transform(
    opt: argparse.Namespace,
    params: dict[str, Any] | None = None,
    grayscale: bool = False,
    method: Any = BICUBIC,
    convert: bool = True,
) -> Callable[[Image.Image], Any]:
    """Build the preprocessing for one image: grayscale, resize, crop, flip, to tensor.

    `params` (from `get_params`) fixes crop position and flip; with None the crop is the
    top-left corner and there is no flip (deterministic; datasets always pass params).
    --preprocess none resizes to a multiple of 4 when training and keeps the size at test time.
    With `convert` the result is a float tensor CxHxW in [-1, 1], else a PIL image.
    """
    check_preprocess(opt)
    if params is None:
        params = {"crop_pos": (0, 0), "flip": False}
    method = _pil_method(method)
    steps: list[Callable[[Any], Any]] = []
    if grayscale:
        steps.append(_to_gray)
    if "resize" in opt.preprocess:
        steps.append(partial(_resize, size=(opt.load_size, opt.load_size), method=method))
    elif "scale_width" in opt.preprocess:
        steps.append(partial(_scale_width, target_width=opt.load_size, min_height=opt.crop_size, method=method))
    if "crop" in opt.preprocess:
        steps.append(partial(_crop, pos=params["crop_pos"], size=opt.crop_size))
    if opt.preprocess == "none" and getattr(opt, "isTrain", True):
        # Training batches need sizes the generator takes. At test time the image keeps its size
        # and aspect ratio: test.py pads it for the generator and crops the output back
        # (util/tiling.py), so nothing is distorted.
        steps.append(partial(_make_multiple, base=4, method=method))
    if not opt.no_flip and params["flip"]:
        steps.append(_flip)
    if convert:
        steps.append(_to_normalized_tensor)
    return Compose(steps)


def domain_channels(opt: argparse.Namespace) -> tuple[int, int]:
    """Channel counts (A, B) of domains A and B.

    Datasets never swap A and B: "A" is always domain A (left half, `<phase>A` folder) and
    the model picks its input with --direction. So with BtoA domain A is the model's output
    and gets --output_nc channels, domain B its input with --input_nc channels.
    Raises `UserError` unless both flags are 1 or 3.
    """
    check_channels("--input_nc", opt.input_nc)
    check_channels("--output_nc", opt.output_nc)
    if opt.direction == "BtoA":
        return opt.output_nc, opt.input_nc
    return opt.input_nc, opt.output_nc


def check_channels(flag: str, value: int) -> None:
    """Raise `UserError` unless an image channel count flag is 1 (grayscale) or 3 (RGB)."""
    if value not in (1, 3):
        raise UserError(
            f"{flag} is {value}, but image datasets produce 1 (grayscale) or 3 (RGB) channels; "
            f"set {flag} to 1 or 3."
        )
