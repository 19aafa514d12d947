"""Corpus cases of tests/test_bad_input.py for sizes taken on trust: every number that decides how much is
allocated -- from a flag (samples, tiles, windows, patches, batch, image sides, network widths) or from a
file's header (a volume's or an image's dimensions, a codes file's shape) -- is checked against a stated
limit before anything is allocated, and refused in one paragraph. Each case runs under `memory_cap`
(`ulimit -v`: a few GiB beyond what the test process holds), so that an unchecked allocation fails the
case with a MemoryError instead of taking the machine's memory. A directory run of translate.py names
the bad file and translates the rest, as its documentation says."""
from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from bad_input_kit import PIX, Case, Setup, aligned, eval_args, random_pixels, run_args
from bad_volumes import TRANSLATE, VOLUME_RUN, header_only_nifti, save_volume, volume, volume_generator, volume_pairs
from bad_volumes import run_args as volume_args

HUGE = 10 ** 12


def capped(setup: Setup) -> Setup:
    setup.memory_cap = True
    return setup


def flag_too_large(script: str, *flags: str, names: tuple = (), volumes: bool = False):
    """A valid command but for `flags`, whose value asks for far more than the machine has."""
    def build(work: Path) -> Setup:
        if volumes:
            volume_pairs(work, folders=("trainA", "trainB") if script == "train.py" else ("testA", "testB"))
            if script == "train.py":
                args = volume_args(work, *VOLUME_RUN, *flags)
            else:  # test.py's own flags
                args = ["--dataroot", str(work / "data"), "--name", "corpus", "--checkpoints_dir", str(work / "ck"),
                        "--results_dir", str(work / "results"), *VOLUME_RUN[:-4], "--data_range", "0", "1", *flags]
        else:
            aligned(work / "data" / ("train" if script == "train.py" else "test"), 2)
            args = run_args(work, *PIX, *flags) if script == "train.py" else eval_args(work, *flags)
        return capped(Setup(args, stderr_has=(flags[0], *names), stdout_lacks=("model [",)))
    return build


def size_case(script: str, *flags: str, names: tuple = (), volumes: bool = False) -> Case:
    return Case(f"{script} {' '.join(flags)} is refused before anything is allocated",
                flag_too_large(script, *flags, names=names, volumes=volumes), 2, script=script)


# ---------------------------------------------------------------------------------- headers of images
def png_with_size(path: Path, width: int, height: int, sixteen_bit_colour: bool = False) -> Path:
    """A PNG whose IHDR (its CRC made to match) declares width x height pixels and whose pixel data is 8x8's."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if sixteen_bit_colour:
        import imagecodecs

        path.write_bytes(imagecodecs.png_encode(np.zeros((8, 8, 3), np.uint16)))
    else:
        Image.fromarray(random_pixels(0, 8, 8)).save(path)
    data = bytearray(path.read_bytes())
    data[16:24] = struct.pack(">II", width, height)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))  # the IHDR chunk's CRC
    path.write_bytes(bytes(data))
    return path


def tiff_with_size(path: Path, width: int, height: int) -> Path:
    """An 8x8 float32 RGB TIFF whose ImageWidth and ImageLength tags say width x height."""
    import tifffile

    path.parent.mkdir(parents=True, exist_ok=True)
    tifffile.imwrite(path, np.zeros((8, 8, 3), np.float32), photometric="rgb")
    data = bytearray(path.read_bytes())
    assert data[:2] == b"II"
    ifd = struct.unpack("<I", data[4:8])[0]
    for entry in range(struct.unpack("<H", data[ifd:ifd + 2])[0]):
        at = ifd + 2 + 12 * entry
        tag, kind = struct.unpack("<HH", data[at:at + 4])
        if tag in (256, 257):  # ImageWidth, ImageLength
            value = width if tag == 256 else height
            data[at + 8:at + 12] = struct.pack("<HH", value, 0) if kind == 3 else struct.pack("<I", value)
    path.write_bytes(bytes(data))
    return path


def image_header_case(make):
    def build(work: Path) -> Setup:
        paths = aligned(work / "data" / "train", 2)
        bad = make(paths[1])
        return capped(Setup(run_args(work, *PIX), stderr_has=(bad,), stdout_lacks=("The number of training images",),
                            unchanged=(work / "data",)))
    return build


def b_translate_pictures_past_a_huge_header(work):
    from models import networks

    weights = work / "ck" / "latest_net_G.pth"
    weights.parent.mkdir(parents=True)
    torch.save(networks.define_G(3, 3, 8, "resnet_6blocks", "batch", True).state_dict(), weights)
    (work / "in").mkdir()
    Image.fromarray(random_pixels(1, 32, 32)).save(work / "in" / "a.png")
    bad = png_with_size(work / "in" / "b.png", 60000, 60000, sixteen_bit_colour=True)
    return capped(Setup([str(work / "in"), "--checkpoint", str(weights), "--output", str(work / "out"),
                         "--device", "cpu"],
                        stdout_has=("translated 1 of 2", f"{bad}: cannot read image {bad}: its header declares "
                                                         f"60000x60000 pixels"),
                        unchanged=(work / "in",)))


# ---------------------------------------------------------------------------------- headers of volumes
def b_huge_volume_in_a_training_pair(work):
    """The issue's example: a .nii.gz of some 70 bytes declaring 32767^3 voxels passed the header check and
    was refused only mid-epoch (in translate.py: MemoryError)."""
    pairs = volume_pairs(work, 3)
    bad = header_only_nifti(pairs[2][1], (32767, 32767, 32767))
    return capped(Setup(volume_args(work, *VOLUME_RUN), stderr_has=(bad, "32767x32767x32767", "MAX_VOLUME_VOXELS"),
                        stdout_lacks=("model [", "The number of training images"), unchanged=(work / "data",)))


def b_header_only_volume_within_the_limit(work):
    """A header of 100^3 voxels and no voxel: within the limit, but cut short, refused before training."""
    pairs = volume_pairs(work, 2)
    bad = header_only_nifti(pairs[1][0], (100, 100, 100))
    return capped(Setup(volume_args(work, *VOLUME_RUN), stderr_has=(bad, "cut short", "4000000"),
                        stdout_lacks=("model [",), unchanged=(work / "data",)))


def b_translate_volumes_past_a_huge_header(work):
    weights = volume_generator(work / "ck")
    bad = header_only_nifti(work / "in" / "a_huge.nii.gz", (32767, 32767, 32767))
    save_volume(work / "in" / "b_sound.nii.gz", volume(1))
    save_volume(work / "in" / "c_sound.npy", volume(2))
    return capped(Setup([str(work / "in"), "--checkpoint", str(weights), "--output", str(work / "out"), *TRANSLATE],
                        stdout_has=("translated 2 of 3", f"{bad}: volume {bad} declares 32767x32767x32767"),
                        unchanged=(work / "in",)))


def b_translate_with_windows_past_count(work):
    weights = volume_generator(work / "ck")
    save_volume(work / "in" / "big.nii.gz", np.zeros((128, 128, 128), np.float32))
    return capped(Setup([str(work / "in"), "--checkpoint", str(weights), "--output", str(work / "out"), *TRANSLATE,
                         "--window_overlap", "0.99"],
                        stderr_has=("--window_overlap 0.99", "128x128x128", "MAX_WINDOWS", "smaller --window_overlap"),
                        unchanged=(work / "in",)))


def b_data_range_of_a_huge_volume(work):
    volume_pairs(work)
    bad = header_only_nifti(work / "data" / "trainB" / "2.nii.gz", (32767, 32767, 32767))
    return capped(Setup(["--dataroot", str(work / "data")], stderr_has=(bad, "MAX_VOLUME_VOXELS"),
                        unchanged=(work / "data",)))


# ---------------------------------------------------------------------------------- codes files
def latent_generator(folder: Path) -> Path:
    """A lone BicycleGAN generator (unet_128 taking a code of 3 numbers at every level)."""
    from types import SimpleNamespace

    from models import networks

    flags = SimpleNamespace(ngf=4, norm="instance", no_dropout=True, upsample="basic", nz=3, where_add="all",
                            nl="relu")
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(networks.family_of("unet_128").build(flags, 3, 3).state_dict(), folder / "latest_net_G.pth")
    return folder / "latest_net_G.pth"


def b_codes_file_declaring_a_trillion_codes(work):
    weights = latent_generator(work / "ck")
    (work / "in").mkdir()
    Image.fromarray(random_pixels(0, 128, 128)).save(work / "in" / "a.png")
    codes = _npy_with_shape(work / "codes.npy", (HUGE, 3))
    return capped(Setup([str(work / "in"), "--checkpoint", str(weights), "--output", str(work / "out"), "--codes",
                         str(codes), "--device", "cpu"], stderr_has=("--codes", codes), unchanged=(work / "in",)))


def _npy_with_shape(path: Path, shape: tuple[int, ...]) -> Path:
    """A .npy file whose header declares `shape` float64 values and which holds none of them."""
    header = f"{{'descr': '<f8', 'fortran_order': False, 'shape': {shape}, }}".encode()
    header += b" " * (63 - (len(header) + 10) % 64) + b"\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header)
    return path


SIZE_CASES = [
    # flags whose value sizes an allocation
    size_case("test.py", "--n_samples", str(HUGE), "--model", "bicycle_gan", names=("<= 1000",)),
    size_case("train.py", "--load_size", "1000000", "--crop_size", "1000000", names=("<= 16384",)),
    size_case("train.py", "--batch_size", str(HUGE), names=("<= 4096",)),
    size_case("train.py", "--ngf", str(HUGE), names=("<= 4096",)),
    size_case("train.py", "--input_nc", str(HUGE), names=("<= 1024",)),
    size_case("train.py", "--pool_size", str(HUGE), names=("<= 1000",)),
    size_case("test.py", "--aspect_ratio", "1e9", names=("<= 100",)),
    size_case("test.py", "--tile", str(HUGE), names=("<= 16384",)),
    size_case("train.py", "--patch_size", "100000", names=("512^3",), volumes=True),
    size_case("train.py", "--patches_per_volume", str(HUGE), names=("<= 100000",), volumes=True),
    size_case("train.py", "--batch_size", "512", "--patch_size", "128", names=("MAX_BATCH_VOXELS", "--batch_size 128"),
              volumes=True),
    size_case("test.py", "--window_batch", str(HUGE), names=("<= 1024",), volumes=True),
    size_case("test.py", "--window_batch", "1000", "--patch_size", "256", names=("MAX_BATCH_VOXELS",), volumes=True),
    Case("translate.py --n_samples 10^12 is refused before anything is allocated",
         lambda work: capped(Setup([str(work), "--checkpoint", str(work), "--output", str(work / "out"),
                                    "--n_samples", str(HUGE)], stderr_has=("--n_samples", "<= 1000"))), 2,
         script="scripts/translate.py"),
    Case("export.py --check_sizes 100000x100000 is refused before anything is allocated",
         lambda work: capped(Setup(["--weights", str(work / "w.pth"), "--netG", "resnet_6blocks", "--check_sizes",
                                    "100000x100000"], stderr_has=("--check_sizes", "16384"))), 2,
         script="scripts/export.py"),
    # headers of images
    Case("png whose header declares 100000x100000 pixels is refused before training naming it",
         image_header_case(lambda path: png_with_size(path, 100000, 100000)), 2),
    Case("16-bit colour png whose header declares 60000x60000 pixels is refused before training naming it",
         image_header_case(lambda path: png_with_size(path, 60000, 60000, sixteen_bit_colour=True)), 2),
    Case("float tiff whose header declares 50000x50000 pixels is refused before training naming it",
         image_header_case(lambda path: tiff_with_size(path.with_suffix(".tif"), 50000, 50000)), 2),
    Case("npy whose header declares 10^12 x 3 x 3 values is refused before training naming it",
         image_header_case(lambda path: _npy_with_shape(path.with_suffix(".npy"), (HUGE, 3, 3))), 2),
    Case("translate.py names a png whose header declares 60000x60000 pixels and translates the others",
         b_translate_pictures_past_a_huge_header, 0, script="scripts/translate.py"),
    # headers of volumes
    Case("nii.gz of a header declaring 32767^3 voxels in a training pair is refused before a model is built",
         b_huge_volume_in_a_training_pair, 2),
    Case("nii.gz of a header alone declaring 100^3 voxels is refused before training as cut short",
         b_header_only_volume_within_the_limit, 2),
    Case("translate.py names a nii.gz declaring 32767^3 voxels and translates the others",
         b_translate_volumes_past_a_huge_header, 0, script="scripts/translate.py"),
    Case("translate.py refuses --window_overlap 0.99 on a 128^3 volume by the number of windows",
         b_translate_with_windows_past_count, 2, script="scripts/translate.py"),
    Case("data_range.py names a nii.gz declaring 32767^3 voxels", b_data_range_of_a_huge_volume, 2,
         script="scripts/data_range.py"),
    # files of codes
    Case("translate.py --codes of a npy declaring 10^12 codes is refused before loading it",
         b_codes_file_declaring_a_trillion_codes, 2, script="scripts/translate.py"),
]
