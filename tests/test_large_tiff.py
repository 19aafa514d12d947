"""Large TIFFs by region (data/large_tiff.py): a region read from any tiled or striped, classic or
BigTIFF file equals the same slice of the whole image, and touches only the tiles it overlaps; a file
written region by region reads back as written, appears only once complete, and never replaces an
existing file with a partial one; headers declaring more than the limits are refused, naming the file."""
from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import pytest
import tifffile

from data.large_tiff import MAX_TIFF_PIXELS, TiffRegions, TiffRegionWriter, needs_bigtiff
from util.errors import UserError

ROOT = Path(__file__).resolve().parents[1]


def random_image(shape: tuple[int, ...], dtype: type, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(0, np.iinfo(dtype).max, shape, dtype=dtype, endpoint=True)


def constant_tiles_file(path: Path, height: int, width: int, tile: int, value: int, dtype: type,
                        bands: int = 1) -> None:
    """A tiled, deflate-compressed file of `height` x `width` pixels, all `value`, written from one
    compressed tile repeated: the file is a few megabytes at most, whatever size it declares."""
    shape = (height, width, bands) if bands > 1 else (height, width)
    compressed_tile = zlib.compress(np.full((tile, tile, bands), value, dtype).tobytes())
    count = -(-height // tile) * -(-width // tile)
    with tifffile.TiffWriter(path, bigtiff=True) as tif:
        tif.write(iter([compressed_tile] * count), shape=shape, dtype=dtype, tile=(tile, tile), compression="zlib",
                  photometric="minisblack", planarconfig="contig" if bands > 1 else None, metadata=None)


# Regions: the whole image, one crossing tile and strip boundaries, the last pixel, a full row, a column.
REGIONS = [(0, 97, 0, 131), (5, 77, 13, 120), (96, 97, 130, 131), (40, 41, 0, 131), (0, 97, 64, 65)]

LAYOUTS = {
    "tiled 8-bit RGB": ((97, 131, 3), np.uint8, dict(tile=(32, 48))),
    "striped, deflate": ((97, 131, 3), np.uint8, dict(rowsperstrip=10, compression="zlib")),
    "one uncompressed strip": ((97, 131, 3), np.uint8, {}),
    "BigTIFF, tiled, LZW": ((97, 131, 3), np.uint16, dict(tile=(32, 32), compression="lzw", bigtiff=True)),
    "16-bit grey 2-D page": ((97, 131), np.uint16, dict(tile=(16, 64))),
    "float32, predictor": ((97, 131, 1), np.float32, dict(tile=(32, 32), compression="zlib", predictor=True)),
    "5 bands": ((97, 131, 5), np.uint16, dict(tile=(48, 32), photometric="minisblack", planarconfig="contig")),
    "RGBA": ((97, 131, 4), np.uint8, dict(rowsperstrip=16, compression="zlib", extrasamples=["unassalpha"])),
}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_regions_equal_numpy_slices_of_the_whole_image(tmp_path, layout):
    shape, dtype, options = LAYOUTS[layout]
    image = random_image(shape, dtype)
    tifffile.imwrite(tmp_path / "image.tif", image, **options)
    expected = image.reshape(shape[0], shape[1], -1)
    with TiffRegions(tmp_path / "image.tif") as regions:
        assert regions.shape == expected.shape and regions.dtype == expected.dtype
        for top, bottom, left, right in REGIONS:
            np.testing.assert_array_equal(regions.read(top, bottom, left, right), expected[top:bottom, left:right])
        assert regions.read(10, 10, 3, 9).shape == (0, 6, expected.shape[2])


@pytest.mark.parametrize("options", [dict(tile=(32, 32)), dict(rowsperstrip=8, compression="zlib"), {}],
                         ids=["tiles", "strips", "one strip"])
def test_planes_stored_separately_read_as_bands(tmp_path, options):
    image = random_image((97, 131, 4), np.uint16)
    tifffile.imwrite(tmp_path / "planar.tif", image.transpose(2, 0, 1), planarconfig="separate",
                     photometric="minisblack", **options)
    with TiffRegions(tmp_path / "planar.tif") as regions:
        np.testing.assert_array_equal(regions.read(5, 77, 13, 120), image[5:77, 13:120])


def test_a_multi_page_file_reads_its_first_page(tmp_path):
    first, second = random_image((40, 50, 3), np.uint8, 1), random_image((40, 50, 3), np.uint8, 2)
    with tifffile.TiffWriter(tmp_path / "pages.tif") as tif:
        tif.write(first, tile=(16, 16))
        tif.write(second, tile=(16, 16))
    with TiffRegions(tmp_path / "pages.tif") as regions:
        np.testing.assert_array_equal(regions.read(0, 40, 0, 50), first)


def damage_segment(path: Path, index: int) -> None:
    """Overwrite the bytes of tile or strip `index` with bytes no decoder accepts."""
    with tifffile.TiffFile(path) as tif:
        offset, count = tif.pages[0].dataoffsets[index], tif.pages[0].databytecounts[index]
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(b"\xff" * count)


@pytest.mark.parametrize("options, damaged, outside, inside", [
    # 4 x 4 tiles of 32 x 32: tile 5 is rows 32..63, columns 32..63
    (dict(tile=(32, 32)), 5, [(0, 32, 0, 128), (32, 64, 0, 32), (32, 64, 64, 128), (64, 128, 0, 128)],
     (40, 41, 40, 41)),
    # strips of 16 rows: strip 3 is rows 48..63
    (dict(rowsperstrip=16), 3, [(0, 48, 0, 128), (64, 128, 0, 128)], (63, 64, 127, 128)),
], ids=["tiles", "strips"])
def test_a_region_decodes_only_the_tiles_or_strips_it_overlaps(tmp_path, options, damaged, outside, inside):
    image = random_image((128, 128, 3), np.uint8)
    path = tmp_path / "damaged.tif"
    tifffile.imwrite(path, image, compression="zlib", **options)
    damage_segment(path, damaged)
    with TiffRegions(path) as regions:
        for top, bottom, left, right in outside:
            np.testing.assert_array_equal(regions.read(top, bottom, left, right), image[top:bottom, left:right])
        with pytest.raises(UserError, match=f"{path}.*damaged"):
            regions.read(*inside)


def test_tiles_missing_from_a_sparse_file_read_as_zero(tmp_path):
    def every_third_tile_missing():
        for index in range(16):
            yield None if index % 3 == 1 else np.full((32, 32), 5, np.uint16)

    with tifffile.TiffWriter(tmp_path / "sparse.tif") as tif:
        tif.write(every_third_tile_missing(), shape=(128, 128), dtype=np.uint16, tile=(32, 32), compression="zlib")
    with TiffRegions(tmp_path / "sparse.tif") as regions:
        assert regions.read(0, 32, 0, 128)[::32, ::32, 0].tolist() == [[5, 0, 5, 5]]


@pytest.mark.parametrize("options", [dict(tile=(32, 32), compression="zlib"), {}], ids=["tiles", "one raw strip"])
def test_a_truncated_file_reads_up_to_the_cut_then_is_refused_naming_itself(tmp_path, options):
    image = random_image((128, 128, 3), np.uint8)
    path = tmp_path / "cut.tif"
    tifffile.imwrite(path, image, **options)
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 3000)  # the last tile, or the last ~8 rows
    with TiffRegions(path) as regions:
        np.testing.assert_array_equal(regions.read(0, 32, 0, 128), image[:32])
        with pytest.raises(UserError, match=f"{path} is damaged"):
            regions.read(0, 128, 0, 128)


READ_UNDER_MEMORY_LIMIT = """
import importlib.util, resource, sys
import numpy as np
root, path = sys.argv[1:]
sys.path.insert(0, root)
# data/large_tiff.py alone, without the data package (which imports torch)
spec = importlib.util.spec_from_file_location("large_tiff", f"{root}/data/large_tiff.py")
large_tiff = importlib.util.module_from_spec(spec)
spec.loader.exec_module(large_tiff)
in_use = int(next(line for line in open("/proc/self/status") if line.startswith("VmSize")).split()[1]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (in_use + 2 ** 30, resource.getrlimit(resource.RLIMIT_AS)[1]))
try:
    np.empty((32768, 32768), np.uint16)
    sys.exit("the limit does not bite: the whole image could be allocated")
except MemoryError:
    pass
with large_tiff.TiffRegions(path) as regions:
    region = regions.read(20000, 20100, 5000, 5100)
assert region.shape == (100, 100, 1) and (region == 7).all(), region
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the address space from /proc (Linux)")
def test_a_region_of_an_image_larger_than_memory_reads_within_1_gib(tmp_path):
    # 32768 x 32768 uint16: 2 GiB of pixels, in a 2 MB file of constant tiles
    path = tmp_path / "huge.tif"
    constant_tiles_file(path, 32768, 32768, tile=1024, value=7, dtype=np.uint16)
    assert path.stat().st_size < 2 ** 22
    result = subprocess.run([sys.executable, "-c", READ_UNDER_MEMORY_LIMIT, str(ROOT), str(path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("shape, dtype, grid, tile, compression", [
    ((1000, 700, 3), np.uint16, 256, 128, None),
    ((1000, 700, 3), np.uint16, 100, 64, "zlib"),   # grid rows not multiples of the tile: rows carried over
    ((333, 250, 1), np.float32, 90, 32, "lzw"),
    ((200, 170, 5), np.uint8, 200, 48, "deflate"),  # one grid row holds every tile row
], ids=["RGB uint16", "carried rows, zlib", "one band float32", "5 bands, one grid row"])
def test_an_image_written_by_grid_regions_reads_back_exactly(tmp_path, shape, dtype, grid, tile, compression):
    image = random_image(shape, dtype)
    height, width, bands = shape
    with TiffRegionWriter(tmp_path / "out.tif", height, width, bands, dtype, tile=tile,
                          compression=compression) as writer:
        for top in range(0, height, grid):
            for left in range(0, width, grid):
                writer.write(top, min(top + grid, height), left, min(left + grid, width),
                             image[top:top + grid, left:left + grid])
    assert os.listdir(tmp_path) == ["out.tif"]
    with tifffile.TiffFile(tmp_path / "out.tif") as tif:
        assert (tif.pages[0].tilelength, tif.pages[0].tilewidth) == (tile, tile)
        np.testing.assert_array_equal(tif.asarray().reshape(shape), image)
    with TiffRegions(tmp_path / "out.tif") as regions:
        bottom, right = min(301, height), min(170, width)
        np.testing.assert_array_equal(regions.read(17, bottom, 5, right), image[17:bottom, 5:right])


def test_the_writer_holds_one_grid_row_not_the_whole_image(tmp_path):
    height, width = 4096, 2048  # 8 MiB of uint8; one grid row of 100 rows is 200 KiB
    tracemalloc.start()
    try:
        with TiffRegionWriter(tmp_path / "out.tif", height, width, 1, np.uint8, tile=128) as writer:
            for top in range(0, height, 100):
                bottom = min(top + 100, height)
                writer.write(top, bottom, 0, width, np.full((bottom - top, width), top % 251, np.uint8))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < height * width // 4
    with TiffRegions(tmp_path / "out.tif") as regions:
        assert (regions.read(3900, 4000, 0, 2048) == 3900 % 251).all()


@pytest.mark.parametrize("existing", [False, True], ids=["no file before", "a file before"])
def test_a_writer_failing_midway_leaves_the_destination_as_it_was(tmp_path, existing):
    destination = tmp_path / "out.tif"
    if existing:
        destination.write_bytes(b"the previous result")
    image = random_image((300, 200, 3), np.uint8)
    with pytest.raises(RuntimeError, match="the model failed"):
        with TiffRegionWriter(destination, 300, 200, 3, np.uint8, tile=64) as writer:
            writer.write(0, 128, 0, 200, image[:128])
            raise RuntimeError("the model failed")
    assert os.listdir(tmp_path) == (["out.tif"] if existing else [])
    if existing:
        assert destination.read_bytes() == b"the previous result"


def test_a_writer_closed_before_its_last_row_writes_nothing(tmp_path):
    writer = TiffRegionWriter(tmp_path / "out.tif", 300, 200, 1, np.uint16, tile=64)
    writer.write(0, 150, 0, 200, np.zeros((150, 200), np.uint16))
    with pytest.raises(ValueError, match="closed after 150 of its 300 rows"):
        writer.close()
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("region", [(0, 100, 150, 200), (100, 200, 0, 100), (0, 50, 100, 200)],
                         ids=["skipped columns", "skipped rows", "grid row of another height"])
def test_regions_out_of_grid_order_are_refused_and_nothing_is_written(tmp_path, region):
    with pytest.raises(ValueError, match="expected"):
        with TiffRegionWriter(tmp_path / "out.tif", 200, 200, 1, np.uint8, tile=64) as writer:
            writer.write(0, 100, 0, 100, np.zeros((100, 100), np.uint8))
            top, bottom, left, right = region
            writer.write(top, bottom, left, right, np.zeros((bottom - top, right - left), np.uint8))
    assert os.listdir(tmp_path) == []


def test_bigtiff_is_chosen_when_the_file_may_exceed_4_gb(tmp_path):
    assert needs_bigtiff(40000, 40000, 3, np.uint8, None)       # 4.8 GB of pixels
    assert needs_bigtiff(30000, 30000, 3, np.uint8, "zlib")     # 2.7 GB, but compression may grow it
    assert not needs_bigtiff(30000, 30000, 3, np.uint8, None)
    huge = TiffRegionWriter(tmp_path / "huge.tif", 40000, 40000, 3, np.uint8)
    assert huge.bigtiff
    huge.abort()
    assert os.listdir(tmp_path) == []
    with TiffRegionWriter(tmp_path / "big.tif", 64, 64, 1, np.uint8, tile=32, bigtiff=True) as writer:
        writer.write(0, 64, 0, 64, np.ones((64, 64), np.uint8))
    with TiffRegions(tmp_path / "big.tif") as regions:
        assert regions.bigtiff and (regions.read(0, 64, 0, 64) == 1).all()


def test_files_that_are_not_tiffs_or_hold_no_image_are_refused_naming_them(tmp_path):
    not_tiff, no_pages = tmp_path / "notes.tif", tmp_path / "empty.tif"
    not_tiff.write_text("not an image")
    no_pages.write_bytes(b"II*\x00\x00\x00\x00\x00")  # a TIFF header whose first page is at offset 0: none
    for path in (not_tiff, no_pages, tmp_path / "missing.tif"):
        with pytest.raises(UserError, match=str(path)):
            TiffRegions(path)


def test_a_header_declaring_more_pixels_than_the_limit_is_refused_before_reading(tmp_path):
    path = tmp_path / "mosaic.tif"
    constant_tiles_file(path, 65536, 65536, tile=4096, value=0, dtype=np.uint8)  # 2**32 pixels, 8 MB file
    with pytest.raises(UserError, match=f"{path} declares an image of 65536 x 65536 pixels .* limit of "
                                        f"{MAX_TIFF_PIXELS} pixels.*max_pixels"):
        TiffRegions(path)
    tifffile.imwrite(tmp_path / "small.tif", np.zeros((100, 100), np.uint8))
    with pytest.raises(UserError, match="limit of 9999 pixels"):
        TiffRegions(tmp_path / "small.tif", max_pixels=9999)
    with TiffRegions(tmp_path / "small.tif", max_pixels=10000) as regions:
        assert regions.shape == (100, 100, 1)


def test_headers_declaring_too_many_bands_or_too_large_tiles_are_refused(tmp_path):
    tifffile.imwrite(tmp_path / "bands.tif", np.zeros((2, 2, 65), np.uint8), photometric="minisblack",
                     planarconfig="contig")
    with pytest.raises(UserError, match=f"{tmp_path / 'bands.tif'} declares 65 bands.*limit of 64"):
        TiffRegions(tmp_path / "bands.tif")
    # one tile of 16384 x 16384 x 4 bytes (1 GiB) would be decoded whole for any region
    with tifffile.TiffWriter(tmp_path / "tile.tif") as tif:
        tif.write(iter([b"\x00"]), shape=(16384, 16384, 4), dtype=np.uint8, tile=(16384, 16384),
                  compression="zlib", photometric="minisblack", planarconfig="contig", metadata=None)
    with pytest.raises(UserError, match=f"{tmp_path / 'tile.tif'} stores its image in tiles of 16384 x 16384"):
        TiffRegions(tmp_path / "tile.tif")


def test_colours_to_convert_are_refused_naming_the_encoding(tmp_path):
    colormap = np.zeros((3, 256), np.uint16)
    tifffile.imwrite(tmp_path / "palette.tif", np.zeros((8, 8), np.uint8), photometric="palette", colormap=colormap)
    with pytest.raises(UserError, match=f"{tmp_path / 'palette.tif'} stores its pixels as PALETTE"):
        TiffRegions(tmp_path / "palette.tif")
