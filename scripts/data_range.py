"""Compute --data_range for float data: the smallest and largest value in a dataset's images (volumes: percentiles).

    python scripts/data_range.py --dataroot datasets/mymaps                 # <phase>A/ and <phase>B/, or <phase>/
    python scripts/data_range.py --dataroot datasets/mymaps --phase train --per_domain

Reads every image of the training folders (train/, or trainA/ and trainB/; --dataroot itself if it has
neither) and prints the --data_range flag to pass to train.py and test.py: MIN MAX over all images, or with
--per_domain A_MIN A_MAX B_MIN B_MAX. Integer images (uint8/uint16) are mapped by their type's full range
and need no --data_range; they are counted all the same. NaN values are ignored. Use the same range for
training and testing (compute it on the training set).

Volumes (.nii, .nii.gz; .npy with --volumes) need a window for every type of data, and their extremes are
mostly outliers (metal in a CT, a bright vessel in an MR), so for them it prints robust percentiles instead:
the values below which 0.5 % and 99.5 % of the voxels lie (estimated from up to 2 million voxels spread evenly
over each volume), from the folders the volume modes read (<phase>/A and <phase>/B, or <phase>A and <phase>B).
Where the two coincide (label or mask volumes, almost all background) it takes the smallest and largest value.
A domain whose every value is the same (blank files) has no range: exit status 2, naming its folder.
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from data.image_folder import make_dataset  # noqa: E402
from data.image_io import read_image  # noqa: E402
from data.volume_io import NIFTI_EXTENSIONS, list_volumes, read_volume  # noqa: E402
from data.volume_patches import split_folders  # noqa: E402
from util.console import setup_logging  # noqa: E402
from util.errors import UserError, exit_with_status, exits_on_user_error  # noqa: E402
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


VOLUME_PERCENTILES = (0.5, 99.5)
VOXELS_PER_VOLUME = 2_000_000  # evenly spaced voxels of each volume that the percentiles are estimated from


def volume_folders(root: str, phase: str) -> dict[str, str]:
    """{domain: folder} of the volumes to scan: those of the volume modes (see `split_folders`), else `folders`."""
    split = {d: folder for d, folder in zip("AB", split_folders(root, phase)) if os.path.isdir(folder)}
    return split or folders(root, phase)


def holds_nifti(folder: str) -> bool:
    return any(name.lower().endswith(NIFTI_EXTENSIONS) for _, _, files in os.walk(folder) for name in files)


def robust_range(paths: list[str]) -> tuple[float, float, str]:
    """The `VOLUME_PERCENTILES` of the voxels of all volumes in `paths` (each sampled evenly), and how they
    were found; where they coincide (label or mask volumes, almost all background) the smallest and largest
    sampled value instead, since a window of no width maps nothing."""
    samples = []
    for path in paths:
        values = read_volume(path, None).array.ravel()  # refuses NaN and infinite values, naming the file
        samples.append(values[::max(1, -(-values.size // VOXELS_PER_VOLUME))])
    voxels = np.concatenate(samples)
    low, high = (float(v) for v in np.percentile(voxels, VOLUME_PERCENTILES))
    if low < high:
        return low, high, (f"{VOLUME_PERCENTILES[0]:g} % of the voxels below {low:.6g}, {VOLUME_PERCENTILES[1]:g} % "
                           f"below {high:.6g}")
    share = 100 * float(np.mean(voxels == low))
    smallest, largest = float(voxels.min()), float(voxels.max())
    return smallest, largest, (f"{share:.4g} % of the voxels hold {low:.6g} (label or mask volumes?), so the range is "
                               f"the smallest and largest value, {smallest:.6g} and {largest:.6g}")


def refuse_constant(ranges: dict[str, tuple[float, float]], folders: dict[str, str]) -> None:
    """A UserError naming a domain whose every value is the same: it has no range (a --data_range of MIN = MAX,
    which train.py refuses) and nothing to translate."""
    constant = {domain: low for domain, (low, high) in ranges.items() if low >= high}
    if constant:
        domain, value = next(iter(constant.items()))
        raise UserError(f"every value read from {folders[domain]} is {value:.9g}: a constant domain has no range to "
                        f"map to the network's -1..1 (and nothing to translate), so no --data_range can be given for "
                        f"it. Check that --dataroot and --phase name the data (a folder of blank or all-background "
                        f"files?), and replace those files.")


@exits_on_user_error()
def main(argv: list[str] | None = None) -> int:
    setup_logging()
    parser = OneParagraphParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataroot", required=True, help="dataset folder (as for train.py)")
    parser.add_argument("--phase", default="train", help="which split to scan (default train)")
    parser.add_argument("--per_domain", action="store_true",
                        help="print A_MIN A_MAX B_MIN B_MAX (one range per domain)")
    parser.add_argument("--volumes", action="store_true",
                        help="the folders hold volumes (needed only for .npy volumes; .nii and .nii.gz are recognised)")
    args = parser.parse_args(argv)
    domains = volume_folders(args.dataroot, args.phase)
    volumes = args.volumes or any(holds_nifti(folder) for folder in domains.values())
    if volumes:
        found = {domain: robust_range(list_volumes(folder)) for domain, folder in domains.items()}
        ranges = {domain: (low, high) for domain, (low, high, _) in found.items()}
        for domain, (_, _, how) in found.items():
            print(f"domain {domain}: {how}")
    else:
        domains = folders(args.dataroot, args.phase)
        ranges = {domain: value_range(make_dataset(folder)) for domain, folder in domains.items()}
        for domain, (low, high) in ranges.items():
            print(f"domain {domain}: min {low:.9g}, max {high:.9g}")
    refuse_constant(ranges, domains)
    digits = ".6g" if volumes else ".9g"  # percentiles are estimates: no use printing them to the last bit
    if args.per_domain and len(ranges) == 2:
        flag = " ".join(f"{v:{digits}}" for low_high in ranges.values() for v in low_high)
    else:
        flag = f"{min(r[0] for r in ranges.values()):{digits}} {max(r[1] for r in ranges.values()):{digits}}"
    print(f"--data_range {flag}")
    return 0


if __name__ == "__main__":
    exit_with_status(main())
