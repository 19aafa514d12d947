"""Our train.py against the reference's (junyanz/pytorch-CycleGAN-and-pix2pix), side by side on this
machine: the same command line, the same real photos, rounds alternating which runs first.

    python dev/compare_reference.py --reference /path/to/pytorch-CycleGAN-and-pix2pix --out cmp_out
    python dev/compare_reference.py --reference REF --models pix2pix --rounds 3 --images 12 --out cmp_out
    # on a GPU (both pick it by themselves): throughput between loss lines, data loaders as users run them,
    # our default flags and our fast path beside the reference in each round
    python dev/compare_reference.py --reference REF --out cmp_gpu --images 160 --print_freq 20 --num_threads 4 \
        --batch_size 1 --ours default: --ours "compiled:--compile --fused_adam"

REF is a checkout of the reference (any version whose train.py runs here; the figures in
docs/benchmarks.md used commit 2a7afba, its 2025 DDP version, which picks the GPU whenever it sees one).
Both run with this Python; where it lacks wandb, which that version imports at start and uses only
with --use_wandb, the reference's process finds an empty `wandb` module instead (said in the report).
The data are real photos: crops of the one photograph matplotlib ships (Grace Hopper), written as the
reference's aligned (A|B) and unaligned (trainA/trainB) layouts; a step's cost does not depend on the
content, only on its size. Each run trains `--images` images (one epoch) with the reference's defaults
for the model (`--size` crops of size*286/256 px images, 256 and 286 by default), `--batch_size`, no HTML
page and no display server (the 2025 reference has no visdom; ours gets `--display_id 0`); with
`--ours NAME:FLAGS` (repeatable; default `default:`, no flags), ours runs once per configuration with those
flags added (its fast path: the reference has none), each beside the reference in every round.

Per run we record when each loss line arrives (unbuffered output) and the seconds per image that both
train.py print in it (`time:`, computation only, measured from the host; `data:`, the wait for data).
Reported per model and tool: the throughput between the first and the last loss line (images over
seconds, what a user sees: data loading, the host's waits and the losses read every --print_freq images
included; the first --print_freq images, with cuDNN's autotuning and compiling, before it), the median
step (`time:`, iterations after the first, pooled over rounds), the start-up (launch to the first step: the
first loss line less its own printed step and, with --print_freq above the batch, the images before it at
the steady rate), the end (last step to exit: the final save) and the whole run, medians over rounds.
Ratios are ours / reference for throughput and reference / ours for times: above 1.00x we are faster.
Writes OUT/compare.json and OUT/compare.md.
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

from bench.training import load_size_for  # dev/ is this script's folder, on sys.path

ROOT = Path(__file__).resolve().parents[1]
STEP_TIME = re.compile(r"^(?:\[Rank \d+\] )?\(epoch: \d+, iters: \d+, time: ([0-9.]+), data: ([0-9.]+)\)")
COMMON = ["--no_html", "--n_epochs", "1", "--n_epochs_decay", "0", "--save_epoch_freq", "1000"]
MODELS = {"pix2pix": ["--model", "pix2pix", "--direction", "AtoB"], "cycle_gan": ["--model", "cycle_gan"]}
REFERENCE = "reference"
# The reference (2a7afba) has no visdom display; ours is told not to reach for one either. (Its loss
# lines begin with "[Rank 0] ".)
OUR_FLAGS = ["--display_id", "0"]


DISTINCT_CROPS = 64  # crop positions; beyond them crops repeat: a step's cost depends on the size, not the content


def hopper_photo(size: int):
    """The photograph matplotlib ships, resized to hold DISTINCT_CROPS size x size crops 8 px apart (at most
    4608 px a side for --size 4096)."""
    import matplotlib.cbook
    from PIL import Image
    with matplotlib.cbook.get_sample_data("grace_hopper.jpg") as handle:
        photo = Image.open(handle).convert("RGB")
    side = size + DISTINCT_CROPS * 8
    return photo.resize((max(photo.width, side), max(photo.height, side)))


def real_photo_crop(photo, index: int, size: int):
    """The `index`-th size x size crop of `photo`: one of DISTINCT_CROPS positions, mirrored for odd indices."""
    from PIL import ImageOps
    position = index % DISTINCT_CROPS
    left, top = position * 8, (position * 13) % (photo.height - size + 1)
    crop = photo.crop((left, top, left + size, top + size))
    return ImageOps.mirror(crop) if index % 2 else crop


def write_datasets(root: Path, count: int = 8, size: int = 286) -> dict[str, Path]:
    """The aligned (pix2pix) and unaligned (CycleGAN) layouts, of real photos, written one image at a time."""
    from PIL import Image
    photo = hopper_photo(size)
    aligned, unaligned = root / "aligned", root / "unaligned"
    for folder in (aligned / "train", unaligned / "trainA", unaligned / "trainB"):
        folder.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        a, b = real_photo_crop(photo, index, size), real_photo_crop(photo, count + index, size)
        pair = Image.new("RGB", (2 * size, size))
        pair.paste(a, (0, 0))
        pair.paste(b.convert("L").convert("RGB"), (size, 0))
        pair.save(aligned / "train" / f"{index}.jpg", quality=95)
        a.save(unaligned / "trainA" / f"{index}.jpg", quality=95)
        b.save(unaligned / "trainB" / f"{index}.jpg", quality=95)
    return {"pix2pix": aligned, "cycle_gan": unaligned}


def run_once(tool: str, folder: Path, model: str, dataroot: Path, args: argparse.Namespace, tag: str) -> dict:
    """One train.py run of `tool` (REFERENCE, or the name of one of our configurations in `args.ours`): its
    wall time, throughput between its first and last loss lines, the per-image step times of its loss lines,
    its start-up and its end (the last loss line to exit: the final save and shutdown), and what our
    --compile probe said."""
    out = args.out
    command = [sys.executable, "-u", "train.py", "--dataroot", str(dataroot), "--name", tag,
               "--checkpoints_dir", str(out / "checkpoints" / tool), "--max_dataset_size", str(args.images),
               "--batch_size", str(args.batch_size), "--crop_size", str(args.size),
               "--load_size", str(load_size_for(args.size)), "--print_freq", str(args.print_freq),
               "--num_threads", str(args.num_threads), *MODELS[model], *COMMON]
    if tool != REFERENCE:  # one of our configurations
        command += OUR_FLAGS + args.ours[tool]
    environment = dict(os.environ)
    if tool == REFERENCE and args.wandb_stub:
        environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(args.wandb_stub),
                                                                 environment.get("PYTHONPATH")]))
    log_path = out / "logs" / f"{tag}_{tool}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    steps, arrivals, lines = [], [], []
    start = time.perf_counter()
    with subprocess.Popen(command, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=environment) as proc:
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
    expected = args.images // args.print_freq
    if len(steps) != expected:
        raise SystemExit(f"compare_reference: expected {expected} loss lines from {tool}'s {model} run, found "
                         f"{len(steps)}; see {log_path}")
    images_per_s = (len(arrivals) - 1) * args.print_freq / (arrivals[-1] - arrivals[0])
    return {"wall": wall, "steps": [compute for compute, _ in steps], "images_per_s": images_per_s,
            "notes": [line.strip() for line in lines if line.startswith("--compile:")],
            # launch to the first step: the first loss line's arrival less its own image's step (computation and
            # data, as printed) and the images before it at the steady rate (none with --print_freq 1, where
            # the first step's warm-up, allocating its memory, is the step's, not the start-up's)
            "startup": (arrivals[0] - steps[0][0] * args.batch_size - steps[0][1]  # time: is per image, data: not
                        - (args.print_freq - args.batch_size) / images_per_s),
            "end": wall - arrivals[-1]}


def our_configurations(specs: list[str], parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    """`--ours NAME:FLAGS` values as {name: flags}."""
    configurations = {}
    for spec in specs:
        name, colon, flags = spec.partition(":")
        if not colon or not name.strip() or name.strip() == REFERENCE or name.strip() in configurations \
                or not name.strip().replace("_", "").replace("-", "").isalnum():
            parser.error(f"--ours takes NAME:FLAGS with a new name of letters, digits, - and _ (not "
                         f"{REFERENCE!r}), e.g. \"compiled:--compile\"; got {spec!r}")
        configurations[name.strip()] = flags.split()
    return configurations


def wandb_stub(out: Path) -> Path | None:
    """A folder holding an empty `wandb` module where this Python has none (the reference imports it at start
    and uses it only with --use_wandb); None where wandb is installed."""
    import importlib.util
    if importlib.util.find_spec("wandb") is not None:
        return None
    folder = out / "wandb_stub"
    (folder / "wandb").mkdir(parents=True, exist_ok=True)
    (folder / "wandb" / "__init__.py").write_text('"""Empty: the reference imports wandb; these runs never use '
                                                  'it."""\n')
    return folder


def summarise(runs: list[dict]) -> dict:
    """Median step (after each run's first, pooled over rounds); median start-up, end and wall time."""
    steady = [step for run in runs for step in run["steps"][1:]]
    return {"step": statistics.median(steady), "wall": statistics.median(run["wall"] for run in runs),
            "images_per_s": statistics.median(run["images_per_s"] for run in runs),
            "images_per_s_per_round": [run["images_per_s"] for run in runs],
            "startup": statistics.median(run["startup"] for run in runs),
            "end": statistics.median(run["end"] for run in runs),
            "step_per_round": [statistics.median(run["steps"][1:]) for run in runs],
            "startup_per_round": [run["startup"] for run in runs],
            "notes": [note for run in runs for note in run["notes"]]}


def table(results: dict, args: argparse.Namespace) -> str:
    configurations = "; ".join(f"{name}: {' '.join(flags) or 'no flags'}" for name, flags in args.ours.items())
    lines = [f"Machine: {_machine()}, torch {_torch_version()}, Python {platform.python_version()}; load average "
             f"at start {args.load_start}, at end {_load()}. {args.rounds} round(s) alternating which runs first, "
             f"{args.images} images per run, {args.size} px, batch {args.batch_size}, --print_freq {args.print_freq}, "
             f"--num_threads {args.num_threads}; ours: {configurations}"
             f"{' (the reference ran with an empty wandb module: this Python has none)' if args.wandb_stub else ''}. "
             f"img/s: images between the first and last loss line over the seconds between them; s/image: the "
             f"`time:` train.py prints. Ratios against the reference: above 1.00x we are faster. Per-round values "
             f"in brackets.", "",
             "| model | run | img/s | img/s vs reference | s/image | step vs reference | start-up s | end s "
             "| whole run s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for model, tools in results.items():
        ref = tools[REFERENCE]
        for tool, got in tools.items():
            ours = tool != REFERENCE
            throughput_ratio = f"{got['images_per_s'] / ref['images_per_s']:.2f}x" if ours else ""
            step_ratio = f"{ref['step'] / got['step']:.2f}x" if ours else ""
            lines.append(f"| {model} | {'ours, ' + tool if ours else tool} | {got['images_per_s']:.2f} "
                         f"({_rounds(got['images_per_s_per_round'], 2)}) | {throughput_ratio} "
                         f"| {got['step']:.4f} ({_rounds(got['step_per_round'], 4)}) | {step_ratio} "
                         f"| {got['startup']:.1f} ({_rounds(got['startup_per_round'], 1)}) | {got['end']:.1f} "
                         f"| {got['wall']:.1f} |")
    lines += ["", "start-up: launch to the first step (the first loss line less its own step, as printed, and "
              "the images before it at the steady rate: with --print_freq 1 none, and the first step's warm-up is a "
              "step's; with more, cuDNN's autotuning and compiling fall in it); end: the last loss line to exit (ours "
              "saves a resumable `latest` checkpoint at the end of every epoch; the reference saves at "
              "--save_epoch_freq, so in these "
              "runs not at all); whole run: launch to exit. Medians over the rounds."]
    notes = sorted({note for tools in results.values() for got in tools.values() for note in got["notes"]})
    if notes:
        lines += ["", "What our --compile probe said:", *[f"- {note}" for note in notes]]
    return "\n".join(lines)


def _rounds(values: list[float], digits: int = 3) -> str:
    return ", ".join(f"{value:.{digits}f}" for value in values)


def _load() -> str:
    return ", ".join(f"{value:.1f}" for value in os.getloadavg())


def _machine() -> str:
    """The CPU and cores; the GPU and driver where torch sees one."""
    import torch
    described = f"{_cpu_name()}, {os.cpu_count()} cores"
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        try:
            driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                    capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            driver = "unknown"
        described += (f"; GPU {props.name} ({props.total_memory / 2**30:.0f} GiB), driver {driver}, "
                      f"CUDA {torch.version.cuda}")
    return described


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
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", required=True, type=Path, help="a checkout of the reference implementation")
    parser.add_argument("--out", required=True, type=Path, help="folder for the data, logs and results")
    parser.add_argument("--models", default="pix2pix,cycle_gan", help="comma-separated: pix2pix, cycle_gan")
    parser.add_argument("--rounds", type=int, default=2, help="rounds; each alternates which tool runs first")
    parser.add_argument("--images", type=int, default=8, help="images trained per run (one epoch)")
    parser.add_argument("--batch_size", type=int, default=1, help="--batch_size of both runs")
    parser.add_argument("--size", type=int, default=256, help="--crop_size of both runs (--load_size: size*286/256)")
    parser.add_argument("--print_freq", type=int, default=1, help="--print_freq of both runs (a multiple of "
                        "--batch_size); a loss line reads the losses, which waits for a GPU")
    parser.add_argument("--num_threads", type=int, default=0, help="--num_threads (data-loading processes) of both")
    parser.add_argument("--ours", action="append", metavar="NAME:FLAGS", help="one of our configurations: a name and "
                        "further flags for our train.py only (its fast path), e.g. \"compiled:--compile\"; "
                        "repeatable (default: default:, no flags)")
    args = parser.parse_args(argv)
    models = [name.strip() for name in args.models.split(",") if name.strip()]
    unknown = [name for name in models if name not in MODELS]
    problems = []
    if unknown:
        problems.append(f"--models takes {', '.join(MODELS)} (got {', '.join(unknown)})")
    if not (args.reference / "train.py").is_file():
        problems.append(f"--reference must hold the reference's train.py ({args.reference} does not)")
    if args.rounds < 1 or args.batch_size < 1 or args.num_threads < 0 or not 16 <= args.size <= 4096:
        problems.append("--rounds and --batch_size take 1 or more, --num_threads 0 or more, --size 16..4096")
    if args.print_freq < 1 or args.print_freq % args.batch_size or args.images < 2 * args.print_freq \
            or args.images > 10000:
        problems.append("--print_freq takes a multiple of --batch_size, and --images at least two loss lines' worth "
                        "(2 x --print_freq) and at most 10000")
    if problems:
        parser.error("; ".join(problems))
    args.ours = our_configurations(args.ours or ["default:"], parser)
    args.out.mkdir(parents=True, exist_ok=True)
    args.load_start = _load()
    datasets = write_datasets(args.out / "data", count=args.images, size=load_size_for(args.size))
    args.wandb_stub = wandb_stub(args.out)
    tools = (REFERENCE, *args.ours)
    folders = {tool: ROOT for tool in args.ours} | {REFERENCE: args.reference.resolve()}
    runs: dict = {model: {tool: [] for tool in tools} for model in models}
    for round_index in range(args.rounds):
        order = tools if round_index % 2 == 0 else tools[::-1]
        for model in models:
            for tool in order:
                tag = f"{model}_round{round_index}"
                run = run_once(tool, folders[tool], model, datasets[model], args, tag)
                runs[model][tool].append(run)
                print(f"round {round_index} {model} {tool}: {run['images_per_s']:.2f} img/s, whole run "
                      f"{run['wall']:.1f} s, start-up {run['startup']:.1f} s, median step "
                      f"{statistics.median(run['steps'][1:]):.4f} s/image", flush=True)
    results = {model: {tool: summarise(tool_runs) for tool, tool_runs in tools.items()}
               for model, tools in runs.items()}
    report = table(results, args)
    print(report)
    (args.out / "compare.md").write_text(report + "\n")
    settings = {key: str(value) for key, value in vars(args).items()}  # (the configurations' flags as text)
    (args.out / "compare.json").write_text(json.dumps({"settings": settings, "results": results, "runs": runs},
                                                      indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
