"""Split a folder of images into train/val/test folders, reproducibly.

    # aligned A|B images -> datasets/mydata/{train,val,test}/ (pix2pix layout)
    python scripts/split_dataset.py --source all_AB/ --dest datasets/mydata --ratios 0.8,0.1,0.1
    # one CycleGAN domain -> datasets/h2z/{trainA,valA,testA}/
    python scripts/split_dataset.py --source horses/ --dest datasets/h2z --domain A --ratios 0.9,0,0.1

The images are sorted by name and shuffled with --seed, so the same folder and seed always give
the same split, and two folders holding the same file names (e.g. the A and B halves of paired
data, before combine_A_and_B.py) are split identically. Counts are the ratios times the number of
images, rounded so that they add up and every split with a ratio above 0 gets at least one image.
Files are copied (--mode copy), moved (move) or symlinked (symlink); a destination split folder
that already holds images is refused (exit status 2) so that two splits never mix, and so is a split
folder that is, lies inside or contains --source.
"""
from __future__ import annotations

import argparse
import math
import os
import random
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from data.image_folder import is_image_file  # noqa: E402
from util.console import setup_logging  # noqa: E402
from util.errors import UserError, exit_with_status, exits_on_user_error  # noqa: E402
from util.flag_types import OneParagraphParser, seed_value  # noqa: E402
from util.paths import unwritable_folder_reason  # noqa: E402
from util.safe_files import refuse_output_over_inputs  # noqa: E402


def split_counts(total: int, ratios: list[float]) -> list[int]:
    """Image counts per split: largest-remainder rounding of total * ratio, at least 1 where the
    ratio is positive (taken from the largest split), summing to `total`."""
    raw = [total * r for r in ratios]
    counts = [math.floor(x) for x in raw]
    order = sorted(range(len(ratios)), key=lambda i: raw[i] - counts[i], reverse=True)
    for i in order[:total - sum(counts)]:
        counts[i] += 1
    for i, ratio in enumerate(ratios):
        if ratio > 0 and counts[i] == 0:
            donor = max(range(len(counts)), key=lambda j: counts[j])
            if counts[donor] > 1:
                counts[donor] -= 1
                counts[i] += 1
    return counts


def assign(names: list[str], ratios: list[float], seed: int) -> list[list[str]]:
    """The names of each split: sorted, shuffled with `seed`, cut by `split_counts`."""
    order = sorted(names)
    random.Random(seed).shuffle(order)
    groups, start = [], 0
    for count in split_counts(len(order), ratios):
        groups.append(sorted(order[start:start + count]))
        start += count
    return groups


def parse_ratios(text: str, splits: list[str]) -> list[float]:
    try:
        ratios = [float(r) for r in text.split(",")]
    except ValueError:
        raise UserError(f"--ratios {text} is not a comma-separated list of numbers; use e.g. 0.8,0.1,0.1.") from None
    if len(ratios) != len(splits) or not all(0 <= r <= 1 for r in ratios) or abs(sum(ratios) - 1.0) > 1e-6:
        raise UserError(f"--ratios {text} must be {len(splits)} non-negative numbers (for --splits "
                        f"{','.join(splits)}) that add up to 1, e.g. 0.8,0.1,0.1.")
    return ratios


@exits_on_user_error()
def main(argv: list[str] | None = None) -> int:
    setup_logging()
    parser = OneParagraphParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--source", required=True, help="folder of images to split")
    parser.add_argument("--dest", required=True, help="dataset folder that receives the split folders")
    parser.add_argument("--ratios", default="0.8,0.1,0.1", help="fractions of the images per split")
    parser.add_argument("--splits", default="train,val,test", help="names of the split folders")
    parser.add_argument("--domain", default="", help="appended to each split folder: A gives trainA, valA, testA")
    parser.add_argument("--seed", type=seed_value, default=0, help="seed of the shuffle")
    parser.add_argument("--mode", choices=["copy", "move", "symlink"], default="copy", help="how files get there")
    args = parser.parse_args(argv)
    splits = [s.strip() for s in args.splits.split(",") if s.strip()]
    names_apart = {split + args.domain for split in splits}
    if len(names_apart) < len(splits) or any(os.sep in name or name in (".", "..") for name in names_apart):
        raise UserError(f"--splits {args.splits} with --domain {args.domain!r} must name {len(splits)} different "
                        f"folders, each a plain name (no {os.sep}, . or ..), e.g. --splits train,val,test --domain A.")
    ratios = parse_ratios(args.ratios, splits)
    if not os.path.isdir(args.source):
        raise UserError(f"--source {args.source} is not a folder of images.")
    names = [n for n in os.listdir(args.source) if is_image_file(n) and os.path.isfile(os.path.join(args.source, n))]
    needed = sum(r > 0 for r in ratios)
    if len(names) < needed:
        raise UserError(f"--source {args.source} has {len(names)} image(s), fewer than the {needed} splits with a "
                        f"ratio above 0; add images or set some --ratios to 0.")
    folders = [os.path.join(args.dest, split + args.domain) for split in splits]
    apart = os.path.normpath(args.source) + "_split"  # beside --source
    for folder in folders:  # a split folder that is, lies inside or holds --source would mix into what is read
        refuse_output_over_inputs(folder, f"--dest {args.dest} (its {os.path.basename(folder)}/)",
                                  (("--source", args.source),), f"Pass a --dest apart from it, e.g. --dest {apart}.")
    reason = unwritable_folder_reason(args.dest)
    if reason:
        raise UserError(f"--dest {args.dest} cannot receive the split folders ({reason}); choose another --dest.")
    for folder in folders:
        if os.path.isdir(folder) and any(is_image_file(n) for n in os.listdir(folder)):
            raise UserError(f"{folder} already holds images; splitting into it would mix two splits. Empty it or "
                            f"choose another --dest.")
    for folder, group in zip(folders, assign(names, ratios, args.seed)):
        if not group:
            continue
        os.makedirs(folder, exist_ok=True)
        for name in group:
            src, dst = os.path.join(args.source, name), os.path.join(folder, name)
            if args.mode == "copy":
                shutil.copy2(src, dst)
            elif args.mode == "move":
                shutil.move(src, dst)
            else:
                os.symlink(os.path.abspath(src), dst)
        print(f"{folder}: {len(group)} images")
    return 0


if __name__ == "__main__":
    exit_with_status(main())
