"""Compute --data_range for float data: the smallest and largest value in a dataset's images.

    python scripts/data_range.py --dataroot datasets/mymaps                 # <phase>A/ and <phase>B/, or <phase>/
    python scripts/data_range.py --dataroot datasets/mymaps --phase train --per_domain

Reads every image of the training folders (train/, or trainA/ and trainB/; --dataroot itself if it has
neither) and prints the --data_range flag to pass to train.py and test.py: MIN MAX over all images, or with
--per_domain A_MIN A_MAX B_MIN B_MAX. Integer images (uint8/uint16) are mapped by their type's full range
and need no --data_range; they are counted all the same. NaN values are ignored. Use the same range for
training and testing (compute it on the training set).
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from data.image_folder import make_dataset  # noqa: E402
from data.image_io import read_image  # noqa: E402
from util.errors import exits_on_user_error, UserError  # noqa: E402
from util.flag_types import OneParagraphParser  # noqa: E402


def folders(root: str, phase: str) -> dict[str, str]:
    """{domain: folder} of the images to scan: A and B folders, the A|B folder (one domain) or the root."""
    split = {d: os.path.join(root, phase + d) for d in "AB" if os.path.isdir(os.path.join(root, phase + d))}
    if split:
        return split
    return {"AB": os.path.join(root, phase) if os.path.isdir(os.path.join(root, phase)) else root}


def value_range(paths: list[str]) -> tuple[float, float]:
    """(min, max) over the finite values of all images in `paths`; names the images holding others."""
    low, high = np.inf, -np.inf
    non_finite = []
    for path in paths:
        values = read_image(path)
        if values.dtype.kind == "f" and not np.isfinite(values).all():
            non_finite.append(path)
            values = values[np.isfinite(values)]
        if values.size:
            low, high = min(low, float(values.min())), max(high, float(values.max()))
    if not np.isfinite(low):
        raise UserError(f"no finite value in the {len(paths)} images starting with {paths[0]}.")
    if non_finite:  # train.py and test.py refuse these files: say so now
        print(f"note: {len(non_finite)} image(s) hold NaN or infinite values, e.g. {non_finite[0]}; they are left out "
              f"of the range, and train.py and test.py refuse them: replace those values first.")
    return low, high


@exits_on_user_error()
def main(argv: list[str] | None = None) -> int:
    parser = OneParagraphParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataroot", required=True, help="dataset folder (as for train.py)")
    parser.add_argument("--phase", default="train", help="which split to scan (default train)")
    parser.add_argument("--per_domain", action="store_true", help="print A_MIN A_MAX B_MIN B_MAX (one range per domain)")
    args = parser.parse_args(argv)
    ranges = {domain: value_range(make_dataset(folder)) for domain, folder in folders(args.dataroot, args.phase).items()}
    for domain, (low, high) in ranges.items():
        print(f"domain {domain}: min {low:.9g}, max {high:.9g}")
    if args.per_domain and len(ranges) == 2:
        flag = " ".join(f"{v:.9g}" for low_high in ranges.values() for v in low_high)
    else:
        flag = f"{min(r[0] for r in ranges.values()):.9g} {max(r[1] for r in ranges.values()):.9g}"
    print(f"--data_range {flag}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
