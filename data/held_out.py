"""The held-out split that validation during training scores (`--val_freq`): which split, and its
dataset read exactly as test.py would read it."""
from __future__ import annotations

import argparse

from data import DatasetLoader, create_dataset
from data.input_checks import check_dataset_root
from util.distributed import DistContext
from util.errors import UserError
from util.frozen_options import FrozenOptions

SPLITS = ("val", "test")  # looked for in this order when --val_phase is not given


def held_out_options(opt: argparse.Namespace, phase: str) -> FrozenOptions:
    """The options of a test.py run on `phase`: the training transforms without augmentation. test.py's
    flags that the data code reads are given here: every sample (validation caps them with --val_max_images),
    whole images (no --tile), no --center_crop."""
    changes = dict(isTrain=False, phase=phase, load_size=opt.crop_size, no_flip=True, serial_batches=True,
                   num_threads=0, max_dataset_size=float("inf"), num_test=None, tile=0, center_crop=False)
    values = {**{k: v for k, v in vars(opt).items() if not k.startswith("_")}, **changes}
    return FrozenOptions(**values).freeze()


def find_held_out_split(opt: argparse.Namespace, size_rule=None) -> str:
    """--val_phase, or the first of SPLITS the dataset has; a UserError naming what is missing."""
    candidates = [opt.val_phase] if opt.val_phase else list(SPLITS)
    problems = []
    for phase in candidates:
        try:
            check_dataset_root(held_out_options(opt, phase), size_rule)
            return phase
        except UserError as err:
            problems.append(str(err))
    asked = f"--val_phase {opt.val_phase}" if opt.val_phase else f"--val_freq {opt.val_freq}"
    raise UserError(f"{asked} needs held-out images in --dataroot {opt.dataroot}, but "
                    f"{' Also: '.join(problems)} Add a {' or '.join(candidates)} split (the same layout as "
                    f"--phase {opt.phase}), name another with --val_phase, or pass --val_freq 0.")


def create_held_out_dataset(opt: argparse.Namespace, ctx: DistContext, size_rule=None) -> DatasetLoader:
    """The held-out split's loader (at most --val_max_images images, each process its share)."""
    phase = find_held_out_split(opt, size_rule)
    return create_dataset(held_out_options(opt, phase), 0, ctx, limit=opt.val_max_images, size_rule=size_rule)
