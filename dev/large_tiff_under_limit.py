"""A 16-bit TIFF larger than the memory a process may take, translated in and out by regions under an
address-space limit (RLIMIT_AS, what `ulimit -v` sets): the picture is never whole in memory. And a PNG whose
float32 values do not fit under the limit, held as its 8-bit samples only.

    python dev/large_tiff_under_limit.py --height 32768 --width 32768 --out /tmp/large_tiff
    python dev/large_tiff_under_limit.py --height 8192 --width 16384 --png 4096x8192 --out /tmp/large_tiff

Writes OUT/huge.tif: a BigTIFF of one constant zlib-compressed tile repeated (a few MB on disk, HEIGHT x WIDTH
uint16 samples when decoded), then translates it in a child process through a small network (two
convolutions, the exact mode's regions with a 32 MiB budget). The child first translates a 2048 px TIFF
(so what loads once, libraries and the traced graph, is in memory), then caps its address space at what it
holds plus --headroom_mib, shows that neither the whole picture (uint16) nor its float32 values can be
allocated under the cap, translates OUT/huge.tif into OUT/out/huge.tif, and checks the output's size, dtype
and a region in its middle against the same network applied to a small constant picture. With --png, it then
shows that the PNG's float32 input and output cannot be allocated under the cap, translates OUT/wide.png (8-bit
gray, constant) into OUT/out/wide.png, and checks it likewise. Prints the time and the child's peak RSS.
tests/test_large_pictures.py runs the same at 8192 x 16384, with a 4096 x 8192 PNG.
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import tifffile

ROOT = Path(__file__).resolve().parents[1]
VALUE = 20000  # every input sample
PNG_VALUE = 150  # every sample of the PNG
TILE = 256

# Run by the child: ROOT, OUT, HEIGHT, WIDTH, HEADROOM_BYTES, VALUE, PNG_HEIGHT, PNG_WIDTH (0: no PNG), PNG_VALUE.
TRANSLATE_UNDER_LIMIT = """
import resource, sys
import numpy as np, tifffile, torch
from torch import nn
root, folder = sys.argv[1], sys.argv[2]
height, width, headroom, value, png_height, png_width, png_value = (int(number) for number in sys.argv[3:10])
sys.path.insert(0, root)
from data.large_tiff import TiffRegions
from models.inference.exact import ExactBudget
from models.inference.translator import Translator
torch.manual_seed(0)
net = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.ReLU(), nn.Conv2d(2, 1, 1), nn.Tanh())
translator = Translator.from_generator(net, "resnet_6blocks", 1, 1, device="cpu", exact=ExactBudget(memory=32 << 20))
whole = Translator.from_generator(net, "resnet_6blocks", 1, 1, device="cpu", exact=None)
inside = whole.translate(np.full((64, 64), value, np.uint16))[32, 32]  # where the zero padding reaches nothing
png_inside = whole.translate(np.full((64, 64), png_value, np.uint8))[32, 32]
# one translation by regions first: what it loads once (libraries, the traced graph) is not what is measured
tifffile.imwrite(f"{folder}/warm.tif", np.full((2048, 2048), value, np.uint16), tile=(256, 256))
translator.translate_file(f"{folder}/warm.tif", f"{folder}/out/warm.tif")
in_use = int(next(line for line in open("/proc/self/status") if line.startswith("VmSize")).split()[1]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (in_use + headroom, resource.getrlimit(resource.RLIMIT_AS)[1]))
for whole_picture in (lambda: np.ones((height, width), np.uint16), lambda: np.ones((height, width), np.float32)):
    try:
        whole_picture()
        sys.exit("the limit does not bite: the whole picture could be allocated")
    except MemoryError:
        pass
translator.translate_file(f"{folder}/huge.tif", f"{folder}/out/huge.tif")
with TiffRegions(f"{folder}/out/huge.tif") as written:
    assert written.shape == (height, width, 1) and written.dtype == np.uint16, (written.shape, written.dtype)
    middle = written.read(height // 2, height // 2 + 100, width // 2, width // 2 + 100)
assert (middle == inside).all(), (np.unique(middle), inside)
if png_height:  # the whole way would hold its float32 input and output at once
    try:
        whole_picture = np.ones((2, png_height, png_width), np.float32)
        sys.exit("the limit does not bite: the PNG's float32 input and output could be allocated")
    except MemoryError:
        pass
    translator.translate_file(f"{folder}/wide.png", f"{folder}/out/wide.png")
    from PIL import Image
    with Image.open(f"{folder}/out/wide.png") as written:
        assert written.size == (png_width, png_height) and written.mode == "L", (written.size, written.mode)
        middle = np.asarray(written.crop((png_width // 2, png_height // 2, png_width // 2 + 100,
                                          png_height // 2 + 100)))
    assert (middle == png_inside).all(), (np.unique(middle), png_inside)
"""


def write_constant_tiff(path: Path, height: int, width: int) -> None:
    """A tiled BigTIFF of HEIGHT x WIDTH uint16 samples, all VALUE: one compressed tile written again and
    again, so it is made without the picture ever being whole in memory."""
    if height % TILE or width % TILE:
        raise SystemExit(f"--height and --width must be multiples of {TILE}; got {height} x {width}")
    compressed_tile = zlib.compress(np.full((TILE, TILE), VALUE, np.uint16).tobytes())
    with tifffile.TiffWriter(path, bigtiff=True) as tif:
        tif.write(iter([compressed_tile] * (height // TILE * width // TILE)), shape=(height, width), dtype=np.uint16,
                  tile=(TILE, TILE), compression="zlib", photometric="minisblack", metadata=None)


def write_constant_png(path: Path, height: int, width: int) -> None:
    """An 8-bit gray PNG of HEIGHT x WIDTH samples, all PNG_VALUE."""
    from PIL import Image

    Image.fromarray(np.full((height, width), PNG_VALUE, np.uint8)).save(path)


def translate_under_limit(folder: Path, height: int, width: int, headroom_mib: int = 192,
                          timeout: float | None = None, png: tuple[int, int] = (0, 0)) -> subprocess.CompletedProcess:
    """Translate FOLDER/huge.tif into FOLDER/out/huge.tif (and, with `png` (height, width), FOLDER/wide.png into
    FOLDER/out/wide.png) in a child whose address space is capped (see the module's docstring). One thread each
    for torch and tifffile and few malloc arenas: the address space the run reserves, not the machine's core
    count, is what the limit measures."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TIFFFILE_NUM_THREADS": "1", "MALLOC_ARENA_MAX": "2"}
    return subprocess.run([sys.executable, "-c", TRANSLATE_UNDER_LIMIT, str(ROOT), str(folder), str(height),
                           str(width), str(headroom_mib << 20), str(VALUE), *map(str, png), str(PNG_VALUE)],
                          capture_output=True, text=True, timeout=timeout, env=env)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--height", type=int, default=32768, help="pixels, a multiple of 256")
    parser.add_argument("--width", type=int, default=32768, help="pixels, a multiple of 256")
    parser.add_argument("--headroom_mib", type=int, default=192,
                        help="address space allowed beyond what the child holds after its warm-up translation")
    parser.add_argument("--png", default="0x0", help="HEIGHTxWIDTH of an 8-bit PNG to translate too (0x0: none)")
    parser.add_argument("--out", type=Path, required=True, help="a folder for the input, the output and nothing else")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    png = tuple(int(side) for side in args.png.lower().split("x"))
    write_constant_tiff(args.out / "huge.tif", args.height, args.width)
    if png[0]:
        write_constant_png(args.out / "wide.png", *png)
    start = time.perf_counter()
    done = translate_under_limit(args.out, args.height, args.width, args.headroom_mib, png=png)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        print(done.stderr[-3000:], file=sys.stderr)
        return 1
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    samples_mib = args.height * args.width * 2 / 2 ** 20
    print(f"{args.height} x {args.width} uint16 ({samples_mib:.0f} MiB of samples, {2 * samples_mib:.0f} MiB as "
          f"float32) translated by regions under a cap of {args.headroom_mib} MiB beyond the warmed-up process: "
          f"{seconds:.1f} s including the warm-up, child's peak RSS {peak_mib:.0f} MiB; input "
          f"{(args.out / 'huge.tif').stat().st_size / 2 ** 20:.1f} MiB, output "
          f"{(args.out / 'out' / 'huge.tif').stat().st_size / 2 ** 20:.1f} MiB on disk"
          + (f"; and a {png[0]} x {png[1]} 8-bit PNG ({png[0] * png[1] * 4 / 2 ** 20:.0f} MiB as float32)" if png[0]
             else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
