"""What a Translator (models/inference/translator.py) is made of: three frozen records, and how the keywords of
`Translator.load` become them.

    LoadedGenerator   what was loaded: the generator and the facts about it that a translation needs
    RunSettings       how the Translator runs it, the same for every call: device, precision, mode, seed, volume window
    CallOptions       what one call chose, handed down with every batch to the generator call: tiles, code, seed, steps

Nothing here translates. The records never change once built, so one Translator serves many threads, each
call carrying its own CallOptions.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace

import torch
from torch import nn

from models.inference.exact import ExactBudget
from models.inference.pictures import DataRange
from models.inference.volumes import WindowSettings, window_settings
from models.inference.windows import Windows
from models.losses import bridge
from models.networks import SizeRule, family_of
from util.distributed import pick_device
from util.errors import UserError

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}  # name -> autocast dtype (None: float32)


@dataclass(frozen=True)
class LoadedGenerator:
    """What was loaded: one generator and the facts about it that a translation needs (`build` makes it)."""

    generator: nn.Module                    # the plain network with its weights (the Translator sets device and mode)
    netG: str                               # its family's name (--netG)
    architecture: SimpleNamespace           # the options it was built with, as flags: netG and its shape flags
    input_nc: int                           # the channels (bands) it takes
    output_nc: int                          # the channels it gives
    size_rule: SizeRule                     # the sizes it takes (its family's rule); dims 3: it translates volumes
    latent_size: int                        # the latent code it takes beside each image (0: one answer per input)
    bridge: tuple[int, float, int] | None   # --model sb: (num_timesteps, tau, noise code size); None: one pass
    direction: str = "AtoB"                 # "AtoB" or "BtoA": between which of the dataset's domains it translates
    input_range: DataRange | None = None    # the float data values that map to its input's -1 and 1 (None: 0, 1)
    output_range: DataRange | None = None   # those its output's -1 and 1 map back to (None: 0 and 1)
    source: str = ""                        # the weights file it came from ("" for a network given in memory)

    @classmethod
    def build(cls, generator: nn.Module, architecture: dict, *, source: str = "", direction: str = "AtoB",
              ranges: tuple[DataRange | None, DataRange | None] = (None, None), num_timesteps: int | None = None,
              tau: float | None = None) -> LoadedGenerator:
        """`generator`, its weights loaded, described by `architecture` (netG, input_nc, output_nc and its
        family's shape flags); `ranges` are (input_range, output_range); `num_timesteps` and `tau` the bridge
        of a --model sb generator (None: UNSB's defaults), refused for any other. Raises `UserError`."""
        flags = SimpleNamespace(**architecture)
        family = family_of(flags.netG)
        walk = bridge.settings(family, flags, num_timesteps, tau, source or flags.netG)
        return cls(generator, flags.netG, flags, flags.input_nc, flags.output_nc, family.size_rule(flags),
                   family.latent_size(flags), walk, direction, *ranges, source)

    @property
    def volumes(self) -> bool:
        """Whether it translates volumes (a 3-D family) rather than pictures."""
        return self.size_rule.dims == 3

    @property
    def name(self) -> str:
        """How messages name it: "<weights file> (<netG>)", or the family alone for a network given in memory."""
        return f"{self.source or self.netG} ({self.netG})"


@dataclass(frozen=True)
class RunSettings:
    """How the Translator runs its generator, the same for every call (`build` checks and makes it)."""

    device: torch.device                 # where the generator and every batch are
    precision: str = "fp32"              # "fp32", or "bf16" / "fp16" autocast (PRECISIONS)
    eval_mode: bool = True               # running statistics, no dropout (False: test.py without --eval)
    seed: int = 0                        # a call's seed when it names none; training mode's dropout masks
    window: WindowSettings | None = None  # a volume generator's sliding window (size, overlap, batch); None: pictures
    exact: ExactBudget | None = ExactBudget()  # the memory of a picture's exact translation (None: always whole)

    @property
    def autocast(self) -> torch.dtype | None:
        """The autocast dtype of `precision` (None: plain float32)."""
        return PRECISIONS[self.precision]

    @classmethod
    def build(cls, loaded: LoadedGenerator, device: str | torch.device = "auto", precision: str = "fp32",
              eval_mode: bool = True, seed: int = 0, patch_size: int | Sequence[int] | None = None,
              window_overlap: float | None = None, window_batch: int | None = None,
              exact: ExactBudget | None = ExactBudget(), whole_volumes: bool = False) -> RunSettings:
        """The settings `Translator.load`'s keywords of the same names give for `loaded`: the window a volume
        generator translates in (`patch_size` required; none with `whole_volumes`: whole volumes exactly within
        `exact`), refused for a picture generator. Raises `UserError`."""
        resolved = resolve_device(device)
        if precision not in PRECISIONS:
            raise UserError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}.")
        if precision == "fp16" and resolved.type != "cuda":
            raise UserError("precision fp16 needs a CUDA GPU (float16 arithmetic on the CPU is slow and many "
                            "kernels lack it); use precision bf16 or fp32 on the CPU.")
        if loaded.volumes and whole_volumes:  # exact None: whole volumes in one forward
            return cls(resolved, precision, eval_mode, seed, None, exact)
        if loaded.volumes:
            window = window_settings(loaded.architecture, loaded.source or loaded.netG, patch_size, window_overlap,
                                     window_batch)
            return cls(resolved, precision, eval_mode, seed, window, None)
        given = [name for name, value in (("patch_size", patch_size), ("window_overlap", window_overlap),
                                          ("window_batch", window_batch),
                                          ("whole_volumes", whole_volumes or None)) if value is not None]
        if given:  # scripts/translate.py recognises this refusal by its start and names its own flags
            raise UserError(f"{' and '.join(given)}: the generator of {loaded.name} translates pictures, not "
                            f"volumes, so it has no sliding window; leave {' and '.join(given)} out (large pictures "
                            f"are translated in tiles: tile, tile_overlap).")
        return cls(resolved, precision, eval_mode, seed, None, exact)


@dataclass(frozen=True)
class CallOptions:
    """What one call of `Translator.translate` chose, for one code: handed down with every batch to the
    generator call, so that concurrent calls never see each other's."""

    windows: Windows | None = None    # this call's tiles of large pictures, or the volume window; None: whole
    code: torch.Tensor | None = None  # a latent generator's code (latent_size numbers), the same for every image
    seed: int = 0                     # --model sb: every image's noise is drawn from it afresh
    steps: int | None = None          # --model sb: the steps of the walk (None: the generator takes one pass)


def resolve_device(device: str | torch.device) -> torch.device:
    """The torch device "auto", "cpu", "cuda", "cuda:N" or a torch.device names; `UserError` for anything else,
    for CUDA where PyTorch sees no GPU and for a GPU number it does not see."""
    if isinstance(device, str) and device in ("auto", "cpu"):
        return pick_device(device)
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        raise UserError(f"device {device!r} is not a device; use auto, cpu, cuda or cuda:N.") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device {device} asks for a CUDA GPU, but PyTorch sees none on this machine; use cpu (or "
                        f"auto).")
    if resolved.type == "cuda" and (resolved.index or 0) >= torch.cuda.device_count():
        raise UserError(f"device {device}: PyTorch sees {torch.cuda.device_count()} GPU(s) here, cuda:0 to "
                        f"cuda:{torch.cuda.device_count() - 1}.")
    return pick_device("cuda") if resolved == torch.device("cuda") else resolved
