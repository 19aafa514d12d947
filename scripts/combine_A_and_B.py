"""Combine paired A and B images into the aligned A|B images that pix2pix trains on.

    python scripts/combine_A_and_B.py --fold_A /path/A --fold_B /path/B --fold_AB /path/AB

As the reference's datasets/combine_A_and_B.py: fold_A and fold_B have the same split subfolders
(e.g. train, val, test) holding images with the same file names; fold_AB/<split>/<name> gets A on
the left and B on the right. With --use_AB, A and B live in one folder as name_A.ext / name_B.ext
and the result is name.ext. Images are combined in parallel processes (--no_multiprocessing for
one process).

Unlike the reference, nothing is silently dropped: an A image without its B partner (or a B image
without its A), or a pair of different sizes, stops the script before anything is written, with
exit status 2 and the offending files named (--skip_unmatched combines the matched pairs and lists
the others). A --fold_AB whose split folders would be, lie inside or contain --fold_A or --fold_B
(e.g. --fold_AB equal to --fold_A, which would replace its images by the pairs) is refused before
anything is written, and so is an image whose pixels cannot all be decoded (cut short after its
header), named.
"""
from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import sys

from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from data.image_folder import is_image_file  # noqa: E402
from data.image_io import decoded_size  # noqa: E402
from util.console import setup_logging  # noqa: E402
from util.errors import UserError, exit_with_status, exits_on_user_error  # noqa: E402
from util.flag_types import OneParagraphParser, positive_int  # noqa: E402
from util.paths import unwritable_folder_reason  # noqa: E402
from util.safe_files import refuse_output_over_inputs  # noqa: E402

logger = logging.getLogger(__name__)

SHOWN = 5  # files named in one error message


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = OneParagraphParser(description="create image pairs",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--fold_A", dest="fold_A", help="input directory for image A", type=str,
                        default="../dataset/50kshoes_edges")
    parser.add_argument("--fold_B", dest="fold_B", help="input directory for image B", type=str,
                        default="../dataset/50kshoes_jpg")
    parser.add_argument("--fold_AB", dest="fold_AB", help="output directory", type=str, default="../dataset/test_AB")
    parser.add_argument("--num_imgs", dest="num_imgs", help="number of images per split", type=positive_int,
                        default=1000000)
    parser.add_argument("--use_AB", dest="use_AB", help="if true: (0001_A, 0001_B) to (0001_AB)", action="store_true")
    parser.add_argument("--no_multiprocessing", dest="no_multiprocessing", help="if true: single process",
                        action="store_true")
    parser.add_argument("--skip_unmatched", action="store_true",
                        help="combine the matched pairs and only list unmatched files")
    args = parser.parse_args(argv)
    reason = unwritable_folder_reason(args.fold_AB)
    if reason:  # refused before any image is read
        parser.error(f"argument --fold_AB: cannot write the pairs into {args.fold_AB} ({reason}); choose another "
                     f"--fold_AB")
    return args


def apart_from(folder: str) -> str:
    """A folder beside `folder` (its name + "_AB"), for the error's example."""
    return os.path.normpath(folder) + "_AB"


def _listing(paths: list[str]) -> str:
    more = f" and {len(paths) - SHOWN} more" if len(paths) > SHOWN else ""
    return ", ".join(paths[:SHOWN]) + more


def _pairs_in_split(args: argparse.Namespace, split: str) -> tuple[list[tuple[str, str, str]], list[str]]:
    """(A path, B path, AB path) of one split, and the files that have no partner."""
    dir_A, dir_B, dir_AB = (os.path.join(f, split) for f in (args.fold_A, args.fold_B, args.fold_AB))
    names_A = sorted(n for n in os.listdir(dir_A) if is_image_file(n))
    if args.use_AB:
        names_A = [n for n in names_A if "_A." in n]
    truncated = len(names_A) > args.num_imgs
    names_A = names_A[:args.num_imgs]
    if not os.path.isdir(dir_B):
        raise UserError(f"{dir_A} has no counterpart {dir_B}: --fold_B must have the same split folders as "
                        f"--fold_A ({split}).")
    names_B = {n for n in os.listdir(dir_B) if is_image_file(n) and (not args.use_AB or "_B." in n)}
    pairs, unmatched = [], []
    for name_A in names_A:
        name_B = name_A.replace("_A.", "_B.") if args.use_AB else name_A
        name_AB = name_A.replace("_A.", ".") if args.use_AB else name_A
        if name_B in names_B:
            pairs.append((os.path.join(dir_A, name_A), os.path.join(dir_B, name_B), os.path.join(dir_AB, name_AB)))
            names_B.discard(name_B)
        else:
            unmatched.append(os.path.join(dir_A, name_A))
    if not truncated:  # B images left over are unmatched too (with --num_imgs cutting A, they are expected)
        unmatched += [os.path.join(dir_B, n) for n in sorted(names_B)]
    return pairs, unmatched


def plan(args: argparse.Namespace) -> tuple[list[tuple[str, str, str]], list[str]]:
    """Every (A, B, AB) triple to write and the unmatched files; raises UserError for folders that
    are missing, have no splits, pairs whose sizes differ or images that cannot be decoded whole (each is
    decoded, before any image is written)."""
    for flag, folder in (("--fold_A", args.fold_A), ("--fold_B", args.fold_B)):
        if not os.path.isdir(folder):
            raise UserError(f"{flag} {folder} is not a folder; it must hold split folders such as train/ and test/.")
    splits = sorted(d for d in os.listdir(args.fold_A) if os.path.isdir(os.path.join(args.fold_A, d)))
    if not splits:
        raise UserError(f"--fold_A {args.fold_A} has no split folders; put the A images in {args.fold_A}/train/ "
                        f"(and val/, test/) and the B images with the same names in {args.fold_B}/train/, ...")
    read = [(f"{flag}'s split", os.path.join(folder, split)) for split in splits
            for flag, folder in (("--fold_A", args.fold_A), ("--fold_B", args.fold_B))]
    read += [("--fold_A", args.fold_A), ("--fold_B", args.fold_B)]
    for split in splits:  # what is written, fold_AB/<split>, must be apart from what is read
        refuse_output_over_inputs(os.path.join(args.fold_AB, split), f"--fold_AB {args.fold_AB} (its {split}/)", read,
                                  f"Pass a --fold_AB apart from both, e.g. --fold_AB {apart_from(args.fold_A)} (or, "
                                  f"as the reference's layout has it, --fold_A D/A --fold_B D/B --fold_AB D).")
    pairs, unmatched = [], []
    for split in splits:
        split_pairs, split_unmatched = _pairs_in_split(args, split)
        pairs += split_pairs
        unmatched += split_unmatched
    if unmatched and not args.skip_unmatched:
        raise UserError(f"{len(unmatched)} image(s) have no partner of the same name in the other folder: "
                        f"{_listing(unmatched)}. A and B images are paired by file name"
                        f"{' (name_A.ext with name_B.ext)' if args.use_AB else ''}; rename or remove them, or "
                        f"pass --skip_unmatched to combine only the matched pairs.")
    mismatched = []
    for path_A, path_B, _ in pairs:
        (wa, ha), (wb, hb) = decoded_size(path_A), decoded_size(path_B)
        if (wa, ha) != (wb, hb):
            mismatched.append(f"{path_A} ({wa}x{ha}) vs {path_B} ({wb}x{hb})")
    if mismatched:
        raise UserError(f"{len(mismatched)} pair(s) differ in size: {_listing(mismatched)}. A and B of a pair must "
                        f"have the same width and height; resize one of them.")
    if not pairs:
        raise UserError(f"no image pairs found in {args.fold_A} and {args.fold_B}.")
    return pairs, unmatched


def image_write(path_A: str, path_B: str, path_AB: str) -> None:
    """Write A and B side by side as `path_AB` (gray pairs stay gray, anything else becomes RGB)."""
    with Image.open(path_A) as im_A, Image.open(path_B) as im_B:
        mode = "L" if im_A.mode == im_B.mode == "L" else "RGB"
        im_A, im_B = im_A.convert(mode), im_B.convert(mode)
        combined = Image.new(mode, (im_A.width + im_B.width, im_A.height))
        combined.paste(im_A, (0, 0))
        combined.paste(im_B, (im_A.width, 0))
    tmp = path_AB + ".tmp" + os.path.splitext(path_AB)[1]
    combined.save(tmp, quality=95) if path_AB.lower().endswith((".jpg", ".jpeg")) else combined.save(tmp)
    os.replace(tmp, path_AB)  # an interrupted run leaves no half-written image


def _write_one(triple: tuple[str, str, str]) -> None:
    image_write(*triple)


@exits_on_user_error()
def main(argv: list[str] | None = None) -> int:
    setup_logging()
    args = parse_args(argv)
    for arg in vars(args):
        print(f"[{arg}] = ", getattr(args, arg))
    pairs, unmatched = plan(args)
    if unmatched:
        logger.warning(f"skipped {len(unmatched)} unmatched image(s): {_listing(unmatched)}")
    for folder in sorted({os.path.dirname(ab) for _, _, ab in pairs}):
        os.makedirs(folder, exist_ok=True)
    if args.no_multiprocessing or len(pairs) < 8:
        for triple in pairs:
            _write_one(triple)
    else:
        with multiprocessing.Pool(min(len(pairs) // 4 + 1, os.cpu_count() or 1)) as pool:
            pool.map(_write_one, pairs, chunksize=16)
    print(f"wrote {len(pairs)} aligned images to {args.fold_AB}")
    return 0


if __name__ == "__main__":
    exit_with_status(main())
