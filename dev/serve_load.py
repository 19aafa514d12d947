"""The serving load test: scripts/serve.py under concurrent clients against scripts/translate.py on the same images.

    python dev/serve_load.py                          # 32 clients for 60 s, a CycleGAN (ngf 64) at 256 px
    python dev/serve_load.py --checkpoint checkpoints/horse2zebra --clients 8 --seconds 30

First scripts/translate.py translates the images as one folder (its own "translated N files in S s", the
model's loading left out); then scripts/serve.py is started on the same checkpoint and `--clients`
clients post the same images over and over for `--seconds`, each waiting for its answer before sending
the next. Prints requests answered, failures, images/s, p50/p99 latency, and the server's throughput as
a share of translate.py's; writes them as JSON with --out. Without --checkpoint it saves an untrained
CycleGAN run of the reference's default size (speed does not depend on training). Run it alone: a
second program on the cores slows whichever runs beside it.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def untrained_run(folder: Path, size: int) -> Path:
    """A CycleGAN run folder (resnet_9blocks, ngf 64, instance norm) as train.py saves one, untrained."""
    import torch

    from models import create_model
    from options.base_options import save_options
    from options.train_options import TrainOptions
    from util.distributed import DistContext
    opt = TrainOptions().parse(["--dataroot", "unused", "--name", "load_test", "--checkpoints_dir", str(folder),
                                "--model", "cycle_gan", "--display_id", "0", "--crop_size", str(size)])
    save_options(opt)
    torch.manual_seed(0)
    create_model(opt, DistContext()).save_networks("latest")
    return folder / "load_test"


def photos(folder: Path, count: int, size: int) -> list[Path]:
    """`count` smooth colour pictures with grain (PNG), as photos compress."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    paths = []
    for k in range(count):
        y, x = np.mgrid[0:size, 0:size] / size
        base = np.stack([np.sin(6 * x + k), np.cos(5 * y - k), np.sin(4 * (x + y) + 2 * k)], -1) * 0.4 + 0.5
        pixels = np.clip(base * 255 + rng.normal(0, 8, base.shape), 0, 255).astype(np.uint8)
        paths.append(folder / f"photo{k:03d}.png")
        Image.fromarray(pixels).save(paths[-1])
    return paths


def translate_py_rate(checkpoint: Path, images: Path, out: Path, device: str) -> float:
    """Images per second scripts/translate.py reports for the folder (its translating time only)."""
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "translate.py"), str(images), "--checkpoint",
                           str(checkpoint), "--output", str(out), "--device", device],
                          capture_output=True, text=True, check=True)
    found = re.search(r"translated (\d+) of \d+ files into .* in ([\d.]+) s", done.stdout)
    return int(found.group(1)) / float(found.group(2))


async def load(url: str, bodies: list[bytes], clients: int, seconds: float) -> tuple[list[float], list[str], float]:
    import httpx
    latencies: list[float] = []
    failures: list[str] = []
    stop = time.monotonic() + seconds

    async def client(index: int) -> None:
        async with httpx.AsyncClient(timeout=600) as http:
            k = index
            while time.monotonic() < stop:
                started = time.perf_counter()
                try:
                    answer = await http.post(f"{url}/translate", content=bodies[k % len(bodies)])
                    if answer.status_code != 200:
                        failures.append(f"{answer.status_code}: {answer.text[:200]}")
                    else:
                        latencies.append(time.perf_counter() - started)
                except httpx.HTTPError as err:
                    failures.append(repr(err))
                k += clients

    began = time.perf_counter()
    await asyncio.gather(*(client(index) for index in range(clients)))
    return latencies, failures, time.perf_counter() - began


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", help="a run folder; default: an untrained CycleGAN (ngf 64)")
    parser.add_argument("--images", type=int, default=32, help="distinct images (translate.py's folder)")
    parser.add_argument("--size", type=int, default=256, help="their side in pixels")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--device", default="cpu", help="where both translate (cpu, cuda, cuda:N)")
    parser.add_argument("--serve_flags", default="", help="more flags for scripts/serve.py, e.g. '--max_batch 4'")
    parser.add_argument("--out", help="write the figures here (JSON)")
    args = parser.parse_args(argv)
    if not 1 <= args.images <= 10_000 or not 16 <= args.size <= 4096 or not 1 <= args.clients <= 1000:
        parser.error("--images 1..10000, --size 16..4096 and --clients 1..1000")

    work = Path(tempfile.mkdtemp(prefix="serve_load_"))
    checkpoint = Path(args.checkpoint) if args.checkpoint else untrained_run(work / "checkpoints", args.size)
    paths = photos(work / "images", args.images, args.size)
    direct = translate_py_rate(checkpoint, work / "images", work / "translated", args.device)
    print(f"scripts/translate.py: {direct:.2f} images/s ({args.images} images, {args.size} px)", flush=True)

    server = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "serve.py"), "--checkpoint", str(checkpoint),
                               "--port", "0", "--devices", args.device, *args.serve_flags.split()],
                              stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        url = re.search(r"http://[\d.]+:\d+", line).group(0)
        bodies = [path.read_bytes() for path in paths]
        asyncio.run(load(url, bodies[:2], 2, 3.0))  # warm-up: the first calls allocate
        latencies, failures, wall = asyncio.run(load(url, bodies, args.clients, args.seconds))
    finally:
        server.terminate()
        server.wait(timeout=30)
    rate = len(latencies) / wall
    ordered = sorted(latencies)
    figures = {"clients": args.clients, "seconds": round(wall, 1), "answered": len(latencies),
               "failed": len(failures), "images_per_s": round(rate, 3),
               "p50_s": round(statistics.median(ordered), 3) if ordered else None,
               "p99_s": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 3) if ordered else None,
               "translate_py_images_per_s": round(direct, 3), "share_of_translate_py": round(rate / direct, 3),
               "images": args.images, "size": args.size, "device": args.device, "serve_flags": args.serve_flags,
               "cpu": os.cpu_count(), "first_failures": failures[:5]}
    print(json.dumps(figures, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(figures, indent=1))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
