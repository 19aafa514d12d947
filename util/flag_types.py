"""Argument types that check a flag's range when it is parsed, and the parser that reports them.

A value out of range (`--batch_size 0`, `--lr nan`, `--display_port 70000`) is refused by
argparse before anything runs, in one paragraph that names the flag, the allowed range and the
value given, with exit status 2 -- the same form as every other bad input (util/errors.py).

    parser.add_argument("--batch_size", type=positive_int, default=1)

Scripts use `OneParagraphParser` too, so that their bad flags read like train.py's. It also takes
each flag's class on `--continue_train` where the flag is declared (util/resume_flags.py):

    parser.add_argument("--ngf", type=positive_int, default=64, on_resume="architecture")
"""
from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from util.resume_flags import ResumeClass, checked_class


class Bounded:
    """An argparse `type`: parse the text as `kind` and require `low <= value <= high` (either
    bound optional, `low` exclusive with `low_open`); floats must also be finite."""

    def __init__(self, kind: type, low: float | None = None, high: float | None = None,
                 low_open: bool = False, high_open: bool = False, name: str = "") -> None:
        self.kind, self.low, self.high = kind, low, high
        self.low_open, self.high_open = low_open, high_open
        self.__name__ = name or kind.__name__  # argparse names the type in some messages

    def describe(self) -> str:
        noun = "an integer" if self.kind is int else "a number"
        shown = (lambda v: str(int(v))) if self.kind is int else (lambda v: f"{v:g}")  # 4294967295, not 4.29e+09
        bounds = []
        if self.low is not None:
            bounds.append(f"{'>' if self.low_open else '>='} {shown(self.low)}")
        if self.high is not None:
            bounds.append(f"{'<' if self.high_open else '<='} {shown(self.high)}")
        return f"{noun} {' and '.join(bounds)}" if bounds else f"{noun}"

    def __call__(self, text: str) -> int | float:
        try:
            value = self.kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {self.describe()}, got {text!r}") from None
        too_low = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        too_high = self.high is not None and (value >= self.high if self.high_open else value > self.high)
        if too_low or too_high or (self.kind is float and not math.isfinite(value)):
            raise argparse.ArgumentTypeError(f"must be {self.describe()}, got {text!r}")
        return value


positive_int = Bounded(int, low=1, name="positive_int")
non_negative_int = Bounded(int, low=0, name="non_negative_int")
positive_float = Bounded(float, low=0, low_open=True, name="positive_float")
non_negative_float = Bounded(float, low=0, name="non_negative_float")
finite_float = Bounded(float, name="finite_float")
port_number = Bounded(int, low=1, high=65535, name="port_number")
fraction_below_one = Bounded(float, low=0, high=1, high_open=True, name="fraction_below_one")  # 0 <= x < 1

# Flags whose value sizes an allocation (pixels, channels, network widths, images in memory at once) have
# an upper bound too, so that a mistyped number is refused when parsed instead of asking for terabytes.
# Each bound is far above any run that fits in a GPU's memory (docs/training_tips.md, "Ranges of the flags
# that size memory"; tests/test_flag_ranges.py checks that every numeric flag has a range).
MAX_IMAGE_SIDE = 16384   # pixels: --load_size, --crop_size, --tile, --display_winsize, export check sizes
MAX_CHANNELS = 1024      # --input_nc, --output_nc (hyperspectral images have a few hundred bands)
MAX_WIDTH = 4096         # filters of a network's first layer: --ngf, --ndf, --nef, --netF_nc
MAX_BATCH = 4096         # images at once: --batch_size (per process)
MAX_SAMPLES = 1000       # answers per input: --n_samples
MAX_SEED = 2 ** 32 - 1   # NumPy's seeds
image_side = Bounded(int, low=1, high=MAX_IMAGE_SIDE, name="image_side")
# The optimisers hold a step's rate in the weights' float32 (TrainOptions.check_first_step).
FLOAT32_MAX = 3.4028234663852886e38
channel_count = Bounded(int, low=1, high=MAX_CHANNELS, name="channel_count")
network_width = Bounded(int, low=1, high=MAX_WIDTH, name="network_width")
batch_size = Bounded(int, low=1, high=MAX_BATCH, name="batch_size")
sample_count = Bounded(int, low=1, high=MAX_SAMPLES, name="sample_count")
seed_value = Bounded(int, low=0, high=MAX_SEED, name="seed_value")
tile_side = Bounded(int, low=0, high=MAX_IMAGE_SIDE, name="tile_side")  # --tile, --tile_overlap (0: none)

def hw_sizes(text: str) -> list[tuple[int, int]]:
    """An argparse `type` for image sizes: "256x256,200x312" -> [(256, 256), (200, 312)], height x width,
    each at least 1; a size written as one number is refused rather than guessed to be a square."""
    sizes = []
    for part in text.split(","):
        sides = part.strip().lower().split("x")
        if len(sides) != 2 or not all(side.strip().isdigit() and 1 <= int(side) <= MAX_IMAGE_SIDE for side in sides):
            raise argparse.ArgumentTypeError(f"expected sizes HEIGHTxWIDTH (whole numbers from 1 to {MAX_IMAGE_SIDE}) "
                                             f"separated by commas, e.g. 256x256,200x312; got {text!r}"
                                             + (f" ({part.strip()!r} is not one)" if "," in text else ""))
        sizes.append((int(sides[0]), int(sides[1])))
    return sizes


def comma_choices(*choices: str) -> Callable[[str], list[str]]:
    """An argparse `type` for a comma-separated selection among `choices`: "a, b" -> ["a", "b"]."""
    def parse(text: str) -> list[str]:
        picked = [item.strip() for item in text.split(",") if item.strip()]
        unknown = [item for item in picked if item not in choices]
        if unknown or not picked:
            raise argparse.ArgumentTypeError(f"choose one or more of {', '.join(choices)}, separated by commas, "
                                             f"got {text!r}")
        return picked
    parse.__name__ = "comma_choices"
    return parse


# Names the reference's README gives for DDP (`--norm sync_batch`, `--norm sync_instance`) that its
# code never accepted. Instance norm has no statistics across images to synchronise: under DDP it
# already equals one process, so sync_instance is plain instance norm.
NORM_ALIASES = {"sync_batch": "syncbatch", "sync_instance": "instance"}


def norm_name(text: str) -> str:
    """An argparse `type` for --norm: the reference README's spellings mapped to ours."""
    return NORM_ALIASES.get(text, text)


# UNSB's README writes the direction as B2A (its code reads it as BtoA).
DIRECTION_ALIASES = {"A2B": "AtoB", "B2A": "BtoA"}


def direction_name(text: str) -> str:
    """An argparse `type` for --direction: UNSB's A2B and B2A mapped to ours (AtoB, BtoA)."""
    return DIRECTION_ALIASES.get(text, text)


def str2bool(text: str) -> bool:
    """argparse `type` of CUT's and UNSB's boolean flags, which take an optional value: `--nce_idt`,
    `--nce_idt False`."""
    lowered = text.lower()
    if lowered in ("yes", "true", "t", "y", "1"):
        return True
    if lowered in ("no", "false", "f", "n", "0"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


class OneParagraphParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one paragraph, "error: argument --flag: ...", exit 2.

    argparse's own form (a usage line listing every flag, then the error) is dozens of lines
    here; the one paragraph matches the errors raised later (util/errors.py). Under torchrun
    every rank parses the same command line, so only rank 0 speaks. A flag is recognised by its
    whole name only (`allow_abbrev=False`): an abbreviation would change meaning whenever a flag
    that shares its beginning is added (UNSB's --mode read as --model).
    """

    def __init__(self, *args: Any, allow_abbrev: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, allow_abbrev=allow_abbrev, **kwargs)

    def add_argument_group(self, *args: Any, **kwargs: Any) -> Any:
        """argparse's `add_argument_group`, whose `add_argument` takes `on_resume` too, so that a flag
        declared once (e.g. `add_tile_flags`) goes into a parser or a group alike."""
        group = super().add_argument_group(*args, **kwargs)
        add_to_group = group.add_argument

        def add_argument(*names: Any, on_resume: Any = None, **options: Any) -> argparse.Action:
            resume_class = checked_class(on_resume)
            action = add_to_group(*names, **options)
            action.on_resume = resume_class
            return action
        group.add_argument = add_argument
        return group

    def add_argument(self, *args: Any, on_resume: Any = None, **kwargs: Any) -> argparse.Action:
        """argparse's `add_argument`, plus `on_resume`: what a change of this flag does when a run is
        continued ("architecture", "refused", "reapplied", "noted", ignored(why), "silent"; see
        util/resume_flags.py), kept on the action. Left out, the flag is honoured with a note."""
        resume_class = checked_class(on_resume)  # a misspelt class fails here, where it is declared
        action = super().add_argument(*args, **kwargs)
        action.on_resume = resume_class
        return action

    def resume_classes(self) -> dict[str, ResumeClass]:
        """Each declared flag's class by its destination (`opt.<dest>`), in declaration order. Flags
        sharing a destination (CUT's --normG is --norm) must declare the same class (ValueError)."""
        classes: dict[str, ResumeClass] = {}
        for action in self._actions:
            declared = getattr(action, "on_resume", None)
            if declared is None or action.dest == argparse.SUPPRESS:
                continue
            if classes.setdefault(action.dest, declared) != declared:
                raise ValueError(f"{'/'.join(action.option_strings)} declares on_resume={declared!r}, but another "
                                 f"flag of destination {action.dest!r} declared {classes[action.dest]!r}")
        return classes

    def error(self, message: str) -> NoReturn:
        if _reports_errors():
            paragraph = f"error: {' '.join(message.split()).rstrip('.')}. `python {self.prog} --help` lists every flag."
            print(paragraph, file=sys.stderr, flush=True)  # user-facing: the one-paragraph error the program exits with
        sys.exit(2)


def _reports_errors() -> bool:
    """Whether this process prints parse errors: rank 0 under torchrun; the only process where PyTorch
    is not installed (scripts/visdom_server.py needs only the standard library and visdom)."""
    try:
        from util import distributed
    except ImportError:
        return True
    return distributed.current_context().is_main
