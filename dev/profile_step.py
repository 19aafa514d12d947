"""Where one training step's time goes: the training engine's step under torch.profiler.

    python dev/profile_step.py --model cycle_gan --size 256 --device cuda --trace step.json.gz
    python dev/profile_step.py --model pix2pix --batch 4 --ngf 32     # other flags are train.py's

Builds the model and synthetic batch as the benchmark's step section does (dev/bench/training.py),
runs warm-up steps, then profiles --steps steps and prints PyTorch's table of the operators with
the most time, and a summary read from the profiler's trace: wall time per step and, on a GPU,
how much of it the GPU was busy, the kernels launched per step and which kinds of kernel take
the busy time. A GPU busy for a small part of the step is waiting for the CPU to launch work
(launch-bound); one busy for most of it is limited by its kernels. --trace keeps the trace
(chrome://tracing or https://ui.perfetto.dev) for a closer look.
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "dev"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import torch  # noqa: E402

from bench.training import build_model, build_options, make_context, synthetic_batch  # noqa: E402

# kernel-name fragments -> the kind of work, first match wins (cuDNN/cuBLAS/PyTorch kernel names)
KERNEL_KINDS = (
    ("normalisation", ("norm", "welford", "instance", "bn_fw", "bn_bw")),
    ("convolution and matmul", ("conv", "gemm", "cutlass", "xmma", "sm90", "sm80", "wgrad", "dgrad", "fprop",
                                "implicit", "winograd", "fft", "cudnn")),
    ("padding", ("reflection", "pad")),
    ("optimizer", ("adam", "foreach", "multi_tensor")),
    ("reduction", ("reduce",)),
    ("copy and layout", ("copy", "memcpy", "memset", "transpose", "cat")),
    ("elementwise", ("elementwise", "vectorized", "unrolled", "pointwise", "triton")),
)


def kernel_kind(name: str) -> str:
    lowered = name.lower()
    for kind, fragments in KERNEL_KINDS:
        if any(fragment in lowered for fragment in fragments):
            return kind
    return "other"


def summarise_trace(trace: dict, steps: int, wall_s: float) -> dict:
    """Per step: wall ms, GPU busy ms (kernels and copies, overlaps merged), kernel launches and CUDA graph
    replays (each one launch of many kernels), and busy ms by kind of kernel; from a chrome trace as
    torch.profiler exports it."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    kernels = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    launches = sum(1 for e in events if e.get("cat") == "cuda_runtime" and "LaunchKernel" in e.get("name", ""))
    graph_launches = sum(1 for e in events if e.get("cat") == "cuda_runtime" and "GraphLaunch" in e.get("name", ""))
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in kernels)
    busy_us, end = 0.0, float("-inf")
    for start, stop in spans:  # several streams may overlap: count each moment once
        if stop > end:
            busy_us += stop - max(start, end)
            end = stop
    by_kind: Counter = Counter()
    for e in kernels:
        by_kind[kernel_kind(e.get("name", ""))] += e["dur"]
    wall_ms = wall_s * 1000 / steps
    busy_ms = busy_us / 1000 / steps
    return {"wall_ms_per_step": wall_ms, "gpu_busy_ms_per_step": busy_ms,
            "gpu_busy_fraction": busy_ms / wall_ms if kernels else None,
            "kernel_launches_per_step": launches / steps, "cuda_graph_launches_per_step": graph_launches / steps,
            "gpu_ms_per_step_by_kind": {kind: us / 1000 / steps for kind, us in by_kind.most_common()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="cycle_gan", help="as the benchmark's --models (cycle_gan, pix2pix, cut, "
                                                             "bicycle_gan, ...)")
    parser.add_argument("--size", type=int, default=256, help="crop size (patch size for the 3-D models)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--amp", default="none", choices=["none", "bf16", "fp16"])
    parser.add_argument("--channels_last", action="store_true")
    parser.add_argument("--compile", action="store_true", help="compiled from the first step (on a GPU with CUDA "
                                                                "graphs, as train.py --compile records them)")
    parser.add_argument("--warmup", type=int, default=5, help="steps before profiling (cuDNN autotuning, caches)")
    parser.add_argument("--steps", type=int, default=5, help="steps profiled")
    parser.add_argument("--rows", type=int, default=25, help="operators in the table")
    parser.add_argument("--trace", help="write the profiler's trace here (.json or .json.gz)")
    parser.add_argument("--summary", help="write the summary here (JSON)")
    args, train_flags = parser.parse_known_args(argv)  # the rest are train.py's (e.g. --ngf 32 --norm batch)

    spec = {"model": args.model, "size": args.size, "batch": args.batch, "device": args.device, "amp": args.amp,
            "channels_last": args.channels_last, "compile": args.compile,
            "checkpoints_dir": tempfile.mkdtemp(prefix="profile_ckpt_"),
            "extra_args": train_flags}
    opt = build_options(spec)
    ctx = make_context(args.device)
    trainee = build_model(opt, ctx)
    batch = synthetic_batch(opt, args.batch, seed=1)
    on_gpu = ctx.device.type == "cuda"
    synchronize = torch.cuda.synchronize if on_gpu else (lambda: None)
    for _ in range(args.warmup):
        trainee.step(batch)
    synchronize()

    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if on_gpu else [])
    with torch.profiler.profile(activities=activities) as profiler:
        started = time.perf_counter()
        for _ in range(args.steps):
            trainee.step(batch)
        synchronize()
        wall_s = time.perf_counter() - started
    sort_by = "self_cuda_time_total" if on_gpu else "self_cpu_time_total"
    print(f"{args.model}, {args.size} px, batch {args.batch}, {ctx.device}, amp {args.amp}"
          f"{', channels-last' if args.channels_last else ''}{', compiled' if args.compile else ''}: {args.steps} "
          f"steps profiled after {args.warmup}")
    print(profiler.key_averages().table(sort_by=sort_by, row_limit=args.rows))

    with tempfile.TemporaryDirectory() as scratch:
        exported = Path(scratch) / "trace.json"
        profiler.export_chrome_trace(str(exported))
        text = exported.read_text()
    summary = summarise_trace(json.loads(text), args.steps, wall_s)
    summary.update(model=args.model, size=args.size, batch=args.batch, device=str(ctx.device), amp=args.amp,
                   channels_last=args.channels_last, compile=args.compile, steps=args.steps)
    print(json.dumps(summary, indent=1))
    if args.trace:
        opener = gzip.open if args.trace.endswith(".gz") else open
        with opener(args.trace, "wt") as out:
            out.write(text)
    if args.summary:
        Path(args.summary).write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
