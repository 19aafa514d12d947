"""Flags of the tools that run a trained generator, each declared here once and added by every
parser that takes it (same name, type, default, range and help):

    add_checkpoint_flags   --checkpoint, --epoch       scripts/translate.py, scripts/serve.py
    add_precision_flag     --precision                 scripts/translate.py, scripts/serve.py
    add_tile_flags         --tile, --tile_overlap      test.py (options/test_options.py), scripts/translate.py
    add_exact_flags        --exact_memory, --scratch, --whole_volumes   test.py, scripts/translate.py, scripts/serve.py

Flags shared with the layers below are declared there, where their facts live: the sliding-window
flags of volumes in data/volume_patches.py (`add_window_flags`), --data_range in
data/base_dataset.py (`add_data_range_flag`), --inception_weights in util/evaluation/inception.py
(`add_inception_weights_flag`). Each function takes a parser or an argument group (for --help's
headings) and returns it.
"""
from __future__ import annotations

import argparse
import os
from typing import TypeVar

from models.inference.exact import DEFAULT_EXACT_MEMORY, ExactBudget
from models.inference.translator import PRECISIONS
from util.flag_types import Bounded, tile_side

memory_mib = Bounded(int, low=0, high=1 << 20, name="memory_mib")  # --exact_memory: up to 1 TiB

Container = TypeVar("Container")  # an ArgumentParser, or one of its argument groups


def add_checkpoint_flags(parser: Container) -> Container:
    """--checkpoint (a run folder or a weights file) and --epoch (which weights of a run folder)."""
    parser.add_argument("--checkpoint", required=True, on_resume="silent",
                        help="a run folder (checkpoints/<name>) or a <epoch>_net_<name>.pth file")
    parser.add_argument("--epoch", default="latest", on_resume="silent",
                        help="which <epoch>_net_<name>.pth of a run folder to load")
    return parser


def add_precision_flag(parser: Container) -> Container:
    """--precision: what the generator computes in."""
    parser.add_argument("--precision", default="fp32", choices=sorted(PRECISIONS), on_resume="silent",
                        help="fp32, or bf16/fp16 autocast (fp16: CUDA only)")
    return parser


def add_tile_flags(parser: Container) -> Container:
    """--tile and --tile_overlap: large and non-square pictures translated in blended tiles
    (models/inference/application.py, docs/evaluation.md)."""
    parser.add_argument("--tile", type=tile_side, default=0, on_resume="silent",
                        help="translate images larger than this in overlapping TILE x TILE tiles blended without "
                             "seams (bounds memory); 0: whole images")
    parser.add_argument("--tile_overlap", type=tile_side, default=64, on_resume="silent",
                        help="pixels by which neighbouring tiles overlap (with --tile); outputs equal whole-image "
                             "ones for batch-norm (--eval) or no-norm resnets when overlap/4 >= their receptive "
                             "radius")
    return parser


def add_exact_flags(parser: Container) -> Container:
    """--exact_memory and --scratch: pictures translated exactly whatever their size (models/inference/exact/)."""
    parser.add_argument("--exact_memory", type=memory_mib, default=DEFAULT_EXACT_MEMORY >> 20, on_resume="silent",
                        help="MiB of memory a picture's translation may take without --tile: a picture whose whole "
                             "forward needs more is translated layer by layer in tiles, with every normalisation's "
                             "statistics taken over the whole picture, so the output equals the whole-picture one; "
                             "0: no limit (always whole)")
    parser.add_argument("--scratch", type=scratch_folder, default=None, on_resume="silent",
                        help="folder for the maps of exact translation that do not fit --exact_memory (default: "
                             "the system's temporary folder)")
    parser.add_argument("--whole_volumes", action="store_true", on_resume="silent",
                        help="volume runs: translate each volume whole and exactly (3-D norms over the whole volume, "
                             "within --exact_memory) instead of in sliding windows of --patch_size")
    return parser


def scratch_folder(text: str) -> str:
    """--scratch: an existing folder this user can write to (its files are made as exact translation needs them)."""
    if not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text} is not a folder; give an existing folder with room for the maps "
                                         f"that exceed --exact_memory, or leave --scratch out (the system's "
                                         f"temporary folder)")
    if not os.access(text, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"{text} is not writable by this user; give a folder you can write to")
    return text


def exact_budget(flags: object) -> ExactBudget | None:
    """The ExactBudget of --exact_memory and --scratch; None where --exact_memory is 0 (no limit)."""
    memory = getattr(flags, "exact_memory")
    return ExactBudget(memory << 20, getattr(flags, "scratch")) if memory else None
