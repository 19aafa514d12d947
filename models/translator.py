"""Apply a trained generator from your own program: `Translator.load(run).translate(image)`.

    from models.translator import Translator
    translator = Translator.load("checkpoints/horse2zebra")           # a run folder or a .pth file
    zebra = translator.translate(Image.open("horse.jpg"))              # -> PIL image
    translator.translate_file("horse.jpg", "zebra.jpg")                # same format as the name says

The generator is built from `architecture.json` beside the weights, or from what the weights show
(models/saved_generator.py), so no --netG/--norm/--ngf flags are needed. `translate` computes what
`test.py --preprocess none --eval` computes for the same image: the same decoding
(data/image_folder.load_image), the same mapping of 8-bit values to [-1, 1], the same padding to the
generator's size multiple and cropping back (util/tiling.SizeAdapter), the same rounding to 8 bits.
What it accepts and returns (docs/inference.md has the full table):

- a path -> an HxWxC NumPy array in the file's dtype (uint8 for the 8-bit formats read today);
- a PIL image -> a PIL image ("L" for one output channel, else "RGB");
- a NumPy array HxW, HxWxC or NxHxWxC: uint8 (0..255) and uint16 (0..65535) by their full range,
  float arrays as values in [0, 1] -> the same layout and dtype;
- a float tensor CxHxW or NxCxHxW in [-1, 1] (the network's range) -> a tensor of the same dtype and
  device, in [-1, 1];
- a list of any of these -> a list (each item translated on its own, so sizes may differ).

Any height and width; `tile` > 0 translates large images in blended tiles (util/tiling.py).
Everything runs under `torch.inference_mode()`, in float32 or under bf16/fp16 autocast.

Eval mode (the default) uses batch norm's running statistics and no dropout: outputs are
deterministic and calls from several threads run concurrently without a lock (nothing in the
network changes during a call). `eval_mode=False` computes what the reference's test.py does
without --eval: each image normalised by its own batch statistics and dropout active, with dropout
masks drawn from `seed` for every image (so the same image always gives the same output). Batch
norm in training mode rewrites its running statistics during every call, and the seeding sets the
global random generator, so in that mode calls serialise on a lock.
"""
from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import nn

from data.image_folder import convert_image, load_image
from models.saved_generator import find_generator, load_generator
from util.checkpoint import atomic_write
from util.distributed import pick_device
from util.errors import UserError
from util.tiling import SizeAdapter, check_tiling

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


class Translator:
    """A loaded generator that translates images of any kind and size (see the module docstring)."""

    def __init__(self, generator: nn.Module, netG: str, input_nc: int, output_nc: int, *,
                 device: str | torch.device = "auto", precision: str = "fp32", eval_mode: bool = True,
                 seed: int = 0, source: str = "") -> None:
        """Wrap a generator built by `networks.define_G(input_nc, output_nc, ngf, netG, ...)` whose
        weights are loaded; usually `Translator.load` does this."""
        self.device = _resolve_device(device)
        if precision not in PRECISIONS:
            raise UserError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}.")
        if precision == "fp16" and self.device.type != "cuda":
            raise UserError("precision fp16 needs a CUDA GPU (float16 arithmetic on the CPU is slow and many "
                            "kernels lack it); use precision bf16 or fp32 on the CPU.")
        self.precision = precision
        self.generator = generator.to(self.device).train(not eval_mode)
        self.netG = netG
        self.input_nc = input_nc
        self.output_nc = output_nc
        self.eval_mode = eval_mode
        self.seed = seed
        self.source = source
        self._lock = threading.Lock()  # serialises calls in training mode only

    @classmethod
    def load(cls, checkpoint: str | os.PathLike, direction: str | None = None, epoch: str = "latest",
             device: str | torch.device = "auto", precision: str = "fp32", eval_mode: bool = True,
             seed: int = 0, **architecture: Any) -> "Translator":
        """The generator in `checkpoint` (a run folder, or one `<epoch>_net_<name>.pth` file).

        `direction` ("AtoB": trainA -> trainB, or "BtoA") picks CycleGAN's G_A or G_B; None means the
        direction the run was trained in (pix2pix has only that one). `epoch` is the file prefix:
        "latest", "5", "iter_1000", or any other saved one. `architecture` keywords (netG, norm, ngf,
        input_nc, output_nc, no_dropout, named like the flags) describe a generator whose folder has
        no architecture.json when its weights alone do not say enough; they win over everything.
        `device` is "auto" (CUDA when available), "cpu", "cuda" or e.g. "cuda:1"; `precision`
        "fp32", "bf16" or "fp16" (CUDA only). See the module docstring for `eval_mode` and `seed`.
        """
        found = find_generator(os.fspath(checkpoint), direction, epoch, architecture)
        resolved = _resolve_device(device)  # before loading, so that a bad device fails fast
        arch = found.architecture
        net = load_generator(found.path, arch, resolved)
        return cls(net, arch["netG"], arch["input_nc"], arch["output_nc"], device=resolved, precision=precision,
                   eval_mode=eval_mode, seed=seed, source=found.path)

    def __repr__(self) -> str:
        mode = "eval" if self.eval_mode else f"train, seed {self.seed}"
        return (f"Translator({self.source or self.netG}: {self.netG}, {self.input_nc} -> {self.output_nc} channels, "
                f"{self.device}, {self.precision}, {mode} mode)")

    # ------------------------------------------------------------------ public API
    def translate(self, image: Any, *, tile: int = 0, tile_overlap: int = 64) -> Any:
        """The translation of `image`, of the same kind (see the module docstring). `tile` > 0
        translates images larger than `tile` pixels in overlapping tiles (as test.py --tile)."""
        check_tiling(self.netG, tile, tile_overlap)
        if isinstance(image, (list, tuple)):
            return [self.translate(item, tile=tile, tile_overlap=tile_overlap) for item in image]
        if isinstance(image, (str, os.PathLike)):
            return self._translate_array(_read_image_file(image, self.input_nc), tile, tile_overlap)
        if isinstance(image, Image.Image):
            array = np.asarray(convert_image(image, "L" if self.input_nc == 1 else "RGB"))
            out = self._translate_array(array, tile, tile_overlap)
            return Image.fromarray(out[..., 0] if out.ndim == 3 and out.shape[-1] == 1 else out)
        if isinstance(image, np.ndarray):
            return self._translate_array(image, tile, tile_overlap)
        if isinstance(image, torch.Tensor):
            return self._translate_tensor(image, tile, tile_overlap)
        raise UserError(f"cannot translate a {type(image).__name__}: pass a file path, a PIL image, a NumPy array, "
                        f"a tensor, or a list of them.")

    def translate_file(self, input_path: str | os.PathLike, output_path: str | os.PathLike, *, tile: int = 0,
                       tile_overlap: int = 64) -> None:
        """Translate an image file into `output_path`, in the format its extension names (written to a
        temporary file first, so an interrupted call never leaves half a file)."""
        _write_image_file(os.fspath(output_path), self.translate(os.fspath(input_path), tile=tile,
                                                                  tile_overlap=tile_overlap))

    # ------------------------------------------------------------------ one kind each
    def _translate_array(self, array: np.ndarray, tile: int, tile_overlap: int) -> np.ndarray:
        if array.ndim not in (2, 3, 4):
            raise UserError(f"cannot translate an array of shape {array.shape}: pass HxW, HxWxC or NxHxWxC.")
        batch = {2: array[None, :, :, None], 3: array[None], 4: array}[array.ndim]
        out = _from_network(self._forward(_to_network(batch), tile, tile_overlap), array.dtype)
        if array.ndim == 4:
            return out
        return out[0, ..., 0] if array.ndim == 2 and self.output_nc == 1 else out[0]

    def _translate_tensor(self, x: torch.Tensor, tile: int, tile_overlap: int) -> torch.Tensor:
        if not x.is_floating_point() or x.ndim not in (3, 4):
            raise UserError(f"cannot translate a {x.dtype} tensor of shape {tuple(x.shape)}: pass a float tensor "
                            f"CxHxW or NxCxHxW in [-1, 1] (e.g. rgb_uint8.float() / 127.5 - 1).")
        out = self._forward(x if x.ndim == 4 else x[None], tile, tile_overlap)
        out = out.to(x.device, x.dtype).clone()  # clone: an ordinary tensor, usable with autograd
        return out if x.ndim == 4 else out[0]

    # ------------------------------------------------------------------ the network
    def _forward(self, batch: torch.Tensor, tile: int, tile_overlap: int) -> torch.Tensor:
        """NxCxHxW in [-1, 1] -> NxC'xHxW float32 in [-1, 1] on the device; one implementation for
        every kind of input, so that they all give the same numbers."""
        channels = batch.shape[1]
        if channels != self.input_nc and not (channels == 1 and self.input_nc == 3):
            raise UserError(f"the generator takes {self.input_nc}-channel images, this one has {channels} "
                            f"channels; convert it (e.g. to {'grayscale' if self.input_nc == 1 else 'RGB'}) first.")
        if channels != self.input_nc:  # gray into an RGB network, as load_image(path, "RGB") gives it
            batch = batch.expand(-1, self.input_nc, -1, -1)
        net = SizeAdapter.for_generator(self.generator, self.netG, tile, tile_overlap)
        amp_dtype = PRECISIONS[self.precision]
        with torch.inference_mode(), torch.autocast(self.device.type, dtype=amp_dtype or torch.bfloat16,
                                                    enabled=amp_dtype is not None):
            batch = batch.to(self.device, torch.float32)
            if self.eval_mode:
                return net(batch).float()
            with self._lock:
                # One image at a time, as test.py (batch size 1) normalises it: the output of an
                # image must not depend on the others in its batch.
                return torch.cat([self._seeded(net, image[None]) for image in batch]).float()

    def _seeded(self, net: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """net(x) with the dropout masks drawn from `seed`; the global random state is restored after."""
        cuda = self.device.type == "cuda"
        with torch.random.fork_rng(devices=[self.device] if cuda else []):
            if cuda:
                with torch.cuda.device(self.device):
                    torch.cuda.manual_seed(self.seed)
            else:
                torch.default_generator.manual_seed(self.seed)
            return net(x)


def _resolve_device(device: str | torch.device) -> torch.device:
    if isinstance(device, str) and device in ("auto", "cpu", "cuda"):
        return pick_device(device)
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        raise UserError(f"device {device!r} is not a device; use auto, cpu, cuda or cuda:N.") from None
    if resolved.type == "cuda":
        pick_device("cuda")  # the clear error when PyTorch sees no GPU
    return resolved


# ---------------------------------------------------------------------- files and value ranges
# Image files and the mapping of pixel values to the network's [-1, 1] live in these four
# functions only (data/image_io.py is to replace them when it supports 16-bit and float files).
_FULL_SCALE = {np.dtype(np.uint8): 255.0, np.dtype(np.uint16): 65535.0}


def _read_image_file(path: str | os.PathLike, channels: int) -> np.ndarray:
    """The image file decoded as test.py decodes it: HxWxC, 8 bits."""
    array = np.asarray(load_image(os.fspath(path), "L" if channels == 1 else "RGB"))
    return array[..., None] if array.ndim == 2 else array


def _write_image_file(path: str, array: np.ndarray) -> None:
    """HxWxC `array` into `path` in the format of its extension (JPEG at quality 95)."""
    extension = os.path.splitext(path)[1].lower()
    image_format = Image.registered_extensions().get(extension)
    if image_format is None:
        raise UserError(f"cannot write {path}: no image format is known for the extension {extension or '(none)'}; "
                        f"name the output .png, .jpg, .tif, ...")
    image = Image.fromarray(array[..., 0] if array.shape[-1] == 1 else array)
    options = {"quality": 95} if image_format == "JPEG" else {}
    try:
        atomic_write(path, lambda f: image.save(f, format=image_format, **options))
    except (OSError, KeyError, ValueError) as err:
        raise UserError(f"cannot write {path} as {image_format}: {err}") from None


def _to_network(batch: np.ndarray) -> torch.Tensor:
    """NxHxWxC uint8/uint16 (full range) or float ([0, 1]) values -> NxCxHxW float32 in [-1, 1]."""
    if batch.dtype in _FULL_SCALE:
        scale = _FULL_SCALE[batch.dtype]
    elif np.issubdtype(batch.dtype, np.floating):
        scale = 1.0
    else:
        raise UserError(f"cannot translate a {batch.dtype} array: pass uint8, uint16, or float values in [0, 1].")
    # x / (scale / 2) - 1: for 8 bits the very operations of data/base_dataset.py (x / 127.5 - 1).
    tensor = torch.from_numpy(batch.transpose(0, 3, 1, 2).astype(np.float32, order="C"))
    return tensor.div_(scale / 2).sub_(1.0)


def _from_network(batch: torch.Tensor, dtype: np.dtype) -> np.ndarray:
    """NxCxHxW in [-1, 1] -> NxHxWxC of `dtype`, rounded as util.util.tensor2im rounds 8-bit images."""
    values = (batch.detach().float().cpu().clamp(-1.0, 1.0).permute(0, 2, 3, 1).numpy() + 1.0) / 2.0
    if dtype in _FULL_SCALE:
        return np.round(values * _FULL_SCALE[dtype]).astype(dtype)
    return values.astype(dtype)
