"""A training step's time and page faults, ours and the reference's, with glibc's malloc as it comes and with
freed memory kept for reuse (util/host_memory.py, what train.py and test.py do), each in its own process.

    python dev/step_page_faults.py --reference /tmp/ref --models pix2pix,cycle_gan --rounds 2

Per process: the model's step in a loop on one random 256 px pair (no data loading, no logging), `--warm`
steps first, then the median seconds of `--steps` steps and the minor page faults per step (getrusage).
Configurations alternate within each round. REF is a checkout of the reference (2a7afba's train.py options).
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {"ours": ("ours", False), "ours with memory kept": ("ours", True), "reference": ("reference", False),
           "reference with memory kept": ("reference", True)}  # names without commas: --configs splits on them


def one_run(tool: str, keep: bool, model: str, reference: str, warm: int, steps: int, size: int) -> None:
    """In this process: build `model` with `tool`'s code, step it, print `RESULT median faults`."""
    import torch
    if keep:  # loaded by its path: the reference has a `util` package of its own
        spec = importlib.util.spec_from_file_location("host_memory", ROOT / "util" / "host_memory.py")
        host_memory = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(host_memory)
        assert host_memory.keep_freed_memory(), "glibc's malloc did not take the thresholds here"
    work = Path("/tmp/step_page_faults")
    work.mkdir(exist_ok=True)
    if tool == "reference":
        sys.path.insert(0, reference)
        os.chdir(reference)
        sys.argv = ["train.py", "--dataroot", str(work), "--name", "r", "--model", model, "--checkpoints_dir",
                    str(work / "ref"), "--direction", "AtoB"]
        from models import create_model
        from options.train_options import TrainOptions
        opt = TrainOptions().parse()
        opt.device = torch.device("cpu")
        net_model = create_model(opt)
        net_model.setup(opt)

        def step(batch: dict) -> None:
            net_model.set_input(batch)
            net_model.optimize_parameters()
    else:
        sys.path.insert(0, str(ROOT))
        from models import create_model
        from models.training.engine import TrainingEngine
        from options.train_options import TrainOptions
        from util.distributed import DistContext
        opt = TrainOptions().parse(["--dataroot", str(work), "--name", "o", "--model", model, "--checkpoints_dir",
                                    str(work / "ours"), "--direction", "AtoB", "--display_id", "0"])
        net_model = create_model(opt, DistContext(), 0)
        net_model.setup(opt)
        engine = TrainingEngine(net_model, opt, DistContext())

        def step(batch: dict) -> None:
            engine.train_step([batch])
    torch.manual_seed(0)
    batch = {"A": torch.rand(1, 3, size, size) * 2 - 1, "B": torch.rand(1, 3, size, size) * 2 - 1,
             "A_paths": ["a"], "B_paths": ["b"]}
    for _ in range(warm):
        step(batch)
    times = []
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(steps):
        start = time.perf_counter()
        step(batch)
        times.append(time.perf_counter() - start)
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / steps
    print(f"RESULT {statistics.median(times):.4f} {faults:.0f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--reference", required=True, help="a checkout of the reference's code")
    parser.add_argument("--models", default="pix2pix,cycle_gan", help="comma-separated --model names")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, each running every configuration once")
    parser.add_argument("--warm", type=int, default=3, help="steps before the timed ones (memory reaches its peak)")
    parser.add_argument("--steps", type=int, default=6, help="timed steps per process")
    parser.add_argument("--size", type=int, default=256, help="image size in pixels")
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated, of: {', '.join(CONFIGS)}")
    parser.add_argument("--one", nargs=2, metavar=("TOOL", "KEEP"),
                        help="run one configuration in this process (ours or reference; KEEP 1 or 0) and print "
                             "its RESULT line: what each round starts")
    parser.add_argument("--model", help="the model --one steps")
    args = parser.parse_args()
    if args.one:
        one_run(args.one[0], args.one[1] == "1", args.model, args.reference, args.warm, args.steps, args.size)
        return
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    for model in args.models.split(","):
        for number in range(args.rounds):
            for name in args.configs.split(","):
                tool, keep = CONFIGS[name]
                done = subprocess.run([sys.executable, __file__, "--reference", args.reference, "--warm",
                                       str(args.warm), "--steps", str(args.steps), "--size", str(args.size),
                                       "--model", model, "--one", tool, "1" if keep else "0"],
                                      env=env, capture_output=True, text=True)
                line = [row for row in done.stdout.splitlines() if row.startswith("RESULT")]
                if not line:
                    sys.exit(f"{model} {name} failed:\n{done.stderr[-2000:]}")
                median, faults = (float(x) for x in line[0].split()[1:])
                results.setdefault((model, name), []).append((median, faults))
                print(f"round {number} {model} {name}: {median:.4f} s/step, {faults:.0f} page faults/step", flush=True)
    print("\n| model | configuration | s/step, median of rounds (rounds) | page faults/step (rounds) |")
    print("|---|---|---|---|")
    for (model, name), rows in results.items():
        print(f"| {model} | {name} | {statistics.median(r[0] for r in rows):.4f} "
              f"({', '.join(f'{r[0]:.4f}' for r in rows)}) | {', '.join(f'{r[1]:.0f}' for r in rows)} |")


if __name__ == "__main__":
    main()
