"""Why `--compile` can be slower than eager on a small CPU: the compiled and the eager step of one
CycleGAN generator (forward and backward), measured side by side on a quiet CPU and with other
processes keeping cores busy, with the OpenMP wait policy left at its default and set to PASSIVE.

    python dev/bench_compile_contention.py                     # 128 px, 2 threads, 0 and 1 busy processes
    python dev/bench_compile_contention.py --size 256 --busy 0,1,2 --threads 2

Each cell runs in a fresh process (dev/bench_compile_contention.py --worker): the generator
(resnet_9blocks, instance norm, as --compile builds it) runs 2 untimed steps, then `--steps` timed
ones, eagerly and then compiled (its warm-up, the compiling, untimed). "busy" processes are plain
Python loops started before the cell and stopped after it: another program using the cores, as on a
shared machine or a laptop doing other work. Prints medians and the compiled/eager ratio per cell
(above 1.00x compiling pays) and writes OUT/contention.json when --out is given.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BUSY_LOOP = "while True: pass"


def measure(size: int, threads: int, steps: int) -> dict:
    """Median seconds of a generator step, eager and compiled, in this process."""
    import torch

    from models import networks
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    net = networks.define_G(3, 3, 64, "resnet_9blocks", "instance")
    x = torch.rand(1, 3, size, size) * 2 - 1

    def median_step(run) -> float:
        def step() -> None:
            run(x).square().mean().backward()
        step()
        step()  # warm-up (and, compiled, the compiling)
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    eager = median_step(net)
    compiled = median_step(networks.compile_network(net, "G"))
    return {"eager": eager, "compiled": compiled}


def run_cell(size: int, threads: int, steps: int, busy: int, policy: str) -> dict:
    env = {**os.environ}
    env.pop("OMP_WAIT_POLICY", None)
    if policy != "default":
        env["OMP_WAIT_POLICY"] = policy
    loops = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(busy)]
    try:
        result = subprocess.run([sys.executable, __file__, "--worker", "--size", str(size), "--threads", str(threads),
                                 "--steps", str(steps)], env=env, capture_output=True, text=True, check=True)
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    from util.flag_types import OneParagraphParser, positive_int
    parser = OneParagraphParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=positive_int, default=128, help="image side in pixels")
    parser.add_argument("--threads", type=positive_int, default=2, help="compute threads of the measured process")
    parser.add_argument("--steps", type=positive_int, default=7, help="timed steps per median")
    parser.add_argument("--busy", default="0,1", help="comma-separated numbers of busy processes to measure beside")
    parser.add_argument("--policies", default="default,PASSIVE", help="OMP_WAIT_POLICY values (default: unset)")
    parser.add_argument("--out", type=Path, help="folder for contention.json")
    parser.add_argument("--worker", action="store_true",
                        help="measure one cell (--size, --threads, --steps) in this process and print it as JSON: how "
                             "the benchmark runs each cell in a fresh process")
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(measure(args.size, args.threads, args.steps)))
        return 0
    try:
        busy_counts = [int(text) for text in args.busy.split(",")]
    except ValueError:
        parser.error(f"argument --busy: expected comma-separated whole numbers, got {args.busy!r}")
    policies = [text.strip() for text in args.policies.split(",") if text.strip()]
    import torch
    print(f"resnet_9blocks generator, {args.size} px, forward + backward, {args.threads} threads; torch "
          f"{torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}, {os.cpu_count()} cores, "
          f"load average at start {', '.join(f'{v:.1f}' for v in os.getloadavg())}", flush=True)
    rows = []
    for busy in busy_counts:
        for policy in policies:
            cell = run_cell(args.size, args.threads, args.steps, busy, policy)
            rows.append({"busy": busy, "policy": policy, **cell})
            print(f"busy {busy}, OMP_WAIT_POLICY {policy}: eager {cell['eager']:.3f} s, compiled "
                  f"{cell['compiled']:.3f} s", flush=True)
    print("\n| busy processes | OMP_WAIT_POLICY | eager s/step | compiled s/step | compiled vs eager |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['busy']} | {row['policy']} | {row['eager']:.3f} | {row['compiled']:.3f} "
              f"| {row['eager'] / row['compiled']:.2f}x |")
    print(f"\nload average at end {', '.join(f'{v:.1f}' for v in os.getloadavg())}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "contention.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
