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
and the same mapping back (image_io.from_network, as test.py's full-precision outputs); but a photo with an
EXIF orientation is turned upright first, as viewers show it (image_io.read_image_as_shown), where test.py
reads the pixels as stored. What it accepts and returns (docs/inference.md has the full table):

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
--model sb walks its Schrödinger bridge (models/losses/bridge.py), its noise drawn from `seed` per image:
a file's from `seed` and its name, as test.py draws it (`bridge.image_seed`), a picture's from `seed` itself.

Eval mode (the default) uses batch norm's running statistics and no dropout: outputs are deterministic
and calls from several threads run concurrently without a lock (nothing in the network changes during a
call). `eval_mode=False` computes what the reference's test.py does without --eval: each image
normalised by its own batch statistics and dropout active, with dropout masks drawn from `seed` for every
image (so the same image always gives the same output). Batch norm in training mode rewrites its running
statistics during every call, and the seeding sets the global random generator: calls serialise on a lock.

A Translator holds two records (models/inference/records.py): `loaded`, what was loaded (the generator and
its facts), and `running`, how it runs (device, precision, mode, seed, a volume's window). Each call of
`translate` makes a third, its CallOptions (tiles, code, seed, steps), and hands pictures.py or volumes.py
the generator for that call as a plain function of a batch (`_forward` with those options): nothing of a
call is kept between calls or shared with another thread's. One image's way (docs/inference.md):
translator.py -> pictures.py (decoded, mapped to [-1, 1]) -> this call's `_forward` -> [models/losses/bridge.py:
--model sb's walk] -> application.py (padded, cropped) -> [windows.py: tiles] -> the family's network module.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from data.base_dataset import parse_data_range
from models.inference import exact, large_pictures
from models.inference.application import InferenceGenerator, seeded_call
from models.inference.exact import ExactBudget
from models.inference.latent_codes import checked_latent_codes, draw_latent_codes
from models.inference.pictures import DataRange, PictureTranslation, describe_range, sample_paths  # noqa: F401
from models.inference.records import PRECISIONS, CallOptions, LoadedGenerator, RunSettings, resolve_device
from models.inference.reference_encoder import ReferenceEncoder, find_encoder, reference_picture
from models.inference.saved_generator import find_generator, load_generator
from models.inference.volumes import VolumeTranslation, WindowSettings
from models.inference.windows import Windows, check_tiling
from models.losses import bridge
from models.networks import SizeRule
from util.errors import UserError

__all__ = ["PRECISIONS", "CallOptions", "LoadedGenerator", "RunSettings", "Translator", "sample_paths"]


class Translator:
    """A loaded generator that translates images of any kind and size (see the module docstring)."""

    def __init__(self, loaded: LoadedGenerator, running: RunSettings,
                 encoder: ReferenceEncoder | Callable[[], ReferenceEncoder | None] | None = None) -> None:
        """Translate with `loaded`'s generator as `running` says (`load` and `from_generator` build both).
        `encoder`: a latent generator's encoder for `reference` images, or how to load it at its first use
        (so that translating without a reference never depends on the encoder's file)."""
        self.loaded, self.running = loaded, running
        loaded.generator.to(running.device).train(not running.eval_mode)
        if running.exact is not None and not loaded.volumes:
            exact.prepare(loaded.generator)  # before any thread translates (see exact.prepare)
        who = f"the generator of {loaded.source or loaded.netG} ({loaded.netG}, a {loaded.size_rule.dims}-D network)"
        # what goes in and comes out, each kind its way (models/inference/pictures.py, volumes.py)
        self._kind = (VolumeTranslation if loaded.volumes else PictureTranslation)(
            who, loaded.input_nc, loaded.output_nc, loaded.input_range, loaded.output_range)
        self._lock = threading.Lock()  # serialises calls in training mode only
        self._encoder = encoder

    @classmethod
    def load(cls, checkpoint: str | os.PathLike, direction: str | None = None, epoch: str = "latest",
             device: str | torch.device = "auto", precision: str = "fp32", eval_mode: bool = True,
             seed: int = 0, data_range: Sequence[float] | None = None,
             patch_size: int | Sequence[int] | None = None, window_overlap: float | None = None,
             window_batch: int | None = None, num_timesteps: int | None = None, tau: float | None = None,
             exact: ExactBudget | None = ExactBudget(), whole_volumes: bool = False,
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
        between them (None: the run's, from its train_opt.json, or the train_opt.txt of a run trained by
        UNSB's code; refused by name when neither says) drawn from `seed` (or `translate`'s).

        A picture without `tile` is translated exactly within `exact` (models/inference/exact/): whole where its
        forward fits the budget's memory, else layer by layer in tiles, every normalisation's statistics taken
        over the whole picture, so the output is the whole-picture one in bounded memory (None: always whole);
        with `whole_volumes`, a volume generator translates each volume so too, instead of in windows.
        """
        found = find_generator(os.fspath(checkpoint), direction, epoch, architecture)
        range_A, range_B = parse_data_range(found.data_range if data_range is None else data_range)
        num_timesteps, tau = found.bridge(num_timesteps, tau)  # given, or the run's: never a guess
        resolved = resolve_device(device)  # before loading, so that a bad device fails fast
        loaded = LoadedGenerator.build(
            load_generator(found.path, found.architecture, resolved), found.architecture, source=found.path,
            direction=found.direction, ranges=(range_A, range_B) if found.direction == "AtoB" else (range_B, range_A),
            num_timesteps=num_timesteps, tau=tau)
        if patch_size is None and loaded.volumes:
            patch_size = found.patch_size  # the window is the patch size the volume generator trained on
        running = RunSettings.build(loaded, resolved, precision, eval_mode, seed, patch_size, window_overlap,
                                    window_batch, exact, whole_volumes)
        encoder = (lambda: find_encoder(found.path, loaded.output_nc, resolved)) if loaded.latent_size else None
        return cls(loaded, running, encoder)

    @classmethod
    def from_generator(cls, generator: nn.Module, netG: str, input_nc: int, output_nc: int, *, source: str = "",
                       **settings: Any) -> "Translator":
        """A generator already built with its weights (e.g. by networks.define_G) of family `netG` with its
        default shape options, taking `input_nc` and giving `output_nc` channels; float data map by [0, 1].
        `settings`: `load`'s device, precision, eval_mode, seed, patch_size, window_overlap, window_batch,
        exact and whole_volumes (RunSettings.build); `source` names it in messages."""
        loaded = LoadedGenerator.build(generator, {"netG": netG, "input_nc": input_nc, "output_nc": output_nc},
                                       source=source)
        return cls(loaded, RunSettings.build(loaded, **settings))

    # The facts programs and tests read, as attributes (the records hold the rest).
    @property
    def generator(self) -> nn.Module:
        """The plain generator module, its weights loaded, on the device."""
        return self.loaded.generator

    @property
    def size_rule(self) -> SizeRule:
        """The sizes the generator takes (its family's rule)."""
        return self.loaded.size_rule

    @property
    def latent_size(self) -> int:
        """The latent code the generator takes beside each image (0: one answer per input)."""
        return self.loaded.latent_size

    @property
    def bridge(self) -> tuple[int, float, int] | None:
        """--model sb: (num_timesteps, tau, noise code size) of its walk; None for a generator of one pass."""
        return self.loaded.bridge

    @property
    def volumes(self) -> bool:
        """Whether the generator translates volumes (a 3-D family) rather than pictures."""
        return self.loaded.volumes

    @property
    def window(self) -> WindowSettings | None:
        """The sliding window a volume generator translates in; None for a picture generator."""
        return self.running.window

    @property
    def encoder(self) -> ReferenceEncoder | None:
        """The encoder saved with a latent generator (loaded at the first use), None where there is none."""
        if callable(self._encoder):
            self._encoder = self._encoder()
        return self._encoder

    def __repr__(self) -> str:
        loaded, running = self.loaded, self.running
        mode = "eval" if running.eval_mode else f"train, seed {running.seed}"
        ranges = "" if loaded.input_range is None and loaded.output_range is None else \
            f", float data {describe_range(loaded.input_range)} -> {describe_range(loaded.output_range)}"
        window = f", volumes in {running.window.describe()}" if running.window else ""
        return (f"Translator({loaded.source or loaded.netG}: {loaded.netG}, {loaded.input_nc} -> {loaded.output_nc} "
                f"channels{ranges}{window}, {running.device}, {running.precision}, {mode} mode)")

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
        loaded, generator = self.loaded, self.loaded.name  # as the refusals below name it
        if loaded.volumes and tile:
            how = f"in sliding {self.running.window.describe()}" if self.running.window else "exactly"
            raise UserError(f"tile={tile} cuts pictures into tiles, but the generator of {generator} translates "
                            f"volumes, whole, {how}; leave tile out (Translator.load's window_overlap and "
                            f"window_batch set the window).")
        check_tiling(loaded.netG, tile, tile_overlap, loaded.architecture)
        windows = self.running.window.windows() if self.running.window else \
            Windows.for_tiles(tile, tile_overlap) if tile else None
        options = CallOptions(windows, seed=self.running.seed if seed is None else seed,
                              steps=bridge.checked_steps(steps, loaded.bridge, generator))
        if loaded.bridge is not None:
            bridge.check_no_codes(n_samples, codes, reference, generator)
            return self._translate(image, options)
        if loaded.latent_size == 0:
            if n_samples is not None or codes is not None or reference is not None:
                raise UserError(f"the generator of {generator} takes no latent code: it "
                                f"gives one translation per input; leave out n_samples, codes and reference.")
            return self._translate(image, options)
        if reference is not None:
            if n_samples is not None or codes is not None:
                raise UserError("a reference image gives the one code that looks like it: pass reference, or "
                                "n_samples or codes, not both.")
            return self._translate(image, replace(options, code=self.latent_codes(codes=self.encode(reference))[0]))
        outputs = [self._translate(image, replace(options, code=code))
                   for code in self.latent_codes(n_samples, codes, seed)]
        return outputs if n_samples is not None or codes is not None else outputs[0]

    def latent_codes(self, n_samples: int | None = None, codes: Any = None, seed: int | None = None) -> torch.Tensor:
        """N x latent_size codes (float64): `codes` checked, or `n_samples` (default 1) drawn from a
        standard normal distribution seeded by `seed` (default: the translator's)."""
        if codes is not None:
            return checked_latent_codes(codes, self.latent_size)
        return draw_latent_codes(1 if n_samples is None else n_samples, self.latent_size,
                                 self.running.seed if seed is None else seed)

    def encode(self, reference: Any) -> torch.Tensor:
        """The 1 x latent_size code (float64) that makes a translation look like `reference`, an image
        of the output domain (path, PIL image, array HxW or HxWxC, or tensor CxHxW in [-1, 1]): the
        mean of the code the encoder saved with the generator gives it (models/inference/reference_encoder.py)."""
        if self.encoder is None:
            raise UserError(f"{self.loaded.source or self.loaded.netG} has no encoder saved beside its generator (e.g. "
                            f"latest_net_E.pth of a BicycleGAN run), so a reference image cannot be encoded; draw "
                            f"codes (n_samples; scripts/translate.py --n_samples) or give them (codes; --codes).")
        return self.encoder.encode(reference_picture(reference, self.loaded.output_nc, self.loaded.output_range)[None])

    def _translate(self, image: Any, options: CallOptions) -> Any:
        """`translate` for one code (or none): the input decoded into the generator's batch by its kind
        (pictures.py, volumes.py), the generator applied for this call, the output encoded as the input was."""
        if isinstance(image, (list, tuple)):
            return [self._translate(item, options) for item in image]
        if self.loaded.bridge is not None and isinstance(image, (str, os.PathLike)):
            # a file walks the noise test.py gives it for this seed: drawn from the seed and the file's name
            options = replace(options, seed=bridge.image_seed(options.seed, os.fspath(image)))
        decoded = self._kind.decode(image)
        if len(decoded.batch) == 0:  # an empty batch is an empty batch of the output's kind
            return decoded.encode(decoded.batch)
        return decoded.encode(self._forward(options, decoded.batch))

    def translate_file(self, input_path: str | os.PathLike, output_path: str | os.PathLike, *, tile: int = 0,
                       tile_overlap: int = 64, n_samples: int | None = None, codes: Any = None,
                       seed: int | None = None, reference: Any = None, steps: int | None = None) -> list[str]:
        """Translate an image file into `output_path` (its folder created if need be), in the format its
        extension names, at the input's precision (a 16-bit PNG into a 16-bit PNG, float32 into .tif or .npy;
        data/image_io.write_image). Written to a temporary file first, so an interrupted call never leaves
        half a file. A picture whose float32 values would take more than a quarter of the exact budget is
        translated by regions (models/inference/large_pictures.py): a TIFF read and written by regions into a
        tiled TIFF, another format held as its file's samples only (a .npy file: mapped). n_samples, codes, seed,
        reference and steps are `translate`'s: several answers are written as `<stem>_sample<k><extension>`. Returns the
        paths written. Raises `UserError` when the file cannot be read, or the output's format cannot hold the
        output.

        A volume translator writes the volume in `input_path` translated into `output_path`: .nii or
        .nii.gz with the input's affine and header, or .npy (float32, the output domain's units)."""
        input_path, output_path = os.fspath(input_path), os.fspath(output_path)
        answers = dict(n_samples=n_samples, codes=codes, seed=seed, reference=reference, steps=steps)
        if isinstance(self._kind, VolumeTranslation):
            self._kind.check_file_names(input_path, output_path)  # before translating, which takes a while
        streamed = large_pictures.streamed_picture(input_path, self.loaded, self.running, self._kind, tile, answers)
        if streamed:
            return streamed.translate(output_path, tile=tile, **answers)  # too large to hold as float32: by regions
        output = self.translate(input_path, tile=tile, tile_overlap=tile_overlap, **answers)
        return self._kind.write(output_path, output, input_path)

    # ------------------------------------------------------------------ the generator, for one call
    def _forward(self, options: CallOptions, batch: torch.Tensor) -> torch.Tensor:
        """NxCxHxW in [-1, 1] (C = input_nc) -> NxC'xHxW float32 in [-1, 1] on the device (volumes:
        NxCxDxHxW, in the sliding window), as this call's `options` say; one implementation for every kind
        of input, so that they all give the same numbers, and the one test.py and validation apply
        (models/inference/application.py)."""
        loaded, running = self.loaded, self.running
        net = InferenceGenerator(loaded.generator, loaded.size_rule, options.windows, running.exact)
        with torch.inference_mode(), torch.autocast(running.device.type, dtype=running.autocast or torch.bfloat16,
                                                    enabled=running.autocast is not None):
            batch = batch.to(running.device, torch.float32)
            if loaded.bridge is not None:  # each image its own walk from the call's seed: the same with any batch
                return bridge.walk_each(net, batch, options.steps, *loaded.bridge[1:],
                                        [options.seed] * len(batch))[-1].float()
            # a latent generator's code, the same for every image of the call
            codes = () if options.code is None else \
                (options.code.to(running.device, torch.float32).expand(len(batch), -1),)
            if running.eval_mode:
                return net(batch, *codes).float()
            with self._lock:
                # One image at a time, as test.py (batch size 1) normalises it: the output of an
                # image must not depend on the others in its batch.
                return torch.cat([seeded_call(net, image[None], *(c[:1] for c in codes), device=running.device,
                                              seed=running.seed) for image in batch]).float()

