"""Corpus cases of tests/test_bad_input.py for --model cut (models/cut_model.py): CUT's own flags
with values out of range, and values that do not fit the generator, each one paragraph naming the
flag and the fix, exit status 2."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from bad_input_kit import Case, Setup, aligned, run_args

CUT = ["--model", "cut", "--dataset_mode", "aligned", "--netF_nc", "8", "--num_patches", "16"]


def cut_refused(*flags: str, names: tuple = ()) -> Callable[[Path], Setup]:
    """A valid tiny CUT run except `flags`; the refusal must name the flag (and `names`)."""
    def build(work: Path) -> Setup:
        aligned(work / "data" / "train", 2)
        return Setup(run_args(work, *CUT, *flags), stderr_has=(flags[0], *names))
    return build


def cut_case(*flags: str, names: tuple = (), parse_only: bool = True) -> Case:
    return Case(f"--model cut {' '.join(flags)} is refused naming {flags[0]}", cut_refused(*flags, names=names), 2,
                parse_only=parse_only)


CUT_CASES = [
    cut_case("--CUT_mode", "SinCUT", names=("FastCUT",)),
    cut_case("--nce_layers", "0,four", names=("0,4,8,12,16",)),
    cut_case("--nce_layers", "4,4", names=("distinct",)),
    cut_case("--num_patches", "0"),
    cut_case("--nce_T", "0"),
    cut_case("--netF", "global_pool", names=("mlp_sample",)),
    cut_case("--nce_idt", "maybe", names=("true or false",)),
    cut_case("--normD", "group", names=("instance",)),
    cut_case("--nce_layers", "0,4,40", names=("layers 0 to 31",)),  # the generator has no such layer
    # refused by the model, after parsing: the generator has no layers to read
    cut_case("--netG", "unet_256", "--crop_size", "256", "--load_size", "256", names=("resnet_9blocks",),
             parse_only=False),
]
