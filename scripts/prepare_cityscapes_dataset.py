"""Make the pix2pix and CycleGAN datasets of Cityscapes (photo <-> label colours) from its official files.

    python scripts/prepare_cityscapes_dataset.py --gtFine_dir ./gtFine --leftImg8bit_dir ./leftImg8bit \
        --output_dir ./datasets/cityscapes

Cityscapes cannot be redistributed: download gtFine_trainvaltest.zip and leftImg8bit_trainvaltest.zip
from https://cityscapes-dataset.com and unzip them. As the reference's datasets/prepare_cityscapes_dataset.py
(same flags, same files): the label colour images (gtFine/<split>/<city>/*_gtFine_color.png) and the
photos (leftImg8bit/<split>/<city>/*_leftImg8bit.png) of the train and val splits, resized to 256x256,
become
  <output_dir>/train/<i>.jpg, test/<i>.jpg      photo | labels side by side (512x256), for pix2pix
                                                (--direction AtoB: photo -> labels);
  <output_dir>/trainA/<i>_A.jpg, testA/...      the photos, and trainB/<i>_B.jpg, testB/... the
                                                labels, for CycleGAN;
val becomes test, as in the reference; JPEG quality 100 without chroma subsampling. Photos and labels
are paired by their Cityscapes name (<city>_<sequence>_<frame>), not by position: a file without its
partner, a split without files, a file that cannot be decoded whole (every file is decoded once before
anything is written), or an --output_dir whose folders would be, lie inside or contain --gtFine_dir or
--leftImg8bit_dir stops the script before anything is written (exit status 2, the files named).
"""
from __future__ import annotations

import glob
import os
import sys

from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from data.image_io import PIL_UNREADABLE  # noqa: E402
from util.console import setup_logging  # noqa: E402
from util.errors import UserError, exit_with_status, exits_on_user_error  # noqa: E402
from util.flag_types import OneParagraphParser  # noqa: E402
from util.safe_files import refuse_output_over_inputs  # noqa: E402

SIZE = 256  # the reference's fixed size
SPLITS = {"val": "test", "train": "train"}  # Cityscapes split -> our split, in the reference's order
LABEL_SUFFIX, PHOTO_SUFFIX = "_gtFine_color.png", "_leftImg8bit.png"
SHOWN = 5


def find_pairs(gtFine_dir: str, leftImg8bit_dir: str, split: str) -> list[tuple[str, str]]:
    """(label, photo) paths of one Cityscapes split, paired by name; a UserError naming what is missing."""
    labels = _by_name(os.path.join(gtFine_dir, split), LABEL_SUFFIX)
    photos = _by_name(os.path.join(leftImg8bit_dir, split), PHOTO_SUFFIX)
    if not labels or not photos:
        searched = (("gtFine_dir", gtFine_dir, LABEL_SUFFIX, labels),
                    ("leftImg8bit_dir", leftImg8bit_dir, PHOTO_SUFFIX, photos))
        empty = [f"--{flag} {folder}/{split}/<city>/*{suffix}" for flag, folder, suffix, found in searched
                 if not found]
        raise UserError(f"no Cityscapes files match {' and '.join(empty)}; pass the unzipped gtFine_trainvaltest "
                        f"and leftImg8bit_trainvaltest folders (each holds train/ and val/, with a folder per city).")
    alone = sorted(labels.keys() ^ photos.keys())
    if alone:
        shown = ", ".join((labels.get(name) or photos[name]) for name in alone[:SHOWN])
        more = f" and {len(alone) - SHOWN} more" if len(alone) > SHOWN else ""
        raise UserError(f"{len(alone)} Cityscapes file(s) of the {split} split have no partner (a photo needs its "
                        f"label colours, and the other way round): {shown}{more}. Restore the missing files or remove "
                        f"these; nothing was written.")
    return [(labels[name], photos[name]) for name in sorted(labels)]


def _by_name(folder: str, suffix: str) -> dict[str, str]:
    paths = glob.glob(os.path.join(glob.escape(folder), "*", "*" + suffix))
    return {os.path.basename(path)[:-len(suffix)]: path for path in paths}


def _resized(path: str) -> Image.Image:
    try:
        with Image.open(path) as image:
            return image.convert("RGB").resize((SIZE, SIZE), Image.BICUBIC)
    except PIL_UNREADABLE as err:
        reason = " ".join(str(err).split())
        raise UserError(f"cannot read {path} ({reason}); restore it from the Cityscapes zip.") from None


def check_decodable(pairs: list[tuple[str, str]]) -> None:
    """Decode every file of `pairs` whole (a PNG cut short after its header shows it only then): a
    UserError naming the first that fails, before anything is written."""
    for pair in pairs:
        for path in pair:
            _resized(path)


def write_split(pairs: list[tuple[str, str]], output_dir: str, split: str) -> None:
    """Write one split's side-by-side images and its A (photo) and B (label) folders."""
    for folder in (split, split + "A", split + "B"):
        os.makedirs(os.path.join(output_dir, folder), exist_ok=True)
    for i, (label_path, photo_path) in enumerate(pairs):
        label, photo = _resized(label_path), _resized(photo_path)
        side_by_side = Image.new("RGB", (2 * SIZE, SIZE))
        side_by_side.paste(photo, (0, 0))
        side_by_side.paste(label, (SIZE, 0))
        jpeg = {"format": "JPEG", "quality": 100, "subsampling": 0}
        side_by_side.save(os.path.join(output_dir, split, f"{i}.jpg"), **jpeg)
        photo.save(os.path.join(output_dir, split + "A", f"{i}_A.jpg"), **jpeg)
        label.save(os.path.join(output_dir, split + "B", f"{i}_B.jpg"), **jpeg)
    print(f"{split}: {len(pairs)} pairs written to {output_dir}/{split}, {split}A, {split}B")


@exits_on_user_error()
def main(argv: list[str] | None = None) -> int:
    setup_logging()
    parser = OneParagraphParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gtFine_dir", required=True, help="the unzipped gtFine_trainvaltest folder (train/, val/)")
    parser.add_argument("--leftImg8bit_dir", required=True, help="the unzipped leftImg8bit_trainvaltest folder")
    parser.add_argument("--output_dir", required=True, help="where the dataset is written (e.g. ./datasets/cityscapes)")
    args = parser.parse_args(argv)
    for flag in ("gtFine_dir", "leftImg8bit_dir"):
        if not os.path.isdir(getattr(args, flag)):
            raise UserError(f"--{flag} {getattr(args, flag)} is not a folder; pass the unzipped Cityscapes folder "
                            f"(download it from https://cityscapes-dataset.com).")
    inputs = (("--gtFine_dir", args.gtFine_dir), ("--leftImg8bit_dir", args.leftImg8bit_dir))
    apart = os.path.join(os.path.dirname(os.path.abspath(args.gtFine_dir)), "cityscapes_prepared")  # beside gtFine
    for ours in SPLITS.values():  # the folders written must be apart from the Cityscapes folders read
        for folder in (ours, ours + "A", ours + "B"):
            refuse_output_over_inputs(os.path.join(args.output_dir, folder),
                                      f"--output_dir {args.output_dir} (its {folder}/)", inputs,
                                      f"Pass an --output_dir apart from both, e.g. --output_dir {apart}.")
    pairs = {split: find_pairs(args.gtFine_dir, args.leftImg8bit_dir, split) for split in SPLITS}  # all checked first
    for split_pairs in pairs.values():
        check_decodable(split_pairs)
    for split, ours in SPLITS.items():
        write_split(pairs[split], args.output_dir, ours)
    return 0


if __name__ == "__main__":
    exit_with_status(main())
