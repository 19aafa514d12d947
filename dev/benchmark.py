"""Benchmark training speed: CycleGAN and pix2pix, plain fp32 against the fast settings.

    python dev/benchmark.py --out bench_out            # the full run (about 1.5 h on 2 CPU cores)
    python dev/benchmark.py --quick --out bench_out    # smaller sizes, fewer configs and steps (minutes)
    python dev/benchmark.py --dataroot ./datasets/horse2zebra --out bench_out   # your own data

Measures, on the available device (CUDA if present, else the CPU; --device to choose):

  peaks    the device's FLOP/s on one large 3x3 conv and one large matmul, fp32 and bf16;
  step     one training step (`model.optimize_parameters()`) on synthetic tensors, for plain
           fp32 eager and the fast settings --amp bf16, --channels_last, --compile and their
           combinations, each compared with plain fp32 measured in the same run;
  loop     the training loop as train.py runs it, with real images read from disk by the
           default --num_threads loader workers: seconds per step and the fraction of it spent
           waiting for the next batch (plain fp32 and the fastest setting);
  scaling  how the plain fp32 step grows with image size (128/256/512) and batch (1/4/8);
  ddp      weak scaling on the CPU: 2 torchrun processes (gloo, 1 thread, batch 1 each) against
           one process with 1 thread; efficiency = throughput(2) / (2 x throughput(1)).
  checkpointing  the plain fp32 step at 512 px (batch 1) without and with --checkpoint_activations:
           time and peak memory.
  volumes  with --models pix2pix_3d,cycle_gan_3d: their plain fp32 step on 64^3 and 96^3 patches
           (batch 1) without and with --checkpoint_activations: FLOPs, time and peak memory.

Each measurement runs in a fresh process (dev/bench_worker.py), so peak memory is per
configuration, and --compile starts from an empty inductor cache (the compile time reported is a
cold compile; it is excluded from the step-time median). Steps are timed after warm-up; the table
gives the median and the interquartile range. The full run measures the step configurations in
two passes, the second in reverse order, and pools them (--repeats), so that a load that drifts
during the run favours none of them. FLOPs per step are counted with
torch.utils.flop_counter's formulas on the eager fp32 step (forward and backward of every network
in optimize_parameters), in all and per network (each conv's FLOPs go to the network whose weights
it uses), and divided by the median step time for the achieved FLOP/s, which is also given as a
fraction of the measured conv peak of the same dtype.

Writes OUT/benchmark.md (the tables, also printed), OUT/benchmark.json (everything, including
every step time) and OUT/logs/ (one log per measurement).

The parts live in dev/bench/: plan (what to measure), runner and measure (the jobs),
derive (the numbers computed from them), report (the tables); bench_worker.py runs one job.
"""
from __future__ import annotations

import argparse
import datetime
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "dev"):  # the project, and dev/bench when imported by the tests
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from bench.derive import evaluate_targets  # noqa: E402
from bench.environment import dataset_layout, load_average, machine_info, pick_device  # noqa: E402
from bench.measure import measure  # noqa: E402
from bench.plan import BASELINE, CONFIGS, CUDA_CONFIGS, MODELS, SECTIONS, STEP_ONLY_MODELS, Plan, full_plan, quick_plan  # noqa: E402
from bench.report import render_markdown  # noqa: E402
from bench.runner import Runner  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--out", type=Path, default=Path("bench_out"),
                        help="folder for benchmark.md, benchmark.json and logs/")
    parser.add_argument("--quick", action="store_true",
                        help="smaller sizes, fewer configurations and steps, no --compile (a few minutes on 2 cores)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="where to measure")
    parser.add_argument("--dataroot", action="append", default=[], type=Path,
                        help="a dataset for the loop measurement instead of the generated demo data: trainA/trainB "
                             "folders are used for cycle_gan, an aligned train/ folder for pix2pix (repeatable)")
    parser.add_argument("--models", default=",".join(MODELS),
                        help="comma-separated subset of " + ", ".join(MODELS) + "; also cut, fastcut (CUT's two "
                             "modes), bicycle_gan (batch 2: its two halves), pix2pix_l1 (--lambda_GAN 0) and sb "
                             "(UNSB): the step section only; pix2pix_3d, cycle_gan_3d (volumes): the volumes section "
                             "only")
    parser.add_argument("--configs", default=None, help="comma-separated subset of: " + ", ".join(CONFIGS) +
                        "; on CUDA also " + ", ".join(CUDA_CONFIGS) +
                        " (fp32 is always measured: everything is compared with it; without --configs the full "
                        "plan adds the fp16 ones on CUDA)")
    parser.add_argument("--sections", default=None, help="comma-separated subset of: " + ", ".join(SECTIONS))
    parser.add_argument("--repeats", type=int, default=None,
                        help="passes over the step configurations, every other one in reverse order, pooled "
                             "(default: 2 for the full run, 1 with --quick); more passes resist a drifting load")
    parser.add_argument("--threads", type=int, default=None,
                        help="compute threads per measurement (default: torch's, one per core). On a shared, "
                             "busy machine --threads 1 gives far steadier comparisons: a multi-threaded step "
                             "waits for its slowest thread, and any other process can delay one")
    parser.add_argument("--job_timeout", type=float, default=1800.0, help="seconds before one measurement is abandoned")
    parser.add_argument("--resume", action="store_true",
                        help="keep the measurements already in OUT/logs whose job is unchanged (after an "
                             "interrupted run); only the missing ones are run")
    parser.add_argument("--keep_scratch", action="store_true",
                        help="keep OUT/scratch (generated datasets, inductor caches) after the run")
    args = parser.parse_args(argv)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    bad = [m for m in args.models if m not in (*MODELS, *STEP_ONLY_MODELS)]
    if bad:
        parser.error(f"--models: unknown {bad}; choose from {(*MODELS, *STEP_ONLY_MODELS)}")
    args.dataroots = {}
    for root in args.dataroot:
        layout = dataset_layout(root)
        if layout is None:
            parser.error(f"--dataroot {root}: expected trainA/ and trainB/ (CycleGAN) or train/ (pix2pix) inside")
        args.dataroots[layout] = root.resolve()
    return args


def make_plan(args: argparse.Namespace) -> Plan:
    """The preset (--quick or full) narrowed by --configs, --repeats and --sections."""
    plan = quick_plan() if args.quick else full_plan()
    if args.configs:
        wanted = [c.strip() for c in args.configs.split(",") if c.strip()]
        unknown = [c for c in wanted if c not in CONFIGS and c not in CUDA_CONFIGS]
        if unknown:
            sys.exit(f"benchmark: --configs: unknown {unknown}")
        plan.configs = [BASELINE] + [c for c in wanted if c != BASELINE and c not in CUDA_CONFIGS]
        plan.cuda_configs = [c for c in wanted if c in CUDA_CONFIGS]
    if args.repeats is not None:
        plan.repeats = max(1, args.repeats)
    if args.sections:
        plan.sections = {s.strip() for s in args.sections.split(",") if s.strip()}
    return plan


def failed_measurements(results: dict) -> list[dict]:
    failed = [r for section in ("step", "loop", "scaling", "checkpointing", "volumes") for r in results.get(section, [])
              if "error" in r]
    failed += [r for r in results["ddp"] if "efficiency" not in r]
    if results["peaks"] is not None and "error" in results["peaks"]:
        failed.append(results["peaks"])
    return failed


def describe_run(args: argparse.Namespace, plan: Plan, device: str, argv: list[str] | None) -> dict:
    """The report's "meta": command, date, machine, plan, load at the start."""
    command = "python dev/benchmark.py " + " ".join(argv if argv is not None else sys.argv[1:])
    partial = bool(args.configs or args.sections) or set(args.models) != set(MODELS)
    return {"mode": f"{plan.name} plan, partial" if partial else plan.name, "command": command.strip(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine_info(device), "load_avg_start": load_average(), "plan": plan.to_json(),
            "threads": args.threads or "default"}


def write_report(out: Path, meta: dict, results: dict, started: float) -> dict:
    """Finish `meta` (load at the end, run time since `started`), evaluate the targets, write
    OUT/benchmark.md and OUT/benchmark.json, print the tables; returns the report."""
    meta["load_avg_end"] = load_average()
    meta["runtime_s"] = time.perf_counter() - started
    report = {"meta": meta, "results": results,
              "targets": evaluate_targets(results, meta["machine"]["cores_usable"])}
    markdown = render_markdown(report)
    (out / "benchmark.md").write_text(markdown + "\n")
    (out / "benchmark.json").write_text(json.dumps(report, indent=1))
    print()
    print(markdown)
    print(f"wrote {out / 'benchmark.md'} and {out / 'benchmark.json'} ({meta['runtime_s']:.0f} s)")
    return report


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    plan = make_plan(args)
    device = pick_device(args.device)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    # Generated datasets, inductor caches and checkpoints; kept if the run is interrupted, so that
    # --resume finds the same paths (and so the same job specs).
    scratch = out / "scratch"
    scratch.mkdir(exist_ok=True)
    meta = describe_run(args, plan, device, argv)
    print(f"benchmark ({plan.name}) on {device}: {meta['machine']['cpu_model']}, "
          f"{meta['machine']['cores_usable']} cores, torch {meta['machine']['torch']}; load average "
          f"{meta['load_avg_start']}; writing to {out}")
    try:
        runner = Runner(out, device, args.job_timeout, scratch, args.threads, args.resume)
        results = measure(plan, runner, args.models, args.dataroots, scratch)
    except BaseException:
        print(f"benchmark interrupted; the finished measurements are in {out / 'logs'}: run the same command "
              f"with --resume to continue", file=sys.stderr)
        raise
    if not args.keep_scratch:
        shutil.rmtree(scratch, ignore_errors=True)
    write_report(out, meta, results, started)
    return 1 if failed_measurements(results) else 0


if __name__ == "__main__":
    sys.exit(main())
