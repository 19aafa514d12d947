"""Our train.py against the reference's (junyanz/pytorch-CycleGAN-and-pix2pix), side by side on this
machine: the same command line, the same real photos, rounds alternating which runs first.

    python dev/compare_reference.py --reference /path/to/pytorch-CycleGAN-and-pix2pix --out cmp_out
    python dev/compare_reference.py --reference REF --models pix2pix --rounds 3 --iterations 12 --out cmp_out

REF is a checkout of the reference (any version whose train.py runs on the CPU; the figures in
docs/benchmarks.md used commit 2a7afba, its 2025 DDP version). Both run with this Python. The data are
real photos: crops of the one photograph matplotlib ships (Grace Hopper), 8 of them, written as the
reference's aligned (A|B) and unaligned (trainA/trainB) layouts; a step's cost does not depend on the
content, only on its size. Each run trains `--iterations` images with the reference's defaults for the
model (256 px crops of 286 px images, batch 1), `--print_freq 1`, no HTML page and no display server
(the 2025 reference has no visdom; ours gets `--display_id 0`), data read in the main process.

Per run we record when each loss line arrives (unbuffered output) and the seconds per image of each
iteration that both train.py print in it (`time:`, computation only; `data:`, the wait for data). Reported per model and tool:
the median step (iterations after the first, pooled over rounds), the start-up (launch to the first
step), the end (last step to exit: the final save) and the whole run, medians over rounds.
Ratios are reference / ours: above 1.00x we are faster. Writes OUT/compare.json and OUT/compare.md.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEP_TIME = re.compile(r"^(?:\[Rank \d+\] )?\(epoch: \d+, iters: \d+, time: ([0-9.]+), data: ([0-9.]+)\)")
COMMON = ["--no_html", "--print_freq", "1", "--n_epochs", "1", "--n_epochs_decay", "0",
          "--save_epoch_freq", "1000", "--num_threads", "0"]
MODELS = {"pix2pix": ["--model", "pix2pix", "--direction", "AtoB"], "cycle_gan": ["--model", "cycle_gan"]}
TOOLS = ("ours", "reference")
# The reference (2a7afba) has no visdom display; ours is told not to reach for one either. (Its loss
# lines begin with "[Rank 0] ".)
TOOL_FLAGS = {"ours": ["--display_id", "0"], "reference": []}


def real_photo_crops(count: int, size: int) -> list:
    """`count` different size x size crops (and mirror images) of the photograph matplotlib ships."""
    import matplotlib.cbook
    from PIL import Image, ImageOps
    with matplotlib.cbook.get_sample_data("grace_hopper.jpg") as handle:
        photo = Image.open(handle).convert("RGB")
    photo = photo.resize((max(photo.width, size + count * 8), max(photo.height, size + count * 8)))
    crops = []
    for index in range(count):
        left, top = index * 8, (index * 13) % (photo.height - size + 1)
        crop = photo.crop((left, top, left + size, top + size))
        crops.append(ImageOps.mirror(crop) if index % 2 else crop)
    return crops


def write_datasets(root: Path, count: int = 8, size: int = 286) -> dict[str, Path]:
    """The aligned (pix2pix) and unaligned (CycleGAN) layouts, of real photos."""
    from PIL import Image
    photos = real_photo_crops(2 * count, size)
    aligned, unaligned = root / "aligned", root / "unaligned"
    for folder in (aligned / "train", unaligned / "trainA", unaligned / "trainB"):
        folder.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        a, b = photos[index], photos[count + index]
        pair = Image.new("RGB", (2 * size, size))
        pair.paste(a, (0, 0))
        pair.paste(b.convert("L").convert("RGB"), (size, 0))
        pair.save(aligned / "train" / f"{index}.jpg", quality=95)
        a.save(unaligned / "trainA" / f"{index}.jpg", quality=95)
        b.save(unaligned / "trainB" / f"{index}.jpg", quality=95)
    return {"pix2pix": aligned, "cycle_gan": unaligned}


def run_once(tool: str, folder: Path, model: str, dataroot: Path, iterations: int, out: Path, tag: str) -> dict:
    """One train.py run: its wall time, the per-image step times of its loss lines, its start-up
    (launch to the first step: the first loss line's arrival less that step's own time and data
    wait) and its end (the last loss line to exit: the final save and shutdown)."""
    command = [sys.executable, "-u", "train.py", "--dataroot", str(dataroot), "--name", tag,
               "--checkpoints_dir", str(out / "checkpoints" / tool), "--max_dataset_size", str(iterations),
               *MODELS[model], *COMMON, *TOOL_FLAGS[tool]]
    log_path = out / "logs" / f"{tag}_{tool}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    steps, arrivals, lines = [], [], []
    start = time.perf_counter()
    with subprocess.Popen(command, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        for line in proc.stdout:
            lines.append(line)
            if match := STEP_TIME.match(line):
                arrivals.append(time.perf_counter() - start)
                steps.append((float(match.group(1)), float(match.group(2))))
    wall = time.perf_counter() - start
    log_path.write_text("".join(lines))
    if proc.returncode != 0:
        raise SystemExit(f"compare_reference: {tool}'s train.py failed for {model} (exit {proc.returncode}); "
                         f"see {log_path}")
    if len(steps) != iterations:
        raise SystemExit(f"compare_reference: expected {iterations} loss lines from {tool}'s {model} run, found "
                         f"{len(steps)}; see {log_path}")
    first_compute, first_data = steps[0]
    return {"wall": wall, "steps": [compute for compute, _ in steps],
            "startup": arrivals[0] - first_compute - first_data, "end": wall - arrivals[-1]}


def summarise(runs: list[dict]) -> dict:
    """Median step (after each run's first, pooled over rounds); median start-up, end and wall time."""
    steady = [step for run in runs for step in run["steps"][1:]]
    return {"step": statistics.median(steady), "wall": statistics.median(run["wall"] for run in runs),
            "startup": statistics.median(run["startup"] for run in runs),
            "end": statistics.median(run["end"] for run in runs),
            "step_per_round": [statistics.median(run["steps"][1:]) for run in runs],
            "startup_per_round": [run["startup"] for run in runs]}


def table(results: dict, args: argparse.Namespace) -> str:
    lines = [f"Machine: {_cpu_name()}, {os.cpu_count()} cores, torch {_torch_version()}, Python "
             f"{platform.python_version()}; load average at start {args.load_start}, at end {_load()}. "
             f"{args.rounds} rounds alternating which runs first, {args.iterations} images per run, 256 px, "
             f"batch 1. Ratios: reference / ours (above 1.00x we are faster). Per-round values in brackets.", "",
             "| model | s/image ours | s/image reference | step ratio | start-up s ours | start-up s reference "
             "| start-up ratio | end s ours | end s reference | whole run s ours | whole run s reference |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for model, tools in results.items():
        ours, ref = tools["ours"], tools["reference"]
        lines.append(f"| {model} | {ours['step']:.3f} ({_rounds(ours['step_per_round'])}) | {ref['step']:.3f} "
                     f"({_rounds(ref['step_per_round'])}) | {ref['step'] / ours['step']:.2f}x "
                     f"| {ours['startup']:.1f} ({_rounds(ours['startup_per_round'], 1)}) | {ref['startup']:.1f} "
                     f"({_rounds(ref['startup_per_round'], 1)}) | {ref['startup'] / ours['startup']:.2f}x "
                     f"| {ours['end']:.1f} | {ref['end']:.1f} | {ours['wall']:.1f} | {ref['wall']:.1f} |")
    lines += ["", "start-up: launch to the first step (the first loss line's arrival less that step's time and "
              "data wait); end: the last loss line to exit (ours saves a resumable `latest` checkpoint at the end "
              "of every epoch; the reference saves at --save_epoch_freq, so in these runs not at all); whole run: "
              "launch to exit. Medians over the rounds."]
    return "\n".join(lines)


def _rounds(values: list[float], digits: int = 3) -> str:
    return ", ".join(f"{value:.{digits}f}" for value in values)


def _load() -> str:
    return ", ".join(f"{value:.1f}" for value in os.getloadavg())


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def _torch_version() -> str:
    import torch
    return f"{torch.__version__} (CPU capability {torch.backends.cpu.get_cpu_capability()})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", required=True, type=Path, help="a checkout of the reference implementation")
    parser.add_argument("--out", required=True, type=Path, help="folder for the data, logs and results")
    parser.add_argument("--models", default="pix2pix,cycle_gan", help="comma-separated: pix2pix, cycle_gan")
    parser.add_argument("--rounds", type=int, default=2, help="rounds; each alternates which tool runs first")
    parser.add_argument("--iterations", type=int, default=8, help="images trained per run (at most 8)")
    args = parser.parse_args(argv)
    models = [name.strip() for name in args.models.split(",") if name.strip()]
    unknown = [name for name in models if name not in MODELS]
    if unknown or not (args.reference / "train.py").is_file() or not 2 <= args.iterations <= 8 or args.rounds < 1:
        parser.error(f"--models takes {', '.join(MODELS)} (got {unknown or models}); --reference must hold the "
                     f"reference's train.py ({args.reference}); --iterations 2..8; --rounds >= 1")
    args.out.mkdir(parents=True, exist_ok=True)
    args.load_start = _load()
    datasets = write_datasets(args.out / "data")
    folders = {"ours": ROOT, "reference": args.reference.resolve()}
    runs: dict = {model: {tool: [] for tool in TOOLS} for model in models}
    for round_index in range(args.rounds):
        order = TOOLS if round_index % 2 == 0 else TOOLS[::-1]
        for model in models:
            for tool in order:
                tag = f"{model}_round{round_index}"
                run = run_once(tool, folders[tool], model, datasets[model], args.iterations, args.out, tag)
                runs[model][tool].append(run)
                print(f"round {round_index} {model} {tool}: whole run {run['wall']:.1f} s, start-up "
                      f"{run['startup']:.1f} s, median step {statistics.median(run['steps'][1:]):.3f} s/image",
                      flush=True)
    results = {model: {tool: summarise(tool_runs) for tool, tool_runs in tools.items()}
               for model, tools in runs.items()}
    report = table(results, args)
    print(report)
    (args.out / "compare.md").write_text(report + "\n")
    (args.out / "compare.json").write_text(json.dumps({"results": results, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
