"""Turn a paired dataset in the CycleGAN layout into the aligned layout pix2pix trains on.

    python scripts/make_dataset_aligned.py --dataset-path datasets/mydata

As the reference's datasets/make_dataset_aligned.py: for every split with both <split>A/ and
<split>B/ folders (train, val, test, ...), each A image and its B partner are written side by side
to <split>/ in the same dataset folder, A on the left. The result is read by
`--dataset_mode aligned` (the pix2pix default).

Partners are found by file name (a.png in trainA with a.png or a.jpg in trainB); files without a
partner or pairs of different sizes stop the script with exit status 2, naming them. The reference
paired the sorted lists by position instead; `--pair_by order` does that (the counts must agree).
Output images keep A's file name and format. Every image is decoded whole before anything is
written (a file cut short after its header is named), and a split whose output folder would be, lie
inside or contain an input folder (folders named A and B: split "") is refused.
"""
from __future__ import annotations

import os
import sys

from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from data.image_folder import is_image_file  # noqa: E402
from data.image_io import decoded_size  # noqa: E402
from util.console import setup_logging  # noqa: E402
from util.errors import UserError, exit_with_status, exits_on_user_error  # noqa: E402
from util.flag_types import OneParagraphParser  # noqa: E402
from util.safe_files import atomic_write, refuse_output_over_inputs  # noqa: E402

SHOWN = 5


def get_file_paths(folder: str) -> list[str]:
    """Image files directly in `folder`, sorted by name."""
    return sorted(os.path.join(folder, n) for n in os.listdir(folder) if is_image_file(n))


def _stem(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0]


def pair_files(a_paths: list[str], b_paths: list[str], by: str = "name") -> list[tuple[str, str]]:
    """(A, B) pairs; UserError naming the files without a partner (by name) or the counts (by order)."""
    if by == "order":
        if len(a_paths) != len(b_paths):
            a_folder = os.path.dirname(a_paths[0]) if a_paths else "A"
            b_folder = os.path.dirname(b_paths[0]) if b_paths else "B"
            raise UserError(f"--pair_by order needs as many A as B images, but {a_folder} "
                            f"has {len(a_paths)} and {b_folder} has {len(b_paths)}.")
        return list(zip(a_paths, b_paths))
    b_by_stem = {_stem(p): p for p in b_paths}
    pairs, unmatched = [], []
    for a in a_paths:
        b = b_by_stem.pop(_stem(a), None)
        if b is None:
            unmatched.append(a)
        else:
            pairs.append((a, b))
    unmatched += sorted(b_by_stem.values())
    if unmatched:
        more = f" and {len(unmatched) - SHOWN} more" if len(unmatched) > SHOWN else ""
        raise UserError(f"{len(unmatched)} image(s) have no partner with the same name (ignoring the extension) in "
                        f"the other folder: {', '.join(unmatched[:SHOWN])}{more}. Rename or remove them, or pass "
                        f"--pair_by order to pair the sorted lists by position as the reference did.")
    return pairs


def check_sizes(pairs: list[tuple[str, str]]) -> None:
    """UserError naming the pairs whose images differ in size, or the first image that cannot be decoded."""
    problems = []
    for a, b in pairs:
        size_a, size_b = decoded_size(a), decoded_size(b)
        if size_a != size_b:
            problems.append(f"{a} ({size_a[0]}x{size_a[1]}) vs {b} ({size_b[0]}x{size_b[1]})")
    if problems:
        raise UserError(f"{len(problems)} pair(s) differ in size: {', '.join(problems[:SHOWN])}. A and B of a pair "
                        f"must have the same width and height.")


def align_images(pairs: list[tuple[str, str]], target_path: str) -> int:
    """Write each (A, B) side by side into `target_path` (call `check_sizes` first)."""
    os.makedirs(target_path, exist_ok=True)
    for a, b in pairs:
        with Image.open(a) as img_a, Image.open(b) as img_b:
            img_a, img_b = img_a.convert("RGB"), img_b.convert("RGB")
            aligned = Image.new("RGB", (img_a.width * 2, img_a.height))
            aligned.paste(img_a, (0, 0))
            aligned.paste(img_b, (img_a.width, 0))
        out = os.path.join(target_path, os.path.basename(a))
        image_format = Image.registered_extensions().get(os.path.splitext(out)[1].lower(), "PNG")
        extra = {"quality": 95} if image_format == "JPEG" else {}
        atomic_write(out, lambda f: aligned.save(f, format=image_format, **extra))  # never half an image
    return len(pairs)


@exits_on_user_error()
def main(argv: list[str] | None = None) -> int:
    setup_logging()
    parser = OneParagraphParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset-path", "--dataset_path", dest="dataset_path", required=True,
                        help="folder with <split>A and <split>B subfolders (trainA, trainB, testA, testB, ...)")
    parser.add_argument("--pair_by", choices=["name", "order"], default="name",
                        help="name: partners share a file name; order: the sorted lists are paired by position")
    args = parser.parse_args(argv)
    root = args.dataset_path
    if not os.path.isdir(root):
        raise UserError(f"--dataset-path {root} is not a folder.")
    splits = sorted(d[:-1] for d in os.listdir(root) if d.endswith("A") and os.path.isdir(os.path.join(root, d)))
    if not splits:
        raise UserError(f"--dataset-path {root} has no <split>A folders (e.g. trainA and trainB, testA and testB).")
    inputs = [(f"{split}{side}/", os.path.join(root, split + side)) for split in splits for side in "AB"]
    for split in splits:  # <split>/ is written beside <split>A/ and <split>B/, never over or around them
        refuse_output_over_inputs(os.path.join(root, split), f"the output folder {os.path.join(root, split)}", inputs,
                                  "Name the split folders <split>A and <split>B, e.g. trainA and trainB, so that the "
                                  "aligned images go to <split>/ beside them.")
    jobs = []
    for split in splits:
        b_dir = os.path.join(root, split + "B")
        if not os.path.isdir(b_dir):
            raise UserError(f"{os.path.join(root, split + 'A')} has no partner folder {b_dir}.")
        pairs = pair_files(get_file_paths(os.path.join(root, split + "A")), get_file_paths(b_dir), args.pair_by)
        check_sizes(pairs)
        jobs.append((split, pairs))
    for split, pairs in jobs:  # every split is paired before anything is written
        count = align_images(pairs, os.path.join(root, split))
        print(f"{split}: {count} aligned images in {os.path.join(root, split)}")
    return 0


if __name__ == "__main__":
    exit_with_status(main())
