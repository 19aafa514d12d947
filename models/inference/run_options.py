"""What a run trained with, as far as inference needs it: the options file its train.py wrote beside the weights.

train.py writes `<phase>_opt.json` (every option) and `<phase>_opt.txt`; the reference's, CUT's and UNSB's
train.py write only the text file, in the format of their `print_options` (our train.py's text file has it
too). Inference (models/inference/saved_generator.py) reads from it the options of `TRAINED_OPTIONS`: a
float run's --data_range, a volume run's --patch_size, a Schrödinger-bridge run's --num_timesteps and
--tau. A text file is not trusted: each value is parsed by its flag's type, never evaluated, and one that
does not parse is refused in one paragraph naming the file and the line.
"""
from __future__ import annotations

import argparse
import glob
import os
from collections.abc import Callable
from typing import Any

from data.volume_patches import patch_size
from models.sb_model import NUM_TIMESTEPS
from util.errors import UserError
from util.flag_types import finite_float, non_negative_float
from util.safe_files import read_json_object


def _number_list(kind: Callable[[str], Any]) -> Callable[[str], tuple | None]:
    """The text of a list flag as Python prints it ("[0.0, 1.0]", "(64, 64, 32)"; "None": not set), each
    number parsed by `kind`."""
    def parse(text: str) -> tuple | None:
        if text == "None":
            return None
        return tuple(kind(part.strip()) for part in text.strip("[]()").split(","))
    return parse


def _saved_patch_size(text: str) -> tuple[int, ...] | None:
    """--patch_size as train_opt.txt prints it ("(64, 64, 32)"; "None": not set), parsed by the flag's type."""
    return None if text == "None" else patch_size(text.strip("[]()").replace(" ", ""))


# The options of a run that inference reads from its options file (Translator.load's keywords of the
# same names replace them), each with what parses its text in a train_opt.txt: the type of its flag.
TRAINED_OPTIONS: dict[str, Callable[[str], Any]] = {"data_range": _number_list(finite_float),
                                                    "patch_size": _saved_patch_size,
                                                    "num_timesteps": NUM_TIMESTEPS, "tau": non_negative_float}
# Where the options are looked for, in this order: train.py's, then those of the reference's, CUT's and UNSB's
# train.py, then any other phase's (the newest; e.g. test.py's, written at test time with its own flags).
OPTIONS_FILES = ("train_opt.json", "train_opt.txt")
# The rulers around the options in the text file every print_options writes (the reference's, CUT's, UNSB's, ours).
_TEXT_BEGIN, _TEXT_END = "----------------- Options ---------------", "----------------- End -------------------"


def find_options_file(folder: str) -> str | None:
    """The file of `folder` that says what its run trained with (OPTIONS_FILES, else the newest other
    `<phase>_opt.json` or, without one, `<phase>_opt.txt`); None when there is none."""
    for name in OPTIONS_FILES:
        if os.path.isfile(os.path.join(folder, name)):
            return os.path.join(folder, name)
    for pattern in ("*_opt.json", "*_opt.txt"):
        others = glob.glob(os.path.join(glob.escape(folder), pattern))
        if others:
            return max(others, key=os.path.getmtime)
    return None


def read_options_file(path: str) -> dict:
    """The options in `path`: a JSON object (train.py's `<phase>_opt.json`: all of them), or the options
    inference reads (`TRAINED_OPTIONS`) from a `<phase>_opt.txt` (`read_options_text`)."""
    advice = (f"Restore it, or delete it and pass what the run trained with yourself ({', '.join(TRAINED_OPTIONS)}), "
              f"if any.")
    if path.endswith(".json"):
        return read_json_object(path, advice)
    return read_options_text(path, advice)


def read_options_text(path: str, advice: str) -> dict:
    """The options of `TRAINED_OPTIONS` that the text file `path` holds, in the format of every
    `print_options` (the reference's, CUT's and UNSB's, and train.py's train_opt.txt): a line
    `<name>: <value>` for each option, followed by a tab and `[default: ...]` where it is not the default,
    between the rulers `_TEXT_BEGIN` and `_TEXT_END`. The text is not trusted: each value is parsed by its
    flag's type, never evaluated; a UserError names the file and the line of a value that does not parse,
    and the file (with `advice`) when it cannot be read or is not such a list."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"{path} cannot be read ({type(err).__name__}: {err}). {advice}") from None
    stripped = [line.strip() for line in lines]
    if _TEXT_BEGIN not in stripped or _TEXT_END not in stripped[stripped.index(_TEXT_BEGIN):]:
        raise UserError(f"{path} is not a list of options as train.py writes it (between the lines {_TEXT_BEGIN!r} "
                        f"and {_TEXT_END!r}). {advice}")
    begin = stripped.index(_TEXT_BEGIN)
    options, seen_at = {}, {}
    for number in range(begin + 2, begin + 1 + stripped[begin:].index(_TEXT_END)):  # 1-based line numbers
        name, colon, rest = lines[number - 1].partition(":")
        name = name.strip()
        if not colon or name not in TRAINED_OPTIONS:
            continue
        if name in seen_at:
            raise UserError(f"{path} gives {name} twice (lines {seen_at[name]} and {number}), so it does not say "
                            f"which the run trained with. {advice}")
        seen_at[name] = number
        text = rest.partition("\t[default:")[0].strip()
        try:
            value = TRAINED_OPTIONS[name](text)
        except (argparse.ArgumentTypeError, ValueError, TypeError) as err:
            shown = " ".join(lines[number - 1].split())  # the line, its padding and tab closed up
            raise UserError(f"{path}, line {number} (`{shown}`): the --{name} there is not one the flag takes "
                            f"({err}). Write the value the run trained with on that line, or delete the file and "
                            f"pass what the run trained with yourself ({', '.join(TRAINED_OPTIONS)}), "
                            f"if any.") from None
        if value is not None:
            options[name] = value
    return options


def read_trained_options(folder: str) -> dict:
    """The options train.py (or the reference's, CUT's or UNSB's) saved in `folder` (`find_options_file`),
    as a dict; {} when no options file is there."""
    path = find_options_file(folder)
    return read_options_file(path) if path else {}

