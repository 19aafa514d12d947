"""Exact translation against cross-faded tiles and the whole forward on large pictures: time and peak memory.

    python dev/exact_translation.py --sizes 2048 --repeats 3
    python dev/exact_translation.py --sizes 8192 --modes exact,crossfade --nets resnet_9blocks --repeats 1
    python dev/exact_translation.py --sizes 8192 --modes tiff --nets resnet_9blocks --repeats 1
    python dev/exact_translation.py --sizes 4096 --modes tiff,png --nets resnet_9blocks --repeats 1

Each (network, size, mode) runs in a process of its own, so that its peak resident memory (ru_maxrss) is its own;
rounds alternate the modes, and the table gives each one's median time, its ratio to cross-fading's, its largest
peak RSS and, for exact and cross-fade, the largest difference from the whole forward where that was run.
Networks: resnet_9blocks (ngf 64, instance norm: CycleGAN's) and unet_256 (ngf 64, batch norm in training mode:
pix2pix's test.py without --eval), random weights (the cost does not depend on them), a smooth random picture.
Modes: whole (net(x), one piece), exact (models/inference/exact/ with --exact_memory, by default test.py's),
crossfade (--tile 512 --tile_overlap 64), all three on a float32 tensor that is whole in memory, input and output
(at 8192 px 805 MB each); and tiff: an 8-bit RGB TIFF file translated into one by `Translator.translate_file`
with that budget (models/inference/large_pictures.py: read, translated exactly and written by regions; eval mode,
so not for unet_256 in training mode); png: the same picture as an 8-bit PNG into a PNG (held as its samples,
translated by regions). docs/benchmarks.md keeps the latest table with the command that produced it.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # models/, for the default budget
NETS = {"resnet_9blocks": ("instance", False), "unet_256": ("batch", True)}  # norm, training mode

CHILD = r'''
import json, resource, sys, time
import torch
sys.path.insert(0, sys.argv[1])
from models import networks
from models.inference.application import InferenceGenerator
from models.inference.exact import ExactBudget
from models.inference.windows import Windows
net_name, size, mode, out = sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
budget = ExactBudget(memory=int(sys.argv[6]) << 20) if sys.argv[6] != "0" else ExactBudget()
norm, training = sys.argv[7], sys.argv[8] == "train"  # NETS' entry for net_name
torch.manual_seed(0)
net = networks.define_G(3, 3, 64, net_name, norm=norm).train(training)
rule = networks.size_rule(net_name)
# tiff, png: a file in, a file out, by regions, never whole as float32 (the parent wrote the input); before the
# float32 picture below is made, which is not these modes'
if mode in ("tiff", "png"):
    from models.inference.translator import Translator
    translator = Translator.from_generator(net, net_name, 3, 3, device="cpu", exact=budget)
    began = time.perf_counter()
    translator.translate_file(out + ".in" + out[-4:], out)
    seconds = time.perf_counter() - began
    import tifffile
    if mode == "tiff":
        with tifffile.TiffFile(out) as written:  # a tiled output is one written by regions
            assert written.pages.first.is_tiled, "the picture went the whole way: not what this mode measures"
    print(json.dumps({"seconds": seconds, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
    sys.exit(0)
yy, xx = torch.meshgrid(torch.linspace(-1, 1, size), torch.linspace(-1, 1, size), indexing="ij")
picture = torch.stack([torch.sin(3 * xx + yy), torch.cos(2 * yy * xx), torch.tanh(8 * (xx - 0.2))])[None]
del yy, xx
view = {"whole": InferenceGenerator(net, rule),
        "exact": InferenceGenerator(net, rule, exact=budget),
        "crossfade": InferenceGenerator(net, rule, Windows.for_tiles(512, 64))}[mode]
with torch.no_grad():
    began = time.perf_counter()
    output = view(picture)
    seconds = time.perf_counter() - began
torch.save(output.float(), out) if out != "-" else None
print(json.dumps({"seconds": seconds, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
'''


WRITE_RGB_PICTURE = r'''
import sys
import numpy as np, tifffile
size, path = int(sys.argv[1]), sys.argv[2]
rows = np.linspace(-1, 1, size, dtype=np.float32)[:, None]
columns = np.linspace(-1, 1, size, dtype=np.float32)[None, :]
picture = np.empty((size, size, 3), np.uint8)
for band, values in enumerate((lambda y, x: np.sin(3 * x + y), lambda y, x: np.cos(2 * y * x),
                               lambda y, x: np.tanh(8 * (x - 0.2)) + 0 * y)):
    picture[..., band] = np.round((values(rows, columns) + 1) * 127.5)
if path.endswith(".png"):
    from PIL import Image
    Image.fromarray(picture).save(path)
else:
    tifffile.imwrite(path, picture, tile=(256, 256), photometric="rgb")
'''


def run(net: str, size: int, mode: str, keep: Path | None, folder: Path, exact_memory: int) -> dict:
    out = str(keep) if keep else "-"
    if mode in ("tiff", "png"):
        from models.inference.exact.executor import DEFAULT_EXACT_MEMORY  # imports torch: only for these modes

        budget = exact_memory << 20 or DEFAULT_EXACT_MEMORY
        if size * size * 3 * 4 <= budget // 4:  # as models/inference/large_pictures.py decides
            return {"error": f"{size} px fits a quarter of the budget as float32: it goes the whole way; give a "
                             f"larger --sizes or a smaller --exact_memory"}
        # the input file is written by another process: its memory is not the translation's
        out = str(folder / ("tiff_out.tif" if mode == "tiff" else "png_out.png"))
        subprocess.run([sys.executable, "-c", WRITE_RGB_PICTURE, str(size), out + ".in" + out[-4:]], check=True)
    norm, training = NETS[net]
    done = subprocess.run([sys.executable, "-c", CHILD, str(ROOT), net, str(size), mode, out, str(exact_memory),
                           norm, "train" if training else "eval"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--sizes", default="2048", help="comma-separated sides of the square pictures")
    parser.add_argument("--nets", default="resnet_9blocks,unet_256")
    parser.add_argument("--modes", default="whole,exact,crossfade")
    parser.add_argument("--repeats", type=int, default=3, help="alternating rounds (times: medians)")
    parser.add_argument("--exact_memory", type=int, default=0,
                        help="the exact modes' budget in MiB (0: the default, as test.py's --exact_memory)")
    parser.add_argument("--whole_max", type=int, default=4096, help="the largest side the whole forward is run at")
    args = parser.parse_args()
    print(f"python {' '.join(sys.argv)}  (torch threads: {os.environ.get('OMP_NUM_THREADS', 'all')})")
    print("| network | size | mode | median s | vs crossfade | peak RSS MB | max diff vs whole | mean diff |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for net in args.nets.split(","):
            for size in map(int, args.sizes.split(",")):
                modes = [m for m in args.modes.split(",") if m != "whole" or size <= args.whole_max]
                found: dict[str, list[dict]] = {mode: [] for mode in modes}
                for round_ in range(args.repeats):
                    for mode in modes:
                        keep = Path(folder) / f"{mode}.pt" if round_ == 0 else None
                        found[mode].append(run(net, size, mode, keep, Path(folder), args.exact_memory))
                report(net, size, modes, found, Path(folder))


def report(net: str, size: int, modes: list[str], found: dict[str, list[dict]], folder: Path) -> None:
    import torch

    def median(mode: str) -> float | None:
        times = [r["seconds"] for r in found[mode] if "seconds" in r]
        return statistics.median(times) if times else None

    whole = torch.load(folder / "whole.pt").float() if (folder / "whole.pt").exists() and "whole" in modes else None
    for mode in modes:
        errors = [r["error"] for r in found[mode] if "error" in r]
        if errors:
            print(f"| {net} | {size} | {mode} | failed: {errors[0]} | | | | |")
            continue
        seconds, fade = median(mode), median("crossfade") if "crossfade" in modes else None
        ratio = f"{seconds / fade:.2f}x" if fade else ""
        rss = max(r["peak_rss_mb"] for r in found[mode])
        diff = mean = ""
        if whole is not None and mode != "whole" and (folder / f"{mode}.pt").exists():
            gap = (torch.load(folder / f"{mode}.pt").float() - whole).abs()
            diff, mean = f"{gap.max().item():.2e}", f"{gap.mean().item():.2e}"
        print(f"| {net} | {size} | {mode} | {seconds:.1f} | {ratio} | {rss:.0f} | {diff} | {mean} |", flush=True)
    for name in ("whole.pt", "exact.pt", "crossfade.pt"):
        (folder / name).unlink(missing_ok=True)


if __name__ == "__main__":
    main()
