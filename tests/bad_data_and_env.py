"""Corpus cases of tests/test_bad_input.py for data and the environment: float images holding NaN or
infinity, launcher variables left over without torchrun, symbolic links that lead nowhere, a TIFF
whose rows tifffile stored as pages, a malformed flag of a script that writes (export.py), and the
dataset tools' flags."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import tifffile
from PIL import Image

from bad_input_kit import NAME, PIX, Case, Setup, aligned, run_args


def float_pairs(work: Path, ext: str = ".tif", count: int = 2) -> list[Path]:
    """`count` aligned A|B float32 images (32x64x3 in [0, 1]) as .tif or .npy."""
    folder = work / "data" / "train"
    folder.mkdir(parents=True)
    paths = []
    for i in range(count):
        pixels = np.random.default_rng(i).random((32, 64, 3), dtype=np.float32)
        path = folder / f"{i:04d}{ext}"
        if ext == ".npy":
            np.save(path, pixels)
        else:
            tifffile.imwrite(path, pixels, photometric="rgb")
        paths.append(path)
    return paths


def rewrite_float(path: Path, change) -> None:
    pixels = np.load(path) if path.suffix == ".npy" else tifffile.imread(path)
    change(pixels)
    if path.suffix == ".npy":
        np.save(path, pixels)
    else:
        tifffile.imwrite(path, pixels, photometric="rgb")


# ---------------------------------------------------------------------------------- non-finite data
def b_nan_in_float_tiff(work):
    """The issue's example: NaN pixels used to load, and training stopped at the first step with
    "training diverged ... start again with a lower --lr". The first image is read before the model
    is built, so the refusal is cheap; one met later in the epoch goes through the same loader."""
    paths = float_pairs(work)
    rewrite_float(paths[0], lambda pixels: pixels.__setitem__((3, 40, 1), np.nan))
    return Setup(run_args(work, *PIX, "--data_range", "0", "1"),
                 stderr_has=(paths[0], "non-finite", "1 NaN", "row 3, column 40", "np.nan_to_num"),
                 stderr_lacks=("diverged", "--lr"))


def b_infinity_in_npy(work):
    paths = float_pairs(work, ".npy")
    rewrite_float(paths[0], lambda pixels: pixels.__setitem__((0, slice(0, 2), 0), (np.inf, -np.inf)))
    return Setup(run_args(work, *PIX, "--data_range", "0", "1"), stderr_has=(paths[0], "2 infinite"))


def b_data_range_on_8bit_pngs(work):
    """--data_range maps float data only: on 8-bit PNGs it does nothing, which the user is told once."""
    aligned(work / "data" / "train", 2)
    first = sorted((work / "data" / "train").iterdir())[0]
    return Setup(run_args(work, *PIX, "--data_range", "0", "1"),
                 stderr_has=("--data_range 0 1 applies to floating-point images only", str(first), "uint8"))


# ---------------------------------------------------------------------------------- the environment
def b_stray_rank_and_world_size(work):
    aligned(work / "data" / "train", 2)
    return Setup(run_args(work, *PIX), env={"RANK": "0", "WORLD_SIZE": "2"},
                 stderr_has=("RANK=0", "WORLD_SIZE=2", "MASTER_ADDR", "unset RANK", "torchrun"),
                 stderr_lacks=("ValueError",))


# ---------------------------------------------------------------------------------- symbolic links
def b_dataroot_symlink_loop(work):
    (work / "loop_a").symlink_to(work / "loop_b")
    (work / "loop_b").symlink_to(work / "loop_a")
    return Setup(run_args(work, *PIX, data=work / "loop_a"),
                 stderr_has=(work / "loop_a", "symbolic link in a loop", "--dataroot"),
                 stderr_lacks=("does not exist",))


def b_image_links_leading_nowhere(work):
    paths = aligned(work / "data" / "train", 3)
    paths[1].unlink()
    paths[1].symlink_to(work / "moved_away.png")  # dangling
    paths[2].unlink()
    paths[2].symlink_to(paths[2])                 # a loop
    return Setup(run_args(work, *PIX), stderr_has=(paths[1], "symbolic link to", work / "moved_away.png",
                                                   "1 more", paths[2]),
                 stderr_lacks=("moved or deleted",))


def b_checkpoints_dir_through_dangling_link(work):
    aligned(work / "data" / "train", 2)
    (work / "runs").symlink_to(work / "unmounted_disk")
    args = run_args(work, *PIX) + ["--checkpoints_dir", str(work / "runs")]
    return Setup(args, stderr_has=("--checkpoints_dir", work / "runs", "symbolic link to", work / "unmounted_disk"))


# ---------------------------------------------------------------------------------- file layouts
def b_tiff_rows_stored_as_pages(work):
    folder = work / "data" / "train"
    folder.mkdir(parents=True)
    paths = []
    for i in range(2):
        bands = np.random.default_rng(i).integers(0, 65536, (32, 64, 5), dtype=np.uint16)  # H x W x C, C = 5
        tifffile.imwrite(folder / f"{i}.tif", bands)  # stored as 32 pages of 64 x 5 pixels
        paths.append(folder / f"{i}.tif")
    return Setup(run_args(work, *PIX), stderr_has=(paths[0], "32 pages of 64x5", 'photometric="minisblack"',
                                                   'planarconfig="contig"', "5 channels"),
                 stderr_lacks=("Set --input_nc 32",))


# ---------------------------------------------------------------------------------- scripts that write
def b_export_size_as_one_number(work):
    aligned(work / "data" / "train", 1)
    return Setup(["--weights", str(work / "ck" / NAME / "latest_net_G.pth"), "--netG", "resnet_6blocks",
                  "--ngf", "8", "--export_dir", str(work / "export"), "--check_sizes", "256"],
                 stderr_has=("--check_sizes", "'256'", "HEIGHTxWIDTH"))


def b_split_dataset_no_folders(work):
    return Setup([], stderr_has=("--source", "--dest", "--help"), stderr_lacks=("usage:",))


def split_refused(flags: list[str], *names: str):
    """split_dataset.py on a folder of two images with `flags` ({work} filled in): refused, nothing made."""
    def build(work: Path) -> Setup:
        (work / "src").mkdir()
        for i in range(2):
            Image.new("RGB", (8, 8)).save(work / "src" / f"{i}.png")
        (work / "notes.txt").write_text("a file where a folder is expected\n")
        args = ["--source", str(work / "src"), "--dest", str(work / "split"),
                *(flag.format(work=work) for flag in flags)]
        return Setup(args, stderr_has=names, stderr_lacks=("Traceback",), after=lambda: _assert_absent(work / "split"))
    return build


def b_demo_dataset_into_a_file(work):
    notes = work / "notes.txt"
    notes.write_text("a file where the datasets' folder would go\n")
    return Setup(["--out", str(notes), "--task", "pix2pix"], stderr_has=("--out", f"{notes} is a file"),
                 stderr_lacks=("Traceback",), unchanged=(notes,))


def b_demo_dataset_too_small(work):
    return Setup(["--size", "8", "--out", str(work / "demo")], stderr_has=("--size", ">= 16"),
                 stderr_lacks=("usage:",), after=lambda: _assert_absent(work / "demo"))


def _assert_absent(path: Path) -> None:
    assert not path.exists(), f"{path} was written by a refused command"


def b_export_dir_under_a_file(work):
    (work / "notes.txt").write_text("a file where a folder is expected\n")
    return Setup(["--weights", str(work / "ck" / NAME / "latest_net_G.pth"), "--netG", "resnet_6blocks",
                  "--ngf", "8", "--export_dir", str(work / "notes.txt" / "export")],
                 stderr_has=("--export_dir", work / "notes.txt", "is a file"))


DATA_AND_ENV_CASES = [
    # float data holding NaN or infinity: the file is named, not "training diverged"
    Case("NaN in a float tiff is refused naming the file, not as divergence", b_nan_in_float_tiff, 2),
    Case("--data_range on 8-bit PNGs trains with a warning that it does nothing", b_data_range_on_8bit_pngs, 0),
    Case("infinity in a float npy is refused naming the file", b_infinity_in_npy, 2),
    # launcher variables
    Case("RANK and WORLD_SIZE left over without torchrun are refused naming them and how to unset them",
         b_stray_rank_and_world_size, 2),
    # symbolic links
    Case("--dataroot that is a symbolic link loop is refused as a loop, not as missing", b_dataroot_symlink_loop, 2),
    Case("dangling and looping image links are refused as links, not as files moved away",
         b_image_links_leading_nowhere, 2),
    Case("--checkpoints_dir through a dangling symbolic link is refused naming the link",
         b_checkpoints_dir_through_dangling_link, 2, parse_only=True),
    # layouts
    Case("HxWxC tiff stored by tifffile as H pages is refused saying how to write it", b_tiff_rows_stored_as_pages, 2),
    # scripts that write: their own flags and output paths, before any work
    Case("export.py --check_sizes written as one number is refused naming the flag", b_export_size_as_one_number, 2,
         script="scripts/export.py"),
    Case("export.py --export_dir under a regular file is refused before exporting", b_export_dir_under_a_file, 2,
         script="scripts/export.py"),
    # the dataset tools speak as train.py does: one paragraph, not argparse's usage block
    Case("split_dataset.py without its folders is refused in one paragraph naming them", b_split_dataset_no_folders,
         2, script="scripts/split_dataset.py"),
    Case("split_dataset.py --ratios nan,0.5,0.5 is refused naming the flag", split_refused(
        ["--ratios", "nan,0.5,0.5"], "--ratios nan,0.5,0.5", "add up to 1"), 2, script="scripts/split_dataset.py"),
    Case("split_dataset.py --splits naming one folder twice is refused", split_refused(
        ["--splits", "a,a,b", "--ratios", "0.5,0.25,0.25"], "--splits a,a,b", "3 different folders"), 2,
         script="scripts/split_dataset.py"),
    Case("split_dataset.py --dest under a file is refused naming it", split_refused(
        ["--dest", "{work}/notes.txt/split", "--ratios", "0.5,0.5,0"], "notes.txt is a file"), 2,
         script="scripts/split_dataset.py"),
    Case("make_demo_dataset.py --out naming a file is refused in one paragraph naming it", b_demo_dataset_into_a_file,
         2, script="scripts/make_demo_dataset.py"),
    Case("make_demo_dataset.py --size 8 is refused in one paragraph naming the flag", b_demo_dataset_too_small, 2,
         script="scripts/make_demo_dataset.py"),
]
