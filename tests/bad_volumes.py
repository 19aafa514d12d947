"""Corpus cases of tests/test_bad_input.py for volumes: what docs/volumes.md promises about the data is
checked as it says (every file before a model is built: unreadable or cut short, NaN or infinite values
whatever --volume_cache_mb, wrong channel counts, volumes smaller than the patch; a pair must be one voxel
grid, the same shape and the same affine), degenerate volumes (an axis without voxels, all background,
all one value) get a refusal or a usable suggestion, and NIfTI files given to a picture --dataset_mode are
pointed to its volume counterpart."""
from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import torch

from bad_input_kit import NAME, Case, Setup
from conftest import FAST_FLAGS

VOLUME_RUN = ["--model", "pix2pix", "--dataset_mode", "aligned_volume", "--input_nc", "1", "--output_nc", "1",
              "--netG", "resnet_6blocks_3d", "--ngf", "4", "--netD", "pixel_3d", "--ndf", "4", "--patch_size", "8",
              "--n_epochs", "1", "--n_epochs_decay", "0"]
FLOAT_RANGE = ["--data_range", "0", "1"]
BUILT = "model [Pix2PixModel] was created"  # in stdout once a model is built
SHAPE = (12, 10, 9)


def save_volume(path: Path, values: np.ndarray, affine: np.ndarray | None = None) -> Path:
    """`values` as a NIfTI file (affine: identity, 1 mm voxels, by default) or, for a .npy path, an array."""
    import nibabel as nib

    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".npy":
        np.save(path, values)
    else:
        nib.save(nib.Nifti1Image(values, np.eye(4) if affine is None else affine), str(path))
    return path


def volume(seed: int, shape: tuple[int, ...] = SHAPE, dtype=np.float32) -> np.ndarray:
    return np.random.default_rng(seed).random(shape).astype(dtype)


def volume_pairs(work: Path, count: int = 2,
                 folders: tuple[str, str] = ("trainA", "trainB")) -> list[tuple[Path, Path]]:
    """`count` pairs data/trainA/<i>.nii.gz, data/trainB/<i>.nii.gz of SHAPE float32 voxels in [0, 1]."""
    return [(save_volume(work / "data" / folders[0] / f"{i}.nii.gz", volume(i)),
             save_volume(work / "data" / folders[1] / f"{i}.nii.gz", volume(100 + i))) for i in range(count)]


def run_args(work: Path, *extra: str, data_range: bool = True) -> list[str]:
    """A tiny pix2pix run on work/data's volumes (no picture flags: with volumes they would be warned about)."""
    return ["--dataroot", str(work / "data"), "--name", NAME, "--checkpoints_dir", str(work / "ck"), *FAST_FLAGS,
            *extra, *(FLOAT_RANGE if data_range else [])]


def refused_before_a_model(work: Path, args: list[str], *names) -> Setup:
    return Setup(args, stderr_has=names, stdout_lacks=(BUILT, "The number of training images"),
                 unchanged=(work / "data",))


def header_only_nifti(path: Path, shape: tuple[int, ...]) -> Path:
    """A .nii.gz holding a NIfTI header of `shape` float32 voxels and no voxel at all: a whole gzip stream
    of some 70 bytes (the issue's example is 32767^3)."""
    import nibabel as nib

    header = nib.Nifti1Header()
    header.set_data_shape(shape)
    header.set_data_dtype(np.float32)
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wb") as f:
        f.write(header.binaryblock + b"\0" * 4)
    return path


def volume_generator(folder: Path) -> Path:
    """A lone 3-D generator's weights (resnet_6blocks_3d, ngf 4, 1 -> 1 channel): translate.py then needs
    --patch_size and --data_range, which `TRANSLATE` gives."""
    from models import networks

    folder.mkdir(parents=True, exist_ok=True)
    torch.save(networks.define_G(1, 1, 4, "resnet_6blocks_3d").state_dict(), folder / "latest_net_G.pth")
    return folder / "latest_net_G.pth"


TRANSLATE = ["--patch_size", "8", "--data_range", "0", "1", "--device", "cpu"]


# ---------------------------------------------------------------------------------- what docs/volumes.md promises
def b_nan_without_cache(work):
    """The issue's example: with --volume_cache_mb 0 patches are read lazily, and a NaN outside the first
    patch read was never seen before training."""
    pairs = volume_pairs(work)
    values = volume(5)
    values[-1, -1, -1] = np.nan
    save_volume(pairs[1][1], values)
    return refused_before_a_model(work, run_args(work, *VOLUME_RUN, "--volume_cache_mb", "0"), pairs[1][1],
                                  "NaN or infinite", "np.nan_to_num")


def b_infinity_in_a_cached_npy(work):
    pairs = volume_pairs(work)
    values = volume(6)
    values[0, 3, 4] = -np.inf
    pairs[1][0].unlink()
    bad = save_volume(pairs[1][0].with_name("1.npy"), values)  # a pair may mix formats
    return refused_before_a_model(work, run_args(work, *VOLUME_RUN), bad, "NaN or infinite")


def grid_case(change):
    """A pair of one shape whose B lies on another grid: `change(affine)` edits B's affine in place."""
    def build(work: Path) -> Setup:
        pairs = volume_pairs(work)
        affine = np.eye(4)
        change(affine)
        save_volume(pairs[0][1], volume(100), affine)
        return refused_before_a_model(work, run_args(work, *VOLUME_RUN), pairs[0][0], pairs[0][1],
                                      "not the same voxel grid", "resample_from_to")
    return build


def b_pair_of_other_shapes(work):
    pairs = volume_pairs(work)
    save_volume(pairs[1][1], volume(7, (12, 10, 8)))
    return refused_before_a_model(work, run_args(work, *VOLUME_RUN), pairs[1][0], pairs[1][1], "12x10x9", "12x10x8")


def b_cut_short_nii_gz(work):
    pairs = volume_pairs(work)
    data = pairs[1][0].read_bytes()
    pairs[1][0].write_bytes(data[: len(data) // 2])
    return refused_before_a_model(work, run_args(work, *VOLUME_RUN, "--volume_cache_mb", "0"), pairs[1][0],
                                  "cannot read volume")


def b_four_d_file_for_one_channel(work):
    pairs = volume_pairs(work)
    save_volume(pairs[1][0], volume(8, (*SHAPE, 2)))
    return refused_before_a_model(work, run_args(work, *VOLUME_RUN), pairs[1][0], "4-D file", "--input_nc 2")


def b_volume_smaller_than_the_patch(work):
    pairs = volume_pairs(work)
    for path in pairs[1]:
        save_volume(path, volume(9, (12, 10, 6)))
    return refused_before_a_model(work, run_args(work, *VOLUME_RUN), pairs[1][0], "smaller than --patch_size 8,8,8")


def b_float_volumes_without_data_range(work):
    volume_pairs(work)
    return refused_before_a_model(work, run_args(work, *VOLUME_RUN, data_range=False), "--data_range",
                                  "scripts/data_range.py")


def b_uint8_volumes_without_data_range(work):
    for i in range(2):
        for side in "AB":
            save_volume(work / "data" / f"train{side}" / f"{i}.nii.gz", (volume(i) * 255).astype(np.uint8))
    return Setup(run_args(work, *VOLUME_RUN, data_range=False), stdout_has=("The number of training images = 2",))


def b_two_d_network_for_volumes(work):
    volume_pairs(work)
    return Setup(run_args(work, *VOLUME_RUN, "--netG", "resnet_6blocks"),
                 stderr_has=("--netG resnet_6blocks is a 2-D network", "resnet_6blocks_3d"))


def not_for_volumes(*flags: str, names: tuple = ()):
    """docs/volumes.md, "Not for volumes": refused when parsed, saying what to use."""
    def build(work: Path) -> Setup:
        volume_pairs(work)
        return Setup(run_args(work, *VOLUME_RUN, *flags),
                     stderr_has=(flags[0], *names))
    return build


# ---------------------------------------------------------------------------------- degenerate volumes
def b_volume_with_an_empty_axis_in_training(work):
    pairs = volume_pairs(work)
    pairs[1][0].unlink()
    bad = save_volume(pairs[1][0].with_name("1.npy"), np.zeros((0, 10, 9), np.float32))
    return refused_before_a_model(work, run_args(work, *VOLUME_RUN), bad, "0x10x9", "without a single voxel")


def b_translate_empty_volume_and_go_on(work):
    """The issue's example: a 0x10x9 volume stopped translate.py with a RuntimeError from padding."""
    weights = volume_generator(work / "ck")
    empty = save_volume(work / "in" / "empty.npy", np.zeros((0, 10, 9), np.float32))
    save_volume(work / "in" / "sound.nii.gz", volume(1))
    return Setup([str(work / "in"), "--checkpoint", str(weights), "--output", str(work / "out"), *TRANSLATE],
                 stdout_has=("translated 1 of 2", f"{empty}: volume {empty} is 0x10x9"),
                 unchanged=(work / "in",), after=lambda: _exists(work / "out" / "sound.nii.gz"))


def _exists(path: Path) -> None:
    assert path.is_file(), f"{path} was not written"


def label_volumes(work: Path, fill: int | None) -> Path:
    """trainA: label volumes (almost all 0, a few voxels of labels 1 to 3), or all `fill`; trainB: an MR-like
    float volume."""
    labels = np.zeros((40, 40, 40), np.int16) if fill is None else np.full((40, 40, 40), fill, np.int16)
    if fill is None:
        labels[10:12, 10:12, 10:12], labels[20, 20, 20], labels[30, 5, 5] = 3, 1, 2
    save_volume(work / "data" / "trainA" / "case.nii.gz", labels)
    save_volume(work / "data" / "trainB" / "case.nii.gz", (volume(3, (40, 40, 40)) * 900).astype(np.float32))
    return work / "data"


def b_data_range_of_label_volumes(work):
    return Setup(["--dataroot", str(label_volumes(work, None)), "--per_domain"],
                 stdout_has=("label or mask volumes", "--data_range 0 3 "), stderr_lacks=("error",),
                 unchanged=(work / "data",))


def b_data_range_of_a_constant_domain(work):
    data = label_volumes(work, 7)
    return Setup(["--dataroot", str(data)], stderr_has=(data / "trainA", "is 7", "constant domain"),
                 stdout_lacks=("--data_range 7 7", "--data_range"), unchanged=(data,))


def b_data_range_of_blank_float_images(work):
    folder = work / "data" / "train"
    folder.mkdir(parents=True)
    for i in range(2):
        np.save(folder / f"{i}.npy", np.full((8, 16, 3), 0.25, np.float32))
    return Setup(["--dataroot", str(work / "data")], stderr_has=(folder, "is 0.25", "constant domain"),
                 unchanged=(work / "data",))


# ---------------------------------------------------------------------------------- NIfTI under a picture mode
def nifti_folders(mode_flags: tuple[str, ...], counterpart: str, folders: tuple[str, ...] = ("trainA", "trainB")):
    def build(work: Path) -> Setup:
        for folder in folders:
            for i in range(2):
                save_volume(work / "data" / folder / f"{i}.nii.gz", volume(i))
        return Setup(run_args(work, *mode_flags, data_range=False), stderr_has=("holds NIfTI volumes", "0.nii.gz",
                                                              f"--dataset_mode {counterpart}", "docs/volumes.md"),
                     stderr_lacks=("contains no images",), unchanged=(work / "data",))
    return build


def b_nifti_for_test_py(work):
    for i in range(2):
        save_volume(work / "data" / f"{i}.nii.gz", volume(i))
    args = ["--dataroot", str(work / "data"), "--name", "corpus", "--checkpoints_dir", str(work / "ck"),
            "--model", "test", "--results_dir", str(work / "results")]
    return Setup(args, stderr_has=("holds NIfTI volumes", "--dataset_mode single_volume"),
                 stderr_lacks=("contains no images",))


VOLUME_CASES = [
    # docs/volumes.md: "every file's header is checked before a model is built: unreadable or truncated files,
    # NaN or infinite values, wrong channel counts, volumes smaller than the patch"
    Case("NaN voxel with --volume_cache_mb 0 is refused before a model is built naming the file", b_nan_without_cache,
         2),
    Case("infinite voxel in a .npy paired with a .nii.gz is refused before a model is built",
         b_infinity_in_a_cached_npy, 2),
    Case("nii.gz cut in half is refused before a model is built with --volume_cache_mb 0", b_cut_short_nii_gz, 2),
    Case("4-D file where 3-D volumes are expected is refused naming --input_nc", b_four_d_file_for_one_channel, 2),
    Case("volume smaller than --patch_size is refused naming it", b_volume_smaller_than_the_patch, 2),
    # "paired volumes must have the same voxel grid"
    Case("pair of other shapes is refused naming both files", b_pair_of_other_shapes, 2),
    Case("pair of one shape whose B is flipped is refused naming both files",
         grid_case(lambda affine: affine.__setitem__((0, 0), -1.0)), 2),
    Case("pair of one shape whose B has other voxel spacing is refused naming both files",
         grid_case(lambda affine: affine.__setitem__((2, 2), 1.2)), 2),
    Case("pair of one shape whose B is moved by 120 mm is refused naming both files",
         grid_case(lambda affine: affine.__setitem__((1, 3), 120.0)), 2),
    # "volumes need a --data_range; only 8-bit volumes default to 0..255"; 3-D networks only
    Case("float volumes without --data_range are refused pointing to data_range.py", b_float_volumes_without_data_range,
         2),
    Case("8-bit volumes without --data_range train (0..255)", b_uint8_volumes_without_data_range, 0),
    Case("a 2-D --netG with volumes is refused listing the 3-D ones", b_two_d_network_for_volumes, 2, parse_only=True),
    Case("bicycle_gan with volumes is refused when parsed, pointing to pix2pix",
         not_for_volumes("--model", "bicycle_gan", names=("BicycleGAN takes pictures", "--model pix2pix")), 2,
         parse_only=True),
    Case("--netD multiscale with volumes is refused when parsed listing the 3-D discriminators",
         not_for_volumes("--netD", "multiscale", names=("basic_3d", "pixel_3d")), 2, parse_only=True),
    # degenerate volumes
    Case("volume with an axis of 0 voxels is refused before a model is built", b_volume_with_an_empty_axis_in_training,
         2),
    Case("translate.py names a 0x10x9 volume and translates the others", b_translate_empty_volume_and_go_on, 0,
         script="scripts/translate.py"),
    Case("data_range.py on label volumes suggests the labels' range, not 0 0", b_data_range_of_label_volumes, 0,
         script="scripts/data_range.py"),
    Case("data_range.py on a constant domain is refused naming its folder", b_data_range_of_a_constant_domain, 2,
         script="scripts/data_range.py"),
    Case("data_range.py on blank float images is refused naming their folder", b_data_range_of_blank_float_images, 2,
         script="scripts/data_range.py"),
    # NIfTI files given to a picture mode
    Case("NIfTI volumes for pix2pix's aligned mode point to --dataset_mode aligned_volume",
         nifti_folders(("--model", "pix2pix"), "aligned_volume"), 2),
    Case("NIfTI volumes for cycle_gan's unaligned mode point to --dataset_mode unaligned_volume",
         nifti_folders(("--model", "cycle_gan"), "unaligned_volume"), 2),
    Case("NIfTI volumes for test.py --model test point to --dataset_mode single_volume", b_nifti_for_test_py, 2,
         script="test.py"),
]
