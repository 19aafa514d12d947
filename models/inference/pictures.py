"""What the Translator (models/inference/translator.py) takes and gives when its generator translates pictures:
a path, a PIL image, a NumPy array or a tensor in, the same kind out (the table is in the Translator's
module docstring and docs/inference.md), each decoded and mapped to the network's [-1, 1] as test.py
maps a dataset's images (data/image_folder.network_input) and back as test.py's full-precision outputs
(data/image_io.from_network), so that every kind gives the same numbers.

    PictureTranslation     each kind of picture in and out, files written in the format their name says
    sample_paths(...)      where several answers for one output file go
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from PIL import Image

from data.image_folder import DomainSpec, network_input
from data.image_io import (
    PIL_UNREADABLE,
    ValueRange,
    array_from_pil,
    as_shown,
    exif_orientation,
    from_network,
    layout_hint,
    match_channels,
    probe_image,
    read_image_as_shown,
    require_finite,
    write_image,
)
from data.volume_io import NIFTI_EXTENSIONS
from util.errors import UserError

# The array dtypes `translate` takes: integers by their full range, floats by the data range.
ARRAY_DTYPES = tuple(np.dtype(t) for t in (np.uint8, np.uint16, np.float16, np.float32, np.float64))

DataRange = tuple[float, float]


@dataclass(frozen=True)
class Decoded:
    """An input decoded for the generator: `batch` (N x C x H x W in [-1, 1], or N x C x D x H x W for
    volumes; N may be 0), and `encode`, which turns the generator's output for it back into the kind of
    input it came as (an empty batch's output without the generator)."""

    batch: torch.Tensor
    encode: Callable[[torch.Tensor], Any]


@dataclass
class PictureTranslation:
    """The pictures a Translator of a 2-D generator takes and gives: `decode` makes the generator's batch
    of each, and the Decoded it returns makes the output of the generator's. `who` names the generator in
    messages ("the generator of <run> (<netG>, a 2-D network)")."""

    who: str
    input_nc: int
    output_nc: int
    input_range: DataRange | None
    output_range: DataRange | None

    def decode(self, image: Any) -> Decoded:
        """One picture (a path, PIL image, NumPy array or tensor) as the generator's batch, and how its output
        goes back into the same kind; anything else refused."""
        if isinstance(image, (str, os.PathLike)) and os.fspath(image).lower().endswith(NIFTI_EXTENSIONS):
            raise self.volume_error(f"{os.fspath(image)} is a volume")
        if isinstance(image, (str, os.PathLike)):
            path = os.fspath(image)
            images = read_image_as_shown(path)[None]  # a phone's portrait photo upright, as every viewer shows it
            batch = self.network_batch(images, probe_image(path).alpha, f"image {path}", path=path)
            return Decoded(batch, lambda out: self.pictures_out(out, images.shape, images.dtype)[0])
        if isinstance(image, Image.Image):
            return self._decode_pil(image)
        if isinstance(image, np.ndarray):
            return self._decode_array(image)
        if isinstance(image, torch.Tensor):
            return self._decode_tensor(image)
        raise UserError(f"cannot translate a {type(image).__name__}: pass a file path, a PIL image, a NumPy array, "
                        f"a tensor, or a list of them.")

    def write(self, output_path: str, output: Any, input_path: str) -> list[str]:
        """Write the translation(s) of the image file `input_path` (several answers: a list) to
        `output_path` (`<stem>_sample<k><extension>` for several), its folder made if need be, in the
        format the name says at the output's precision; returns the paths written."""
        info = probe_image(input_path)
        outputs = {output_path: output} if not isinstance(output, list) else \
            dict(zip(sample_paths(output_path, len(output)), output))
        try:
            os.makedirs(os.path.dirname(os.path.abspath(output_path)), exist_ok=True)
            for path, image in outputs.items():
                # An alpha channel stays marked as alpha where the output has the input's channels (as test.py).
                write_image(path, image, alpha=info.alpha and image.shape[-1] == info.channels)
        except (OSError, ValueError, ImportError) as err:
            raise UserError(f"cannot write {output_path}: {' '.join(str(err).split())}.") from None
        return list(outputs)

    def network_batch(self, images: np.ndarray, alpha: bool, what: str, path: str | None = None) -> torch.Tensor:
        """N x H x W x C images as `read_image` returns them -> N x input_nc x H x W in [-1, 1], mapped as
        test.py maps a dataset's."""
        if len(images) == 0:
            return torch.zeros((0, self.input_nc, *images.shape[1:3]))
        require_finite(images, what, "then translate it")
        spec = DomainSpec(self.input_nc, "input_nc", self.input_range)
        inputs = [network_input(image, alpha, spec) for image in images]
        if inputs[0] is None:
            hint = layout_hint(path, probe_image(path)) if path else ""
            raise self._channel_error(what, images.shape[-1], alpha, hint)
        return torch.stack(inputs)

    def pictures_out(self, out: torch.Tensor, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """The generator's output for N x H x W x C images of `shape` -> N x H x W x output_nc of `dtype`,
        mapped back as test.py's full-precision outputs."""
        if shape[0] == 0:  # an empty batch translates to an empty batch, as a tensor's does
            return np.zeros((0, *shape[1:3], self.output_nc), dtype)
        value_range = ValueRange.for_dtype(np.dtype(dtype), self.output_range)
        return np.stack([from_network(image, value_range, np.dtype(dtype)) for image in out])

    def _decode_pil(self, image: Image.Image) -> Decoded:
        _require_pixels((image.height, image.width), f"a {image.width}x{image.height} PIL image", "an image")
        try:
            array, alpha = array_from_pil(image)
            array = as_shown(array, exif_orientation(image))  # as the file it was opened from is read
        except PIL_UNREADABLE as err:
            reason = " ".join((str(err) or type(err).__name__).split())
            raise UserError(f"cannot decode the {image.format or 'given'} image: it is damaged or truncated "
                            f"({reason}).") from err
        if self.output_nc > 4:
            raise UserError(f"the generator gives {self.output_nc}-channel images, which PIL cannot hold (at most 4 "
                            f"channels); pass np.asarray(image) to get a NumPy array back.")
        # PIL holds 16-bit and float data only as one channel; colour from those comes back as 8 bits.
        out_dtype = array.dtype if self.output_nc == 1 else np.dtype(np.uint8)

        def to_pil(out: torch.Tensor) -> Image.Image:
            picture = self.pictures_out(out, array[None].shape, out_dtype)[0]
            return Image.fromarray(picture[:, :, 0] if self.output_nc == 1 else picture)
        return Decoded(self.network_batch(array[None], alpha, "the image"), to_pil)

    def _decode_array(self, array: np.ndarray) -> Decoded:
        if array.ndim not in (2, 3, 4):
            raise UserError(f"cannot translate an array of shape {array.shape}: pass HxW, HxWxC or NxHxWxC.")
        if array.dtype not in ARRAY_DTYPES:
            raise UserError(f"cannot translate a {array.dtype} array: pass uint8, uint16, or float values (in the "
                            f"data range {describe_range(self.input_range)}).")
        _require_pixels(array.shape[-3:] if array.ndim == 4 else array.shape, f"an array of shape {array.shape}",
                        "HxW, HxWxC or NxHxWxC")
        images = {2: array[None, :, :, None], 3: array[None], 4: array}[array.ndim]

        def to_array(out: torch.Tensor) -> np.ndarray:
            pictures = self.pictures_out(out, images.shape, array.dtype)
            if array.ndim == 4:
                return pictures
            return pictures[0, ..., 0] if array.ndim == 2 and self.output_nc == 1 else pictures[0]
        return Decoded(self.network_batch(images, False, "this array"), to_array)

    def _decode_tensor(self, x: torch.Tensor) -> Decoded:
        if x.ndim == 5:
            raise self.volume_error(f"a tensor of shape {tuple(x.shape)} (N x C x D x H x W) is a volume")
        if not x.is_floating_point() or x.ndim not in (3, 4):
            raise UserError(f"cannot translate a {x.dtype} tensor of shape {tuple(x.shape)}: pass a float tensor "
                            f"CxHxW or NxCxHxW in [-1, 1] (e.g. rgb_uint8.float() / 127.5 - 1).")
        _require_pixels(tuple(x.shape[-3:]), f"a tensor of shape {tuple(x.shape)}", "CxHxW or NxCxHxW")
        batch = x if x.ndim == 4 else x[None]
        if len(batch) == 0:
            return Decoded(batch, lambda out: x.new_zeros((0, self.output_nc, *batch.shape[2:])))
        if batch.shape[1] != self.input_nc:
            matched = [match_channels(image.float().cpu(), False, self.input_nc) for image in batch]
            if matched[0] is None:
                raise self._channel_error("this tensor", batch.shape[1], False)
            batch = torch.stack(matched)

        def to_tensor(out: torch.Tensor) -> torch.Tensor:
            out = out.to(x.device, x.dtype).clone()  # clone: an ordinary tensor, usable with autograd
            return out if x.ndim == 4 else out[0]
        return Decoded(batch, to_tensor)

    def volume_error(self, what: str) -> UserError:
        """The refusal of a volume (`what`: e.g. "x.nii is a volume")."""
        return UserError(f"{self.who} translates pictures, and {what}; translate volumes with a run trained on them "
                         f"(a volume --dataset_mode with a 3-D --netG, docs/volumes.md), or pass their slices as "
                         f"pictures (H x W or H x W x C arrays).")

    def _channel_error(self, what: str, channels: int, alpha: bool, hint: str = "") -> UserError:
        fix = (f"convert it to {'grayscale' if self.input_nc == 1 else 'RGB'} first" if self.input_nc in (1, 3)
               else f"pass images with {self.input_nc} channels (bands)")
        return UserError(f"the generator takes {self.input_nc}-channel images, {what} has {channels} channels"
                         f"{' (the last one alpha)' if alpha else ''}{hint}; {fix}. Gray and RGB convert into each "
                         f"other (alpha composited on white), other channel counts do not.")


def sample_paths(output_path: str, count: int) -> list[str]:
    """Where `translate_file` writes `count` answers for `output_path`: `<stem>_sample<k><extension>`."""
    stem, extension = os.path.splitext(output_path)
    return [f"{stem}_sample{k}{extension}" for k in range(count)]


def _require_pixels(image_shape: tuple[int, ...], what: str, layout: str) -> None:
    """Raise `UserError` naming `what` when one image's dimensions (without the batch's) include a 0:
    there is nothing to translate, and the network's layers would fail on it."""
    if 0 in image_shape:
        raise UserError(f"cannot translate {what}: it holds no pixels (a height, width or channel count of 0); "
                        f"pass {layout} with at least one pixel.")


def describe_range(data_range: DataRange | None) -> str:
    low, high = data_range or (0.0, 1.0)
    return f"[{low:g}, {high:g}]"
