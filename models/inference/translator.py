"""Apply a trained generator from your own program: `Translator.load(run).translate(image)`.

    from models.inference.translator import Translator
    translator = Translator.load("checkpoints/horse2zebra")           # a run folder or a .pth file
    zebra = translator.translate(Image.open("horse.jpg"))              # -> PIL image
    translator.translate_file("horse.jpg", "zebra.jpg")                # same format as the name says

The generator is built from `architecture.json` beside the weights, or from what the weights show
(models/inference/saved_generator.py), so no --netG/--norm/--ngf flags are needed; the --data_range the run
trained with comes from its `train_opt.json`. `translate` computes what `test.py --preprocess none
--eval` computes for the same image: the same decoding at the file's precision (data/image_io.read_image),
the same conversion to the network's [-1, 1] (data/image_folder.network_input: 8-bit by x / 127.5 - 1,
16-bit by its full range, float data by the data range; gray <-> RGB and alpha as the datasets convert
them), the same padding to the generator's size multiple and cropping back (models/inference.InferenceGenerator),
and the same mapping back (image_io.from_network, as test.py's full-precision outputs).
What it accepts and returns (docs/inference.md has the full table):

- a path -> an HxWxC NumPy array in the file's dtype as read_image reads it (uint8, uint16 or float32);
- a PIL image -> a PIL image at its precision where PIL has a mode for it (8 bits: "L", "LA", "RGB",
  "RGBA"; 16-bit and float images with one output channel: "I;16", "F"), else 8 bits;
- a NumPy array HxW, HxWxC or NxHxWxC: uint8 (0..255) and uint16 (0..65535) by their full range,
  float arrays as values in the input domain's data range ([0, 1] unless the run trained with
  --data_range) -> the same layout and dtype, floats in the output domain's range;
- a float tensor CxHxW or NxCxHxW in [-1, 1] (the network's range) -> a tensor of the same dtype and
  device, in [-1, 1];
- a list of any of these -> a list (each item translated on its own, so sizes may differ).

Any height and width; `tile` > 0 translates large images in blended tiles (models/inference/windows.py).

A run whose generator is a 3-D family (`translator.volumes`: trained on volume patches, docs/volumes.md)
translates volumes instead, whole, in Gaussian-blended sliding windows of the --patch_size it trained on
(`Translator.load`'s `patch_size`, `window_overlap`, `window_batch`), as test.py does
(models/inference/volumes.py):

- a path to a .nii, .nii.gz or .npy file -> a float32 array (C, D, H, W) in the output domain's units;
- a NumPy array (D, H, W) or (C, D, H, W) in the input domain's units (mapped through the run's
  --data_range window; uint8 data without one by 0..255) -> float32 in the output domain's units,
  (D, H, W) for one output channel, else (C, D, H, W);
- a float tensor (C, D, H, W) or (N, C, D, H, W) in [-1, 1] -> the same shape and range;
- a list of any of these -> a list.

`translate_file("in.nii.gz", "out.nii.gz")` writes NIfTI with the input's affine and header (the output
lies over its input in a viewer), or .npy. A picture given to a volume translator, or a volume (a NIfTI
file, a 5-D tensor) to a picture translator, is refused with the kind the model takes.

Everything runs under `torch.inference_mode()`, in float32 or under bf16/fp16 autocast. A run of
--model sb walks its Schrödinger bridge (models/losses/bridge.py), its noise drawn from `seed` per image.

Eval mode (the default) uses batch norm's running statistics and no dropout: outputs are deterministic
and calls from several threads run concurrently without a lock (nothing in the network changes during a
call). `eval_mode=False` computes what the reference's test.py does without --eval: each image
normalised by its own batch statistics and dropout active, with dropout masks drawn from `seed` for every
image (so the same image always gives the same output). Batch norm in training mode rewrites its running
statistics during every call, and the seeding sets the global random generator: calls serialise on a lock.
"""
from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from data.base_dataset import parse_data_range
from models.losses import bridge
from models.inference.application import InferenceGenerator
from models.inference.latent_codes import checked_latent_codes, draw_latent_codes
from models.networks import family_of
from models.inference.pictures import DataRange, PictureTranslation, describe_range, sample_paths  # noqa: F401
from models.inference.reference_encoder import ReferenceEncoder, find_encoder, reference_picture
from models.inference.saved_generator import find_generator, load_generator
from models.inference.volumes import VolumeTranslation, WindowSettings, window_settings
from models.inference.windows import Windows, check_tiling
from util.distributed import pick_device
from util.errors import UserError

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
# The latent code of this thread's translation (None: none), set by `translate`, read by `_forward`.
_LATENT_CODE: contextvars.ContextVar[torch.Tensor | None] = contextvars.ContextVar("latent_code", default=None)
_BRIDGE_WALK: contextvars.ContextVar[tuple[int, int]] = contextvars.ContextVar("bridge_walk")  # sb's (seed, steps)


class Translator:
    """A loaded generator that translates images of any kind and size (see the module docstring)."""

    def __init__(self, generator: nn.Module, netG: str, input_nc: int, output_nc: int, *,
                 device: str | torch.device = "auto", precision: str = "fp32", eval_mode: bool = True,
                 seed: int = 0, source: str = "", input_range: DataRange | None = None,
                 output_range: DataRange | None = None, architecture: dict | None = None,
                 encoder: ReferenceEncoder | Callable[[], ReferenceEncoder | None] | None = None,
                 patch_size: int | Sequence[int] | None = None, window_overlap: float | None = None,
                 window_batch: int | None = None, num_timesteps: int | None = None, tau: float | None = None) -> None:
        """Wrap a generator of family `netG` whose weights are loaded (`architecture`: the options it
        was built with, for families whose size rule depends on them); usually `Translator.load` does this. `input_range` and `output_range` are
        the float data values that map to -1 and 1 at the generator's input and output (None: 0 and 1);
        integer data always map by their dtype's full range. Volume generators (3-D families) map
        volumes' values through them (uint8 by 0..255 where they are None) and need `patch_size`, the
        window (D, H, W) whole volumes are translated in (see `load` for it and `window_overlap`,
        `window_batch`); picture generators take none of the three."""
        self.device = _resolve_device(device)
        if precision not in PRECISIONS:
            raise UserError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}.")
        if precision == "fp16" and self.device.type != "cuda":
            raise UserError("precision fp16 needs a CUDA GPU (float16 arithmetic on the CPU is slow and many "
                            "kernels lack it); use precision bf16 or fp32 on the CPU.")
        self.precision = precision
        self.generator = generator.to(self.device).train(not eval_mode)
        self.netG = netG
        self.architecture = SimpleNamespace(**(architecture or {"netG": netG}))
        self.latent_size = family_of(netG).latent_size(self.architecture)  # 0: one answer per input
        self.size_rule = family_of(netG).size_rule(self.architecture)
        self.bridge = bridge.settings(family_of(netG), self.architecture, num_timesteps, tau, source or netG)  # --model sb
        self.input_nc, self.output_nc = input_nc, output_nc
        self.eval_mode, self.seed, self.source = eval_mode, seed, source
        self.input_range, self.output_range = input_range, output_range
        # Volumes: the sliding window whole volumes are translated in (None for a picture generator),
        # and what volumes go in and come out as (models/inference/volumes.py).
        self.volumes = self.size_rule.dims == 3
        self.window: WindowSettings | None = None
        self._pictures: PictureTranslation | None = None
        self._volumes: VolumeTranslation | None = None
        if self.volumes:
            self.window = window_settings(self.architecture, source or netG, patch_size, window_overlap, window_batch)
            self._volumes = VolumeTranslation(f"the generator of {source or netG} ({netG}, a 3-D network)", input_nc,
                                              output_nc, input_range, output_range,
                                              lambda batch: self._forward(batch, 0, 0))
        else:
            self._pictures = PictureTranslation(f"the generator of {source or netG} ({netG}, a 2-D network)",
                                                input_nc, output_nc, input_range, output_range, self._forward)
            given = [name for name, value in (("patch_size", patch_size), ("window_overlap", window_overlap),
                                              ("window_batch", window_batch)) if value is not None]
            if given:
                raise UserError(f"{' and '.join(given)}: the generator of {source or netG} ({netG}) translates "
                                f"pictures, not volumes, so it has no sliding window; leave {' and '.join(given)} "
                                f"out (large pictures are translated in tiles: tile, tile_overlap).")
        self._lock = threading.Lock()  # serialises calls in training mode only
        # a latent generator's encoder for `reference` images, or how to load it at its first use (so
        # that translating without a reference never depends on the encoder's file)
        self._encoder = encoder

    @classmethod
    def load(cls, checkpoint: str | os.PathLike, direction: str | None = None, epoch: str = "latest",
             device: str | torch.device = "auto", precision: str = "fp32", eval_mode: bool = True,
             seed: int = 0, data_range: Sequence[float] | None = None,
             patch_size: int | Sequence[int] | None = None, window_overlap: float | None = None,
             window_batch: int | None = None, num_timesteps: int | None = None, tau: float | None = None,
             **architecture: Any) -> "Translator":
        """The generator in `checkpoint` (a run folder, or one `<epoch>_net_<name>.pth` file).

        `direction` ("AtoB": trainA -> trainB, or "BtoA") picks CycleGAN's G_A or G_B; None means the
        direction the run was trained in (pix2pix has only that one). `epoch` is the file prefix:
        "latest", "5", "iter_1000", or any other saved one. `data_range` are the numbers of --data_range
        (MIN MAX, or A_MIN A_MAX B_MIN B_MAX for the dataset's domains A and B): how float data map to
        the network's [-1, 1]; None takes those the run trained with (its train_opt.json), and [0, 1]
        when it has none. `architecture` keywords (netG, norm, ngf, input_nc, output_nc, no_dropout,
        named like the flags) describe a generator whose folder has no architecture.json when its
        weights alone do not say enough; they win over everything. `device` is "auto" (CUDA when
        available), "cpu", "cuda" or e.g. "cuda:1"; `precision` "fp32", "bf16" or "fp16" (CUDA only).
        See the module docstring for `eval_mode` and `seed`.

        A volume generator (a 3-D family) translates whole volumes in windows of `patch_size` voxels
        (one side for a cube, or D, H, W; None: the --patch_size the run trained on, from its
        train_opt.json) that overlap by the fraction `window_overlap` of a window (None: 0.5) and go
        through the generator `window_batch` at a time (None: 4; fewer take less memory): test.py's
        --patch_size, --window_overlap and --window_batch, whose defaults give test.py's outputs. They
        belong to the translator rather than to each call, as the device and precision do; a picture
        generator refuses them.

        A time-conditioned generator (--model sb) walks `num_timesteps` steps, noise of entropy `tau`
        between them (None: the run's, from its train_opt.json) drawn from `seed` (or `translate`'s).
        """
        found = find_generator(os.fspath(checkpoint), direction, epoch, architecture)
        range_A, range_B = parse_data_range(found.data_range if data_range is None else data_range)
        input_range, output_range = (range_A, range_B) if found.direction == "AtoB" else (range_B, range_A)
        resolved = _resolve_device(device)  # before loading, so that a bad device fails fast
        arch = found.architecture
        net = load_generator(found.path, arch, resolved)
        family, flags = family_of(arch["netG"]), SimpleNamespace(**arch)
        latent = family.latent_size(flags) > 0
        if patch_size is None and family.size_rule(flags).dims == 3:
            patch_size = found.patch_size  # the window is the patch size the volume generator trained on
        return cls(net, arch["netG"], arch["input_nc"], arch["output_nc"], device=resolved, precision=precision,
                   eval_mode=eval_mode, seed=seed, source=found.path, input_range=input_range,
                   output_range=output_range, architecture=arch,
                   encoder=(lambda: find_encoder(found.path, arch["output_nc"], resolved)) if latent else None,
                   patch_size=patch_size, window_overlap=window_overlap, window_batch=window_batch,
                   num_timesteps=found.num_timesteps if num_timesteps is None else num_timesteps,
                   tau=found.tau if tau is None else tau)

    @property
    def encoder(self) -> ReferenceEncoder | None:
        """The encoder saved with a latent generator (loaded at the first use), None where there is none."""
        if callable(self._encoder):
            self._encoder = self._encoder()
        return self._encoder

    def __repr__(self) -> str:
        mode = "eval" if self.eval_mode else f"train, seed {self.seed}"
        ranges = "" if self.input_range is None and self.output_range is None else \
            f", float data {describe_range(self.input_range)} -> {describe_range(self.output_range)}"
        window = f", volumes in {self.window.describe()}" if self.window else ""
        return (f"Translator({self.source or self.netG}: {self.netG}, {self.input_nc} -> {self.output_nc} channels"
                f"{ranges}{window}, {self.device}, {self.precision}, {mode} mode)")

    # ------------------------------------------------------------------ public API
    def translate(self, image: Any, *, tile: int = 0, tile_overlap: int = 64, n_samples: int | None = None,
                  codes: Any = None, seed: int | None = None, reference: Any = None, steps: int | None = None) -> Any:
        """The translation of `image`, of the same kind (see the module docstring). `tile` > 0
        translates images larger than `tile` pixels in overlapping tiles (as test.py --tile).

        A generator that takes a latent code beside the image (its family's `latent_size`) gives
        many answers per input: with `n_samples` N (codes drawn from a normal distribution seeded by
        `seed`, default the translator's, so the same seed gives the same outputs) or explicit
        `codes` (N x latent_size), a list of N translations; with a `reference` image of the output
        domain (a path, PIL image, array or tensor, as `image`), the one translation that looks like
        it (its code from the encoder saved with the generator: `encode`); with none of them, one,
        from the first code that `seed` draws. Volume generators take neither tiles nor codes; --model sb
        runs walk `steps` steps (default num_timesteps), their noise from `seed` (the same seed, the same output)."""
        generator = f"{self.source or self.netG} ({self.netG})"  # as the refusals below name it
        if self.volumes and tile:
            raise UserError(f"tile={tile} cuts pictures into tiles, but the generator of {generator} translates "
                            f"volumes, whole, in sliding {self.window.describe()}; leave "
                            f"tile out (Translator.load's window_overlap and window_batch set the window).")
        check_tiling(self.netG, tile, tile_overlap, self.architecture)
        walk_steps = bridge.checked_steps(steps, self.bridge, generator)
        if self.bridge is not None:
            bridge.check_no_codes(n_samples, codes, reference, generator)
            walk = (self.seed if seed is None else seed, walk_steps)
            return _within(_BRIDGE_WALK, walk, self._translate, image, tile, tile_overlap)
        if self.latent_size == 0:
            if n_samples is not None or codes is not None or reference is not None:
                raise UserError(f"the generator of {generator} takes no latent code: it "
                                f"gives one translation per input; leave out n_samples, codes and reference.")
            return self._translate(image, tile, tile_overlap)
        if reference is not None:
            if n_samples is not None or codes is not None:
                raise UserError("a reference image gives the one code that looks like it: pass reference, or "
                                "n_samples or codes, not both.")
            return self.translate(image, tile=tile, tile_overlap=tile_overlap, codes=self.encode(reference))[0]
        outputs = []
        for code in self.latent_codes(n_samples, codes, seed):
            outputs.append(_within(_LATENT_CODE, code, self._translate, image, tile, tile_overlap))
        return outputs if n_samples is not None or codes is not None else outputs[0]

    def latent_codes(self, n_samples: int | None = None, codes: Any = None, seed: int | None = None) -> torch.Tensor:
        """N x latent_size codes (float64): `codes` checked, or `n_samples` (default 1) drawn from a
        standard normal distribution seeded by `seed` (default: the translator's)."""
        if codes is not None:
            return checked_latent_codes(codes, self.latent_size)
        return draw_latent_codes(1 if n_samples is None else n_samples, self.latent_size,
                                 self.seed if seed is None else seed)

    def encode(self, reference: Any) -> torch.Tensor:
        """The 1 x latent_size code (float64) that makes a translation look like `reference`, an image
        of the output domain (path, PIL image, array HxW or HxWxC, or tensor CxHxW in [-1, 1]): the
        mean of the code the encoder saved with the generator gives it (models/inference/reference_encoder.py)."""
        if self.encoder is None:
            raise UserError(f"{self.source or self.netG} has no encoder saved beside its generator (e.g. "
                            f"latest_net_E.pth of a BicycleGAN run), so a reference image cannot be encoded; draw "
                            f"codes (n_samples; scripts/translate.py --n_samples) or give them (codes; --codes).")
        return self.encoder.encode(reference_picture(reference, self.output_nc, self.output_range)[None])

    def _translate(self, image: Any, tile: int, tile_overlap: int) -> Any:
        """`translate` for one code (or none): each kind of input its way."""
        if isinstance(image, (list, tuple)):
            return [self._translate(item, tile, tile_overlap) for item in image]
        if self.volumes:
            return self._volumes.translate(image)
        return self._pictures.translate(image, tile, tile_overlap)

    def translate_file(self, input_path: str | os.PathLike, output_path: str | os.PathLike, *, tile: int = 0,
                       tile_overlap: int = 64, **answers: Any) -> list[str]:
        """Translate an image file into `output_path` (its folder created if need be), in the format its
        extension names, at the input's precision (a 16-bit PNG into a 16-bit PNG, float32 into .tif or .npy;
        data/image_io.write_image). Written to a temporary file first, so an interrupted call never leaves
        half a file. `answers` (n_samples, codes, seed, reference) are `translate`'s: several answers are
        written as `<stem>_sample<k><extension>`. Returns the paths written. Raises
        `UserError` when the file cannot be read, or the output's format cannot hold the output.

        A volume translator writes the volume in `input_path` translated into `output_path`: .nii or
        .nii.gz with the input's affine and header, or .npy (float32, the output domain's units)."""
        input_path, output_path = os.fspath(input_path), os.fspath(output_path)
        if self.volumes:
            self._volumes.check_file_names(input_path, output_path)  # before translating, which takes a while
            output = self.translate(input_path, tile=tile, tile_overlap=tile_overlap, **answers)
            return self._volumes.write(output_path, output, input_path)
        output = self.translate(input_path, tile=tile, tile_overlap=tile_overlap, **answers)
        return self._pictures.write(output_path, output, input_path)

    # ------------------------------------------------------------------ one kind each
    # ------------------------------------------------------------------ the network
    def _forward(self, batch: torch.Tensor, tile: int, tile_overlap: int) -> torch.Tensor:
        """NxCxHxW in [-1, 1] (C = input_nc) -> NxC'xHxW float32 in [-1, 1] on the device (volumes:
        NxCxDxHxW, in the sliding window); one implementation for every kind of input, so that they all
        give the same numbers, and the one test.py and validation apply (models/inference/application.py)."""
        if self.window is not None:
            windows = self.window.windows()
        else:
            windows = Windows.for_tiles(tile, tile_overlap) if tile else None
        net = InferenceGenerator(self.generator, self.size_rule, windows)
        amp_dtype = PRECISIONS[self.precision]
        code = _LATENT_CODE.get()  # a latent generator's code for this call, the same for every image
        with torch.inference_mode(), torch.autocast(self.device.type, dtype=amp_dtype or torch.bfloat16,
                                                    enabled=amp_dtype is not None):
            batch = batch.to(self.device, torch.float32)
            if self.bridge is not None:  # each image its own walk from the call's seed: the same with any batch
                seed, steps = _BRIDGE_WALK.get()
                return bridge.walk_each(net, batch, steps, *self.bridge[1:], seed)[-1].float()
            codes = () if code is None else (code.to(self.device, torch.float32).expand(len(batch), -1),)
            if self.eval_mode:
                return net(batch, *codes).float()
            with self._lock:
                # One image at a time, as test.py (batch size 1) normalises it: the output of an
                # image must not depend on the others in its batch.
                return torch.cat([self._seeded(net, image[None], *(c[:1] for c in codes)) for image in batch]).float()

    def _seeded(self, net: nn.Module, x: torch.Tensor, *codes: torch.Tensor) -> torch.Tensor:
        """net(x) with the dropout masks drawn from `seed`; the global random state is restored after."""
        cuda = self.device.type == "cuda"
        with torch.random.fork_rng(devices=[self.device] if cuda else []):
            if cuda:
                with torch.cuda.device(self.device):
                    torch.cuda.manual_seed(self.seed)
            else:
                torch.default_generator.manual_seed(self.seed)
            return net(x, *codes)


def _within(variable: contextvars.ContextVar, value: Any, function: Callable, *args: Any) -> Any:
    """function(*args) in a copy of this thread's context where `variable` is `value` (this call's alone)."""
    def call() -> Any:
        variable.set(value)
        return function(*args)
    return contextvars.copy_context().run(call)


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
