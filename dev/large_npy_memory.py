"""The memory a float32 .npy picture too large to hold takes while `Translator.translate_file` translates it by regions
(models/inference/held_pictures.py maps it, in and out): the process's peak anonymous memory (what it holds itself)
and peak file-backed memory (mapped pages the system can write back and drop under pressure), sampled from
/proc/self/status every 50 ms, and ru_maxrss (both together).

    python dev/large_npy_memory.py --size 8192

The network is small (two 3x3 convolutions around an instance norm, 8 channels), so the picture's own memory shows
rather than the generator's maps; the budget is the default (1 GiB). The input is written by another process.
docs/benchmarks.md ("Large pictures, exactly") keeps the latest figures. Linux only (/proc).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

WRITE = r'''
import sys
import numpy as np
size, path = int(sys.argv[1]), sys.argv[2]
out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(size, size, 3))
for top in range(0, size, 512):
    rows = np.arange(top, min(top + 512, size))[:, None, None]
    out[top:top + 512] = np.sin(rows / 50.0 + np.arange(size)[None, :, None] / 70.0 + np.arange(3)) * 0.5 + 0.5
out.flush()
'''

CHILD = r'''
import json, resource, sys, threading, time
import torch
from torch import nn
sys.path.insert(0, sys.argv[1])
from models.inference.exact import ExactBudget
from models.inference.translator import Translator
peak = {"RssAnon": 0, "RssFile": 0}
def sample():
    while True:
        with open("/proc/self/status") as status:
            for line in status:
                key = line.split(":")[0]
                if key in peak:
                    peak[key] = max(peak[key], int(line.split()[1]) // 1024)
        time.sleep(0.05)
torch.manual_seed(0)
net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.InstanceNorm2d(8), nn.ReLU(), nn.Conv2d(8, 3, 3, padding=1),
                    nn.Tanh())
translator = Translator.from_generator(net, "resnet_6blocks", 3, 3, device="cpu", exact=ExactBudget())
threading.Thread(target=sample, daemon=True).start()
began = time.perf_counter()
translator.translate_file(sys.argv[2], sys.argv[3])
print(json.dumps({"seconds": round(time.perf_counter() - began, 1), "peak_anonymous_mb": peak["RssAnon"],
                  "peak_file_backed_mb": peak["RssFile"],
                  "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}))
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--size", type=int, default=8192, help="side of the square 3-band float32 picture")
    args = parser.parse_args()
    if not 256 <= args.size <= 32768:
        parser.error(f"--size {args.size}: give 256 to 32768 (the picture is written to the temporary folder)")
    with tempfile.TemporaryDirectory() as folder:
        source, output = str(Path(folder) / "big.npy"), str(Path(folder) / "out.npy")
        subprocess.run([sys.executable, "-c", WRITE, str(args.size), source], check=True)
        done = subprocess.run([sys.executable, "-c", CHILD, str(ROOT), source, output], capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(done.stderr.strip() or f"exit {done.returncode}")
    print(json.dumps({"size": args.size, **json.loads(done.stdout.strip().splitlines()[-1])}))


if __name__ == "__main__":
    main()
