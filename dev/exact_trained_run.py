"""What exactness buys on a trained run: a large picture translated whole, exactly in tiles, and cross-faded.

    bash scripts/demo.sh cyclegan   # or any run; then:
    python dev/exact_trained_run.py --checkpoint checkpoints/demo_cyclegan --size 4096x3072

The picture is a held-out input of the run's dataset (--picture; default: the first of the demo's testA),
enlarged to --size with nearest-neighbour sampling (a large picture in the run's own input domain). The table
gives each mode's time and its largest and mean difference from the whole forward, in [-1, 1] units.
Modes: whole (one forward; needs the memory), exact (--exact_memory's default), crossfade (--tile 512
--tile_overlap 64). docs/benchmarks.md keeps the latest table with the command that produced it.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from models.inference.exact import ExactBudget  # noqa: E402
from models.inference.translator import Translator  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--checkpoint", required=True, help="a run folder")
    parser.add_argument("--picture", default="datasets/demo_scenes/testA", help="a picture, or a folder (its first)")
    parser.add_argument("--size", default="4096x3072", help="WIDTHxHEIGHT of the enlarged picture")
    args = parser.parse_args()
    width, height = (int(side) for side in args.size.lower().split("x"))
    source = Path(args.picture)
    source = sorted(source.iterdir())[0] if source.is_dir() else source
    picture = np.asarray(Image.open(source).convert("RGB").resize((width, height), Image.NEAREST))
    x = torch.from_numpy(picture).permute(2, 0, 1)[None].float() / 127.5 - 1
    print(f"python {' '.join(sys.argv)}\n{args.checkpoint}: {source.name} enlarged to {width}x{height}")
    outputs = {}
    for mode in ("whole", "exact", "crossfade"):
        translator = Translator.load(args.checkpoint, device="cpu", exact=None if mode == "whole" else ExactBudget())
        began = time.perf_counter()
        outputs[mode] = translator.translate(x, tile=512 if mode == "crossfade" else 0, tile_overlap=64)
        print(f"{mode}: {time.perf_counter() - began:.1f} s", flush=True)
    print("| mode | max abs diff from whole | mean abs diff |\n|---|---|---|")
    for mode in ("exact", "crossfade"):
        gap = (outputs[mode] - outputs["whole"]).abs()
        print(f"| {mode} | {gap.max().item():.2e} | {gap.mean().item():.2e} |")


if __name__ == "__main__":
    main()
