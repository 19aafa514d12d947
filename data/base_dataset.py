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
from collections.abc import Sequence
from functools import partial
from typing import Any, Callable

import numpy as np
import torch
import torch.utils.data as data
from PIL import Image

from data.image_folder import DomainSpec, Picture
from data.image_io import ValueRange, match_channels, to_network
from data.layout import FileGroup, RequiredFolder
from util.errors import UserError
from util.flag_types import finite_float
from util.frozen_options import FrozenOptions

BICUBIC = Image.Resampling.BICUBIC


class BaseDataset(data.Dataset, abc.ABC):
    """A map-style dataset whose `__getitem__(index)` returns a dict of tensors and paths.

    Subclasses implement `__init__(opt)` (call super first), `__len__`, `__getitem__`, and
    optionally `modify_commandline_options`, the class attributes `paired` and `has_targets`, and
    the classmethods `required_folders(opt)` and `files_read(opt)`, which say what the dataset
    reads so that a bad folder or image is refused before any model is built
    (data/input_checks.py; by default nothing is checked but --dataroot). `create_dataset` calls `set_seed` once and the
    loader calls `set_epoch` before each epoch. The DataLoader's workers persist across epochs;
    they learn the epoch from the training sampler's (epoch, index) keys (data/samplers.py), so a
    worker sets its copy's epoch before loading a sample.

    `self.opt` is the options in effect for the epoch: those parsed or, from the epoch given to
    `load_at_crop_size_from` on (CUT's and UNSB's decay epochs), a copy of them with --load_size set
    to --crop_size, so that whatever a dataset passes to `get_params`/`get_transform` loads whole
    images at --crop_size (no random crop) without the dataset knowing.
    """

    # Whether each sample's B is the true counterpart of its A (scored with L1/PSNR/SSIM) rather
    # than an unrelated image of the other domain (scored by distribution: FID/KID).
    paired: bool = False
    # Whether each sample has a B beside its A (its counterpart, or an image of the other domain):
    # training needs one (options/train_options.py refuses a dataset without); inference does not.
    has_targets: bool = True
    # How many spatial axes the tensors of its items have: 2 for images (C, H, W), 3 for volumes (C, D, H, W).
    spatial_dims: int = 2
    # The picture modes a volume mode stands in for (aligned_volume: ("aligned",)): a run of one of them
    # whose folders hold volumes is told to use this mode instead.
    stands_in_for: tuple[str, ...] = ()
    # Whether --second_input makes each item carry a second, independent image of the model's input domain
    # ("A2", or "B2" with --direction BtoA), which UNSB (--model sb) trains on: the options refuse --model sb
    # with a mode that does not.
    gives_second_input: bool = False

    def __init__(self, opt: argparse.Namespace) -> None:
        self.opt = opt
        self.root = opt.dataroot
        self.seed = 0
        self.epoch = 0
        self.parsed_opt = opt  # what `opt` is outside the epochs that load at --crop_size
        self.crop_size_from: int | None = None  # the first epoch that loads at --crop_size (None: none)

    @staticmethod
    def modify_commandline_options(parser: argparse.ArgumentParser, is_train: bool) -> argparse.ArgumentParser:
        """Add dataset-specific flags or change defaults; return the parser."""
        return parser

    @classmethod
    def required_folders(cls, opt: argparse.Namespace) -> list[RequiredFolder]:
        """The folders this dataset reads images from under `opt` (checked in this order)."""
        return []

    @classmethod
    def files_read(cls, opt: argparse.Namespace) -> list[FileGroup]:
        """The image files a run with `opt` loads, grouped as batched together, each with how it is
        loaded (see data/layout.py). Called only once `required_folders` passed; raises `UserError`
        for a problem found while listing them (e.g. paired files whose names do not match)."""
        return []

    def set_seed(self, seed: int) -> None:
        """Set the run seed that, with epoch and index, determines every augmentation."""
        self.seed = int(seed)

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch, so each epoch draws new (but reproducible) augmentations, and the options
        it loads with (`load_at_crop_size_from`)."""
        self.epoch = int(epoch)
        at_crop_size = self.crop_size_from is not None and self.epoch >= self.crop_size_from
        self.opt = options_at_crop_size(self.parsed_opt) if at_crop_size else self.parsed_opt

    def load_at_crop_size_from(self, epoch: int | None) -> None:
        """From `epoch` on (None: never), images load at --crop_size instead of --load_size: resized
        whole to the crop (or, with scale_width, to its width), so no random crop is left. CUT's and
        UNSB's recipe for their decay epochs (`BaseModel.loads_at_crop_size_in_decay`; train.py says
        which epoch). Set once, before the loader's workers start: they inherit it."""
        self.crop_size_from = epoch
        self.set_epoch(self.epoch)

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


def options_at_crop_size(opt: argparse.Namespace) -> argparse.Namespace:
    """`opt` (left as it is: options are read-only) copied with --load_size = --crop_size."""
    if opt.load_size == opt.crop_size:
        return opt
    if isinstance(opt, FrozenOptions):
        return opt.replaced(load_size=opt.crop_size)
    return argparse.Namespace(**{**vars(opt), "load_size": opt.crop_size})  # the reference's callers' plain opt


def check_preprocess(opt: argparse.Namespace) -> None:
    """Raise `UserError` for --load_size smaller than --crop_size where images are resized, then cropped.
    (--preprocess itself is one of its choices: the parser refuses any other.)"""
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


def get_params(opt: argparse.Namespace, size: tuple[int, int], rng: random.Random | None = None) -> dict[str, Any]:
    """Draw the crop position and flip for an image of `size` (width, height) from `rng`.

    Returns {"crop_pos": (x, y), "flip": bool}; flip is always False with --no_flip. Pass the
    same dict to several `get_transform` calls to augment paired images identically. Without `rng`
    (the reference's callers pass none) the draws come from a new unseeded generator: not reproducible.
    """
    rng = rng or random.Random()
    new_w, new_h = _resized_size(opt, *size)
    x = rng.randint(0, max(0, new_w - opt.crop_size))
    y = rng.randint(0, max(0, new_h - opt.crop_size))
    if not opt.isTrain and opt.center_crop:  # test.py's flag (BicycleGAN's): the middle, the same every time
        x, y = max(0, new_w - opt.crop_size) // 2, max(0, new_h - opt.crop_size) // 2
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


# The steps below take either an 8-bit PIL image (the reference's path, unchanged) or a float32
# C x H x W tensor in [-1, 1] (full precision, any channel count; see data/image_folder.py). Both
# are resampled by PIL's filters - the tensor channel by channel in PIL's 32-bit float mode - so a
# tensor gets exactly the 8-bit computation without its rounding to 8 bits.
def picture_size(img: Picture) -> tuple[int, int]:
    """(width, height)."""
    return (img.shape[2], img.shape[1]) if isinstance(img, torch.Tensor) else img.size


def _to_gray(img: Picture) -> Picture:
    if isinstance(img, torch.Tensor):
        gray = match_channels(img, False, 1)
        if gray is None:
            raise ValueError(f"cannot turn a {img.shape[0]}-channel image into grayscale")
        return gray
    return img.convert("L")


def _resize(img: Picture, size: tuple[int, int], method: Any) -> Picture:
    if picture_size(img) == tuple(size):
        return img
    if isinstance(img, torch.Tensor):
        channels = [np.asarray(Image.fromarray(c.numpy(), mode="F").resize(size, method)) for c in img]
        return torch.from_numpy(np.stack(channels))
    return img.resize(size, method)


def _scale_width(img: Picture, target_width: int, min_height: int, method: Any) -> Picture:
    return _resize(img, _scale_width_size(*picture_size(img), target_width, min_height), method)


def _crop(img: Picture, pos: tuple[int, int], size: int) -> Picture:
    ow, oh = picture_size(img)
    if ow > size or oh > size:  # like the reference, an image no larger than the crop is kept
        x, y = pos
        if isinstance(img, torch.Tensor):
            # Past an edge PIL fills with 0, i.e. black: -1 here.
            out = img.new_full((img.shape[0], size, size), -1.0)
            part = img[:, y:y + size, x:x + size]
            out[:, :part.shape[1], :part.shape[2]] = part
            return out
        return img.crop((x, y, x + size, y + size))
    return img


def _make_multiple(img: Picture, base: int, method: Any) -> Picture:
    # Generators downsample by powers of 2; sizes must divide evenly. max() avoids 0 for tiny images.
    ow, oh = picture_size(img)
    return _resize(img, (max(base, round(ow / base) * base), max(base, round(oh / base) * base)), method)


def _flip(img: Picture) -> Picture:
    if isinstance(img, torch.Tensor):
        return img.flip(-1)
    return img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)


def _to_normalized_tensor(img: Picture) -> torch.Tensor:
    if isinstance(img, torch.Tensor):
        return img.clamp(-1.0, 1.0).contiguous()  # bicubic resampling overshoots a little, as in 8 bits
    # 8-bit values to [-1, 1] per channel (mean 0.5, std 0.5), for any number of channels.
    return to_network(np.asarray(img, dtype=np.uint8), ValueRange.for_dtype(np.uint8))


def get_transform(
    opt: argparse.Namespace,
    params: dict[str, Any] | None = None,
    grayscale: bool = False,
    method: Any = BICUBIC,
    convert: bool = True,
) -> Callable[[Picture], Any]:
    """Build the preprocessing for one image: grayscale, resize, crop, flip, to tensor.

    `params` (from `get_params`) fixes crop position and flip; with None the crop is the
    top-left corner and there is no flip (deterministic; datasets always pass params).
    --preprocess none resizes to a multiple of 4 when training and keeps the size at test time.
    Takes an 8-bit PIL image or a float C x H x W tensor in [-1, 1] (see `_size` and below); with
    `convert` the result is a float tensor CxHxW in [-1, 1], else the image in its own type.
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
    if opt.preprocess == "none" and opt.isTrain:
        # Training batches need sizes the generator takes. At test time the image keeps its size
        # and aspect ratio: test.py pads it for the generator and crops the output back
        # (models/inference/application.py), so nothing is distorted.
        steps.append(partial(_make_multiple, base=4, method=method))
    if not opt.no_flip and params["flip"]:
        steps.append(_flip)
    if convert:
        steps.append(_to_normalized_tensor)
    return Compose(steps)


def data_ranges(opt: argparse.Namespace) -> tuple[tuple[float, float] | None, tuple[float, float] | None]:
    """The float data ranges (A, B) from --data_range (see `parse_data_range`)."""
    return parse_data_range(opt.data_range)


def add_data_range_flag(parser: Any, from_run: bool = False) -> Any:
    """--data_range (read by `parse_data_range`), into `parser` or an argument group. `from_run`, for a tool
    that loads a trained run (scripts/translate.py): float data default to the run's own range."""
    parser.add_argument("--data_range", type=finite_float, nargs="+", default=None, metavar="V", on_resume="noted",
                        help="MIN MAX: the float-data values that map to -1 and 1 (both domains), or A_MIN A_MAX "
                             "B_MIN B_MAX; integer data use their type's full range. Default for float data: "
                             + ("the run's own (its train_opt.json), else 0 1" if from_run else "0 1")
                             + ". scripts/data_range.py computes it")
    return parser


def parse_data_range(values: Sequence[float] | None) -> tuple[tuple[float, float] | None, tuple[float, float] | None]:
    """The float data ranges (A, B) that the numbers of --data_range give (MIN MAX for both domains, or
    A_MIN A_MAX B_MIN B_MAX); None where none are given. Raises `UserError` for another count of numbers
    or MIN >= MAX."""
    if not values:
        return None, None
    if len(values) not in (2, 4) or any(low >= high for low, high in zip(values[::2], values[1::2])):
        raise UserError(
            f"--data_range {' '.join(f'{v:g}' for v in values)} is not MIN MAX (both domains) or A_MIN A_MAX "
            f"B_MIN B_MAX, each MIN below its MAX; scripts/data_range.py computes it from the training set.")
    low_A, high_A, low_B, high_B = values if len(values) == 4 else (*values, *values)
    return (float(low_A), float(high_A)), (float(low_B), float(high_B))


def domain_specs(opt: argparse.Namespace) -> tuple[DomainSpec, DomainSpec]:
    """How domains A and B are loaded (see `DomainSpec`).

    Datasets never swap A and B: "A" is always domain A (left half, `<phase>A` folder) and
    the model picks its input with --direction. So with BtoA domain A is the model's output
    and gets --output_nc channels, domain B its input with --input_nc channels.
    Raises `UserError` for a bad --data_range.
    """
    range_A, range_B = data_ranges(opt)
    flag_A, flag_B = ("--output_nc", "--input_nc") if opt.direction == "BtoA" else ("--input_nc", "--output_nc")
    return (DomainSpec(getattr(opt, flag_A[2:]), flag_A, range_A),
            DomainSpec(getattr(opt, flag_B[2:]), flag_B, range_B))

