"""Volumes (3-D medical images) as data: NIfTI and .npy files read and written with their geometry, the
--data_range window, and the two volume modes' patches, as train.py and test.py get them."""
from __future__ import annotations

import gzip
import os
import re

import nibabel as nib
import numpy as np
import pytest
import torch

from conftest import load_script
from data import create_dataset, find_dataset_using_name
from data.aligned_volume_dataset import AlignedVolumeDataset
from data.unaligned_volume_dataset import UnalignedVolumeDataset
from data.volume_io import from_network, probe_volume, read_region, read_volume, to_network, volume_shape, write_volume
from options.test_options import TestOptions
from options.train_options import TrainOptions
from util.errors import UserError

SHAPE = (20, 24, 16)
NETS_3D = ["--netG", "unet_32_3d", "--netD", "basic_3d"]  # the options refuse 2-D networks for volume modes
AFFINE = np.array([[-0.8, 0.1, 0.0, 90.0], [0.0, 0.9, 0.2, -120.0], [0.0, 0.0, 2.5, -60.0], [0.0, 0.0, 0.0, 1.0]])
ANATOMICAL = os.path.join(os.path.dirname(nib.__file__), "tests", "data", "anatomical.nii")


def save_nifti(path, data, affine=AFFINE) -> str:
    nib.save(nib.Nifti1Image(data, affine), str(path))
    return str(path)


def ct_like(rng, shape=SHAPE) -> np.ndarray:
    """int16 Hounsfield-like values, different in every voxel."""
    return rng.integers(-1000, 2000, size=shape).astype(np.int16)


def train_opt(root, tmp_path, *flags, mode="aligned_volume", channels=("1", "1")):
    model = "pix2pix" if mode == "aligned_volume" else "cycle_gan"
    return TrainOptions().parse(["--dataroot", str(root), "--dataset_mode", mode, "--model", model, *NETS_3D,
                                 "--input_nc", channels[0], "--output_nc", channels[1], "--num_threads", "0",
                                 "--checkpoints_dir", str(tmp_path / "checkpoints"), *flags])


def built(opt, seed=0):
    """The dataset as train.py builds it (after the up-front checks), seeded."""
    return create_dataset(opt, seed).dataset


def paired_root(tmp_path, make_B, count=2, ext=".nii.gz"):
    """trainA/caseK + trainB/caseK with B = make_B(A) voxel for voxel (int16 CT-like A)."""
    rng = np.random.default_rng(0)
    for side in "AB":
        (tmp_path / "data" / f"train{side}").mkdir(parents=True, exist_ok=True)
    for k in range(count):
        A = ct_like(rng)
        save_nifti(tmp_path / "data" / "trainA" / f"case{k}{ext}", A)
        save_nifti(tmp_path / "data" / "trainB" / f"case{k}{ext}", make_B(A))
    return tmp_path / "data"


# ------------------------------------------------------------------------------------------ files
@pytest.mark.parametrize("ext", [".nii", ".nii.gz"])
@pytest.mark.parametrize("channels", [1, 3])
def test_a_nifti_file_reads_as_channels_first_voxel_axes_and_written_back_keeps_values_affine_zooms_shape(
        tmp_path, ext, channels):
    rng = np.random.default_rng(1)
    data = rng.normal(size=SHAPE + ((channels,) if channels > 1 else ())).astype(np.float32)
    source = save_nifti(tmp_path / f"in{ext}", data)
    volume = read_volume(source, channels)
    expected = data[None] if channels == 1 else np.moveaxis(data, 3, 0)  # (X,Y,Z,T) -> (T,X,Y,Z): no reorienting
    assert volume.array.dtype == np.float32 and np.array_equal(volume.array, expected)
    assert volume_shape(source) == (channels, *SHAPE)

    out = str(tmp_path / f"out{ext}")
    write_volume(out, volume.array * 7.25 - 3.0, volume.reference)
    back = nib.load(out)
    assert back.shape == nib.load(source).shape  # 3-D for one channel, 4-D (X, Y, Z, C) for more
    np.testing.assert_allclose(back.affine, AFFINE, atol=1e-6)
    np.testing.assert_allclose(back.header.get_zooms()[:3], nib.load(source).header.get_zooms()[:3])
    assert np.array_equal(read_volume(out, channels).array, volume.array * 7.25 - 3.0)


def test_an_output_of_a_scaled_integer_scan_is_written_as_exact_float32_without_the_inputs_scaling(tmp_path):
    image = nib.Nifti1Image(np.arange(np.prod(SHAPE), dtype=np.int16).reshape(SHAPE), AFFINE)
    image.header.set_slope_inter(0.5, -10.0)
    source = str(tmp_path / "scaled.nii")
    nib.save(image, source)
    volume = read_volume(source, 1)
    assert volume.array[0, 0, 0, 1] == pytest.approx(0.5 * 1 - 10.0)  # the scaling is applied when read
    result = volume.array + np.float32(0.123)
    write_volume(str(tmp_path / "out.nii.gz"), result, volume.reference)
    written = nib.load(str(tmp_path / "out.nii.gz"))
    assert written.get_data_dtype() == np.float32
    assert np.array_equal(np.asanyarray(written.dataobj), result[0])


@pytest.mark.parametrize("shape", [SHAPE, (2, *SHAPE)], ids=["DHW", "CDHW"])
def test_a_npy_volume_reads_and_writes_as_D_H_W_or_C_D_H_W(tmp_path, shape):
    data = np.random.default_rng(2).normal(size=shape).astype(np.float32)
    np.save(tmp_path / "v.npy", data)
    volume = read_volume(str(tmp_path / "v.npy"), len(shape) - 2)
    assert volume.reference is None and np.array_equal(volume.array, data.reshape((-1, *SHAPE)))
    write_volume(str(tmp_path / "out.npy"), volume.array, None)
    assert np.array_equal(np.load(tmp_path / "out.npy"), data)


@pytest.mark.parametrize("name, channels", [("v.nii", 2), ("v.nii.gz", 2), ("v.npy", 2), ("v.nii.gz", 1)])
def test_a_lazily_read_region_equals_the_same_box_of_the_whole_volume(tmp_path, name, channels):
    rng = np.random.default_rng(3)
    data = rng.integers(-1000, 2000, size=(channels, *SHAPE)).astype(np.int16)
    path = str(tmp_path / name)
    if name.endswith(".npy"):
        np.save(path, data)
    else:
        save_nifti(path, data[0] if channels == 1 else np.moveaxis(data, 0, 3))
    whole = read_volume(path, channels).array
    boxes = [((0, 0, 0), SHAPE), ((3, 5, 7), (8, 8, 8)), ((12, 16, 8), (8, 8, 8)), ((19, 0, 15), (1, 24, 1))]
    for corner, size in boxes:
        box = tuple(slice(c, c + s) for c, s in zip(corner, size))
        assert np.array_equal(read_region(path, channels, corner, size), whole[(slice(None), *box)]), corner


def test_the_window_maps_low_to_minus_one_and_high_to_one_clips_outside_and_from_network_inverts_it():
    window = (-1000.0, 2000.0)
    values = np.array([-1000.0, 2000.0, 500.0, -3000.0, 5000.0, 0.0], dtype=np.float32)
    mapped = to_network(values, window)
    assert mapped.dtype == np.float32
    np.testing.assert_allclose(mapped, [-1.0, 1.0, 0.0, -1.0, 1.0, -1.0 / 3.0], atol=1e-6)
    hounsfield = np.linspace(-1000, 2000, 301, dtype=np.float32)
    back = from_network(to_network(hounsfield, window), window)
    assert back.dtype == np.float32
    np.testing.assert_allclose(back, hounsfield, atol=1e-3)


# ------------------------------------------------------------------------------------------ training patches
@pytest.mark.parametrize("direction", ["AtoB", "BtoA"])
def test_paired_patches_are_cut_at_the_same_place_and_flipped_alike(tmp_path, direction):
    # B = 1000 - A voxel for voxel, both windowed 0..1000: B's patch must be minus A's patch, everywhere.
    root = paired_root(tmp_path, lambda A: (1000 - A).astype(np.int16))
    dataset = built(train_opt(root, tmp_path, "--patch_size", "8,6,5", "--data_range", "0", "1000",
                              "--direction", direction))
    assert isinstance(dataset, AlignedVolumeDataset) and dataset.paired and dataset.spatial_dims == 3
    flipped = set()
    for epoch in range(4):
        dataset.set_epoch(epoch)
        for index in range(len(dataset)):
            item = dataset[index]
            assert item["A"].shape == item["B"].shape == (1, 8, 6, 5)
            torch.testing.assert_close(item["B"], -item["A"], atol=1e-6, rtol=0)
            whole = read_volume(item["A_paths"], 1).array[0]
            flipped.add(_placement(to_network(whole, (0, 1000)), item["A"][0].numpy())[1])
    assert flipped == {False, True}  # flips happen (to both alike), else the check above would be weak


def _placement(volume: np.ndarray, patch: np.ndarray) -> tuple[tuple[int, int, int], bool]:
    """Where in `volume` (D, H, W) `patch` was cut, and whether it was flipped along the first axis."""
    size = patch.shape
    for corner in np.ndindex(*(n - p + 1 for n, p in zip(volume.shape, size))):
        box = volume[tuple(slice(c, c + s) for c, s in zip(corner, size))]
        for flip in (False, True):
            if np.array_equal(box[::-1] if flip else box, patch):
                return corner, flip
    raise AssertionError("patch not found in its volume")


def test_pairs_in_phase_slash_A_and_B_are_found_by_name_across_formats_with_their_own_channel_counts(tmp_path):
    rng = np.random.default_rng(7)
    for side in "AB":
        (tmp_path / "data" / "train" / side).mkdir(parents=True)
    for name in ("p1", "p2"):
        scan = ct_like(rng)
        save_nifti(tmp_path / "data" / "train" / "A" / f"{name}.nii.gz", scan)
        np.save(tmp_path / "data" / "train" / "B" / f"{name}.npy", np.stack([scan, 1000 - scan]))  # C x D x H x W
    dataset = built(train_opt(tmp_path / "data", tmp_path, "--patch_size", "8", "--data_range", "0", "1000",
                              channels=("1", "2")))
    item = dataset[1]
    assert item["A_paths"].endswith(os.path.join("A", "p2.nii.gz")) and item["B_paths"].endswith("p2.npy")
    assert item["B"].shape == (2, 8, 8, 8)
    torch.testing.assert_close(item["B"][0], item["A"][0], atol=1e-6, rtol=0)
    torch.testing.assert_close(item["B"][1], -item["A"][0], atol=1e-6, rtol=0)


def test_intensity_jitter_changes_only_the_input_side_of_a_pair(tmp_path):
    root = paired_root(tmp_path, lambda A: (1000 - A).astype(np.int16))
    flags = ["--patch_size", "8", "--data_range", "0", "1000"]
    for direction, input_side, target_side in (("AtoB", "A", "B"), ("BtoA", "B", "A")):
        plain = built(train_opt(root, tmp_path, *flags, "--direction", direction))
        jittered = built(train_opt(root, tmp_path, *flags, "--direction", direction, "--intensity_jitter", "0.2"))
        a, b = plain[0], jittered[0]
        assert torch.equal(a[target_side], b[target_side])  # same place, untouched
        assert not torch.equal(a[input_side], b[input_side])
        inside = a[input_side].abs() < 0.7  # away from the clipping: an affine map of the plain values
        scale, shift = np.polyfit(a[input_side][inside].numpy(), b[input_side][inside].numpy(), 1)
        assert abs(scale - 1) <= 0.2 and abs(shift) <= 0.2 + 1e-6 and (scale, shift) != pytest.approx((1, 0))


def test_the_same_seed_epoch_and_index_give_the_same_patch_and_another_epoch_another(tmp_path):
    root = paired_root(tmp_path, lambda A: A)
    opt = train_opt(root, tmp_path, "--patch_size", "8", "--data_range", "-1000", "2000")
    first, second = built(opt, seed=5), built(opt, seed=5)  # separate caches, as in separate loader workers
    first.set_epoch(3)
    second.set_epoch(3)
    assert torch.equal(second[1]["A"], first[1]["A"])
    second.set_epoch(4)
    assert not torch.equal(second[1]["A"], first[1]["A"])
    assert not torch.equal(built(opt, seed=6)[1]["A"], built(opt, seed=5)[1]["A"])


def test_loader_processes_cut_the_same_patches_as_the_main_process(tmp_path):
    root = paired_root(tmp_path, lambda A: A, count=3)
    flags = ["--patch_size", "8", "--data_range", "-1000", "2000", "--foreground_fraction", "0.5", "--batch_size", "3"]
    batches = []
    for threads in ("0", "2"):
        loader = create_dataset(train_opt(root, tmp_path, *flags, "--num_threads", threads), seed=1)
        loader.set_epoch(2)
        batches.append(next(iter(loader)))
    assert batches[0]["A_paths"] == batches[1]["A_paths"] and torch.equal(batches[0]["A"], batches[1]["A"])


def mostly_air(tmp_path) -> str:
    """trainA/trainB of volumes at -1000 HU but for two small blobs of tissue."""
    for side in "AB":
        (tmp_path / "data" / f"train{side}").mkdir(parents=True, exist_ok=True)
        volume = np.full(SHAPE, -1000, dtype=np.int16)
        volume[10:12, 12:14, 7:9] = 40
        volume[5, 18, 10] = 300
        save_nifti(tmp_path / "data" / f"train{side}" / "scan.nii.gz", volume)
    return tmp_path / "data"


@pytest.mark.parametrize("mode", ["aligned_volume", "unaligned_volume"])
def test_foreground_fraction_one_centres_every_patch_on_foreground_of_a_volume_mostly_air(tmp_path, mode):
    root = mostly_air(tmp_path)
    flags = ["--patch_size", "9", "--data_range", "-1000", "2000"]  # odd: the centre stays the centre when flipped

    def centres(fraction: str) -> list[float]:
        dataset = built(train_opt(root, tmp_path, *flags, "--foreground_fraction", fraction, mode=mode))
        values = []
        for epoch in range(30):
            dataset.set_epoch(epoch)
            item = dataset[0]
            values += [float(item[side][0, 4, 4, 4]) for side in "AB"]
        return values

    threshold = -1 + 2 * 0.05  # 5 % of the window above its low end
    assert all(v > threshold for v in centres("1"))
    assert sum(v > threshold for v in centres("0")) < 10  # uniform placement hits the blobs rarely


def test_the_volume_cache_never_holds_more_than_volume_cache_mb_and_changes_no_patch(tmp_path):
    rng = np.random.default_rng(4)
    for side in "AB":
        (tmp_path / "data" / f"train{side}").mkdir(parents=True)
        for k in range(5):
            save_nifti(tmp_path / "data" / f"train{side}" / f"s{k}.nii", ct_like(rng))
    flags = ["--patch_size", "8", "--data_range", "-1000", "2000", "--foreground_fraction", "0.5"]
    budget_mb = 0.07  # two of these volumes (30 kB each as float32), not three
    small = built(train_opt(tmp_path / "data", tmp_path, *flags, "--volume_cache_mb", str(budget_mb),
                            mode="unaligned_volume"))
    lazy = built(train_opt(tmp_path / "data", tmp_path, *flags, "--volume_cache_mb", "0", mode="unaligned_volume"))
    roomy = built(train_opt(tmp_path / "data", tmp_path, *flags, mode="unaligned_volume"))
    held = set()
    for epoch in range(3):
        for dataset in (small, lazy, roomy):
            dataset.set_epoch(epoch)
        for index in range(len(small)):
            item = small[index]
            assert small.reader.cache.nbytes <= budget_mb * 2 ** 20
            held.add(small.reader.cache.nbytes)
            for other in (lazy[index], roomy[index]):
                assert torch.equal(other["A"], item["A"]) and torch.equal(other["B"], item["B"])
    assert max(held) > 0 and lazy.reader.cache.nbytes == 0
    assert roomy.reader.cache.nbytes > budget_mb * 2 ** 20  # the default keeps them all


def test_items_are_batched_by_the_default_collate_and_inference_gets_whole_volumes(tmp_path):
    root = paired_root(tmp_path, lambda A: A, count=3)
    loader = create_dataset(train_opt(root, tmp_path, "--patch_size", "8,8,4", "--data_range", "-1000", "2000",
                                      "--batch_size", "2"), seed=0)
    batch = next(iter(loader))
    assert batch["A"].shape == batch["B"].shape == (2, 1, 8, 8, 4) and batch["A"].dtype == torch.float32
    assert len(batch["A_paths"]) == 2 and batch["A"].abs().max() <= 1

    opt = TestOptions().parse(["--dataroot", str(root), "--phase", "train", "--dataset_mode", "aligned_volume",
                               "--model", "pix2pix", *NETS_3D, "--input_nc", "1", "--output_nc", "1",
                               "--data_range", "-1000", "2000"])
    item = create_dataset(opt, 0).dataset[0]
    whole = to_network(read_volume(item["A_paths"], 1).array, (-1000, 2000))
    assert torch.equal(item["A"], torch.from_numpy(whole))  # no patch, flip or jitter


def test_unaligned_volumes_take_a_random_B_per_A_or_with_serial_batches_the_next_in_order(tmp_path):
    rng = np.random.default_rng(5)
    for side, count in (("A", 2), ("B", 5)):
        (tmp_path / "data" / f"train{side}").mkdir(parents=True)
        for k in range(count):
            np.save(tmp_path / "data" / f"train{side}" / f"{k}.npy", ct_like(rng, (12, 12, 12)))
    flags = ["--patch_size", "8", "--data_range", "-1000", "2000"]
    serial = built(train_opt(tmp_path / "data", tmp_path, *flags, "--serial_batches", mode="unaligned_volume"))
    assert isinstance(serial, UnalignedVolumeDataset) and len(serial) == 5
    assert [os.path.basename(serial[i]["B_paths"]) for i in range(5)] == [f"{k}.npy" for k in range(5)]
    assert [os.path.basename(serial[i]["A_paths"]) for i in range(5)] == ["0.npy", "1.npy"] * 2 + ["0.npy"]
    shuffled = built(train_opt(tmp_path / "data", tmp_path, *flags, mode="unaligned_volume"))
    partners = set()
    for epoch in range(10):
        shuffled.set_epoch(epoch)
        partners.add(shuffled[0]["B_paths"])
    assert len(partners) > 2


# ------------------------------------------------------------------------------------------ bad input
def one_paragraph(err: UserError) -> str:
    text = str(err)
    assert "\n" not in text and "Traceback" not in text
    return text


def single_domain_pair(tmp_path, shape_A=SHAPE, shape_B=SHAPE, dtype=np.int16, name="case.nii.gz"):
    rng = np.random.default_rng(6)
    paths = []
    for side, shape in (("A", shape_A), ("B", shape_B)):
        (tmp_path / "data" / f"train{side}").mkdir(parents=True, exist_ok=True)
        paths.append(save_nifti(tmp_path / "data" / f"train{side}" / name, rng.integers(0, 200, shape).astype(dtype)))
    return tmp_path / "data", paths


@pytest.mark.parametrize("flag, value", [("--patch_size", "64,64"), ("--patch_size", "0"),
                                         ("--foreground_fraction", "1.5"), ("--intensity_jitter", "-0.1")])
def test_a_bad_volume_flag_value_exits_2_in_one_line_naming_the_flag(tmp_path, capsys, flag, value):
    with pytest.raises(SystemExit) as refused:
        train_opt(tmp_path, tmp_path, flag, value)
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: argument {flag}: ") and repr(value) in err


def test_patch_size_is_one_side_for_a_cube_or_three_in_the_files_voxel_order(tmp_path):
    assert train_opt(tmp_path, tmp_path).patch_size == (64, 64, 64)
    assert train_opt(tmp_path, tmp_path, "--patch_size", "32").patch_size == (32, 32, 32)
    assert train_opt(tmp_path, tmp_path, "--patch_size", "64,48,16").patch_size == (64, 48, 16)


def test_a_volume_smaller_than_the_patch_is_refused_naming_it_its_shape_and_patch_size(tmp_path):
    root, (path_A, _) = single_domain_pair(tmp_path)
    with pytest.raises(UserError) as refused:
        built(train_opt(root, tmp_path, "--patch_size", "32,16,16", "--data_range", "0", "200"))
    text = one_paragraph(refused.value)
    assert path_A in text and "20x24x16" in text and "--patch_size 32,16,16" in text


def test_paired_volumes_of_different_shapes_are_refused_naming_both_files_and_shapes(tmp_path):
    root, (path_A, path_B) = single_domain_pair(tmp_path, shape_B=(20, 24, 15))
    with pytest.raises(UserError) as refused:
        built(train_opt(root, tmp_path, "--patch_size", "8", "--data_range", "0", "200"))
    text = one_paragraph(refused.value)
    assert all(part in text for part in (path_A, "20x24x16", path_B, "20x24x15", "--dataset_mode unaligned_volume"))


def test_a_4d_file_where_a_3d_volume_is_wanted_is_refused_naming_it_and_the_channel_flag(tmp_path):
    root, (path_A, _) = single_domain_pair(tmp_path, shape_A=(*SHAPE, 2))
    with pytest.raises(UserError) as refused:
        built(train_opt(root, tmp_path, "--patch_size", "8", "--data_range", "0", "200"))
    text = one_paragraph(refused.value)
    assert path_A in text and "--input_nc" in text and "a 4-D file where a 3-D volume is wanted" in text
    assert "set --input_nc 2" in text
    # ... and with --direction BtoA domain A is the output: the flag named is --output_nc.
    with pytest.raises(UserError, match=re.escape(path_A) + ".*--output_nc"):
        built(train_opt(root, tmp_path, "--patch_size", "8", "--data_range", "0", "200", "--direction", "BtoA"))


def test_a_cut_short_nii_gz_is_refused_naming_it_before_any_model_is_built(tmp_path):
    root, (path_A, _) = single_domain_pair(tmp_path)
    whole = open(path_A, "rb").read()
    with open(path_A, "wb") as f:
        f.write(whole[: len(whole) * 2 // 3])
    with gzip.open(path_A) as stream:  # the header still reads: only the data is cut short
        assert len(stream.read(348)) == 348
    with pytest.raises(UserError) as refused:
        built(train_opt(root, tmp_path, "--patch_size", "8", "--data_range", "0", "200"))
    text = one_paragraph(refused.value)
    assert path_A in text and "cut short" in text
    with pytest.raises(UserError, match=re.escape(path_A)):
        read_volume(path_A, 1)


def test_a_nii_gz_with_data_appended_after_its_volume_is_read_no_further_than_its_header_says(tmp_path):
    # A second gzip member after the volume (its trailer then disagrees with the header, so the file is decompressed
    # to check that it is complete), whose data is no deflate stream: reading it would fail, and reading a large one
    # would take as long as it is large.
    root, (path_A, _) = single_domain_pair(tmp_path)
    expected = read_volume(path_A, 1).array
    with open(path_A, "ab") as f:
        f.write(gzip.compress(b"\0" * 1024)[:10] + b"\xff" * 4096)
    assert probe_volume(path_A).shape == volume_shape(path_A) and np.array_equal(read_volume(path_A, 1).array, expected)


def test_a_file_that_is_no_nifti_is_refused_naming_it(tmp_path):
    root, (path_A, _) = single_domain_pair(tmp_path)
    with open(path_A, "wb") as f:
        f.write(b"<html>404 not found</html>")
    with pytest.raises(UserError, match=f"cannot read volume {re.escape(path_A)}"):
        built(train_opt(root, tmp_path, "--patch_size", "8", "--data_range", "0", "200"))


def test_an_integer_volume_without_data_range_is_refused_naming_it_the_flag_and_the_script(tmp_path):
    root, (path_A, _) = single_domain_pair(tmp_path)
    with pytest.raises(UserError) as refused:
        built(train_opt(root, tmp_path, "--patch_size", "8"))
    text = one_paragraph(refused.value)
    assert all(part in text for part in (path_A, "int16", "--data_range -1000 2000", "scripts/data_range.py"))


def test_uint8_volumes_need_no_data_range(tmp_path):
    root, (path_A, _) = single_domain_pair(tmp_path, dtype=np.uint8)
    item = built(train_opt(root, tmp_path, "--patch_size", "8"))[0]
    assert -1 <= float(item["A"].min()) and float(item["A"].max()) <= 1
    assert probe_volume(path_A).dtype == np.uint8


def test_a_folder_without_volumes_is_refused_saying_which_files_count(tmp_path):
    (tmp_path / "data" / "trainA").mkdir(parents=True)
    (tmp_path / "data" / "trainB").mkdir()
    (tmp_path / "data" / "trainA" / "notes.txt").write_text("x")
    with pytest.raises(UserError, match=r"trainA contains no volumes; accepted extensions are \.nii, \.nii\.gz, \.npy"):
        built(train_opt(tmp_path / "data", tmp_path, "--data_range", "0", "1", mode="unaligned_volume"))


# ------------------------------------------------------------------------------------------ a real scan
def test_nibabels_anatomical_scan_reads_through_the_dataset_and_an_output_lies_over_it(tmp_path):
    for side in "AB":
        (tmp_path / "data" / f"train{side}").mkdir(parents=True)
        os.symlink(ANATOMICAL, tmp_path / "data" / f"train{side}" / "anatomical.nii")
    scan = nib.load(ANATOMICAL)
    assert scan.shape == (33, 41, 25) and scan.get_data_dtype().name == "int16"  # big-endian
    window = ("0", "20000")

    dataset = built(train_opt(tmp_path / "data", tmp_path, "--patch_size", "16", "--data_range", *window,
                              "--foreground_fraction", "1", "--no_flip"))
    item = dataset[0]
    assert item["A"].shape == (1, 16, 16, 16)
    corner, flipped = _placement(to_network(np.asanyarray(scan.dataobj), (0, 20000)), item["A"][0].numpy())
    assert not flipped and item["A"][0, 8, 8, 8] > -0.9  # the centre voxel is foreground (the head, not air)

    opt = TestOptions().parse(["--dataroot", str(tmp_path / "data"), "--phase", "train", "--dataset_mode",
                               "aligned_volume", "--model", "pix2pix", *NETS_3D, "--input_nc", "1", "--output_nc",
                               "1", "--data_range", *window])
    whole = create_dataset(opt, 0).dataset[0]["A"]
    assert whole.shape == (1, 33, 41, 25)
    hounsfield = from_network(whole.numpy(), (0, 20000))
    np.testing.assert_allclose(hounsfield[0], np.clip(np.asanyarray(scan.dataobj), 0, 20000), atol=0.01)

    out = str(tmp_path / "translated.nii.gz")
    write_volume(out, hounsfield, read_volume(ANATOMICAL, 1).reference)
    written = nib.load(out)
    assert written.shape == scan.shape and np.array_equal(written.affine, scan.affine)
    assert written.header.get_zooms() == (2.0, 2.0, 2.0)


def test_data_range_script_prints_robust_percentiles_of_the_volumes(tmp_path, capsys):
    for side in "AB":
        (tmp_path / "data" / f"train{side}").mkdir(parents=True)
    values = np.arange(np.prod(SHAPE), dtype=np.float32).reshape(SHAPE)
    save_nifti(tmp_path / "data" / "trainA" / "a.nii.gz", values)
    os.symlink(ANATOMICAL, tmp_path / "data" / "trainB" / "anatomical.nii")
    script = load_script("scripts/data_range.py")
    assert script.main(["--dataroot", str(tmp_path / "data"), "--per_domain"]) == 0
    flag = capsys.readouterr().out.strip().splitlines()[-1]
    numbers = [float(v) for v in flag.split()[1:]]
    expected = [*np.percentile(values, [0.5, 99.5]), *np.percentile(np.asanyarray(nib.load(ANATOMICAL).dataobj),
                                                                      [0.5, 99.5])]
    assert flag.startswith("--data_range ")
    np.testing.assert_allclose(numbers, expected, rtol=1e-5)


def test_volume_modes_are_found_by_name():
    assert find_dataset_using_name("aligned_volume") is AlignedVolumeDataset
    assert find_dataset_using_name("unaligned_volume") is UnalignedVolumeDataset
