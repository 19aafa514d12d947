"""A training step's time and page faults, ours and the reference's, with glibc's malloc as it comes and with
freed memory kept for reuse (util/host_memory.py, what train.py and test.py do), each in its own process.

    python dev/step_page_faults.py --reference /tmp/ref --models pix2pix,cycle_gan --rounds 2
    python dev/step_page_faults.py --reference /tmp/ref --models cycle_gan --interleave --steps 8 \
        --configs "reference,ours with memory kept"

Per process: the model's step in a loop on one random 256 px pair (no data loading, no logging), `--warm`
steps first, then the median seconds of `--steps` steps and the minor page faults per step (getrusage).
Configurations alternate within each round. With --interleave, every configuration's process stays alive and
they take their steps in turn, so a machine whose speed drifts (a shared host) slows each alike; the paired
ratios, step by step, then rank them where separate processes cannot. REF is a checkout of the reference
(2a7afba's train.py options).
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
    if steps == 0:  # --interleave: one timed step per line the parent sends, until it closes stdin
        print("READY", flush=True)
        for _ in sys.stdin:
            start = time.perf_counter()
            step(batch)
            print(f"STEP {time.perf_counter() - start:.4f}", flush=True)
        return
    times = []
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(steps):
        start = time.perf_counter()
        step(batch)
        times.append(time.perf_counter() - start)
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / steps
    print(f"RESULT {statistics.median(times):.4f} {faults:.0f}", flush=True)


def interleave(args: argparse.Namespace, env: dict[str, str]) -> None:
    """Per model: start every configuration's process (warmed up, each in turn, so no two compute at
    once), then `--rounds` x `--steps` steps taken in turn; print the table of medians and paired ratios."""
    names = args.configs.split(",")
    print("| model | configuration | s/step, median | step vs the first, median of paired ratios (IQR) | steps |")
    print("|---|---|---|---|---|")
    for model in args.models.split(","):
        processes = {}
        for name in names:
            tool, keep = CONFIGS[name]
            processes[name] = subprocess.Popen(
                [sys.executable, __file__, "--reference", args.reference, "--warm", str(args.warm), "--steps", "0",
                 "--size", str(args.size), "--model", model, "--one", tool, "1" if keep else "0"],
                env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            if not any(line.startswith("READY") for line in processes[name].stdout):  # stops at the first
                sys.exit(f"{model} {name} failed before its first step (its output is above)")
        times: dict[str, list[float]] = {name: [] for name in names}
        for number in range(args.rounds * args.steps):
            order = names if number % 2 == 0 else names[::-1]  # neither always first after the other's step
            for name in order:
                processes[name].stdin.write("step\n")
                processes[name].stdin.flush()
                line = processes[name].stdout.readline()
                if not line.startswith("STEP"):
                    sys.exit(f"{model} {name} ended before its step {number} (its output is above)")
                times[name].append(float(line.split()[1]))
            print(f"step {number} {model}: " + ", ".join(f"{name} {times[name][-1]:.3f}" for name in names),
                  flush=True)
        for process in processes.values():
            process.stdin.close()
            process.wait()
        first = times[names[0]]
        for name in names:
            ratios = sorted(a / b for a, b in zip(first, times[name]))
            quarter = len(ratios) // 4
            print(f"| {model} | {name} | {statistics.median(times[name]):.4f} | {statistics.median(ratios):.3f}x "
                  f"({ratios[quarter]:.3f}-{ratios[-1 - quarter]:.3f}) | {len(ratios)} |", flush=True)


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
    parser.add_argument("--interleave", action="store_true",
                        help="one process per configuration, all kept alive, their steps taken in turn (one "
                             "configuration's step, then the next's): the machine's drift falls on all alike; "
                             "reports each configuration's median step and its median ratio to the first's, "
                             "step by step")
    args = parser.parse_args()
    if args.one:
        one_run(args.one[0], args.one[1] == "1", args.model, args.reference, args.warm, args.steps, args.size)
        return
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    if args.interleave:
        interleave(args, env)
        return
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
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
