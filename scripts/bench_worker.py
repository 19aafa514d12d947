"""One benchmark measurement in this process, for scripts/benchmark.py (which starts one per job).

    python scripts/bench_worker.py --spec '{"kind": "step", "model": "pix2pix", ...}' --result out.json
    python -m torch.distributed.run --nproc_per_node=2 scripts/bench_worker.py --spec '{"kind": "ddp", ...}' ...

Kinds of job (the `kind` key of the spec):

  peaks  the device's conv (3x3, 256->256 channels, 64x64) and matmul FLOP/s in fp32 and bf16
         (plus fp16 on CUDA), forward only, best of contiguous and channels-last layouts;
  step   `model.optimize_parameters()` on synthetic tensors (no data loading);
  loop   the training loop of train.py with real images from --dataroot and the default
         --num_threads loader workers, timing how long each step waits for its batch;
  ddp    the synthetic step under torchrun (DDP); run without torchrun it is the one-rank
         baseline of the weak-scaling measurement (same code, no DDP).

Every job runs in a fresh process, so its peak memory (RSS on the CPU, which only grows) belongs
to one configuration. The result is one JSON object written to --result.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

# ----------------------------------------------------------------------------- statistics


def summarize(times: list[float]) -> dict[str, float]:
    """Median, quartiles (inclusive method), min and max of per-step seconds."""
    if not times:
        raise ValueError("no timed steps")
    ordered = sorted(times)
    if len(ordered) >= 2:
        q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    else:
        q1 = q3 = ordered[0]
    return {"median_s": statistics.median(ordered), "q1_s": q1, "q3_s": q3,
            "min_s": ordered[0], "max_s": ordered[-1], "steps": len(ordered)}


def peak_memory_mb(device: torch.device) -> float:
    """Peak memory of this process: CUDA allocator peak on a GPU, else peak RSS (MiB)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    # ru_maxrss is in KiB on Linux (bytes on macOS).
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**20


def current_rss_mb() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return float("nan")


def syncer(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def dynamo_graph_count() -> int:
    """Graphs compiled so far by torch.compile in this process (0 if dynamo is not loaded)."""
    if "torch._dynamo" not in sys.modules:
        return 0
    from torch._dynamo.utils import counters
    return int(counters["stats"]["unique_graphs"])


def run_timed(step: Callable[[], Any], sync: Callable[[], None], warmup: int, min_steps: int,
              max_steps: int, budget_s: float) -> tuple[list[float], list[float], list[float]]:
    """Warm-up steps, then timed steps: at least `min_steps`, at most `max_steps`, and no more
    once `budget_s` seconds of timed steps have passed. Returns (warm-up s, step s, CPU s)."""
    warm = []
    for _ in range(warmup):
        start = time.perf_counter()
        step()
        sync()
        warm.append(time.perf_counter() - start)
    times, cpu = [], []
    began = time.perf_counter()
    while len(times) < max_steps and (len(times) < min_steps or time.perf_counter() - began < budget_s):
        start, cpu_start = time.perf_counter(), time.process_time()
        step()
        sync()
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - cpu_start)
    return warm, times, cpu


# ----------------------------------------------------------------------------- FLOPs


def count_flops(fn: Callable[[], Any]) -> int:
    """FLOPs of `fn()` (forward and backward, whatever it runs) by torch's FlopCounterMode."""
    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


def conv2d_flops(n: int, c_in: int, c_out: int, k: int, h_out: int, w_out: int) -> int:
    """Textbook FLOPs of a dense conv forward: a multiply and an add per weight per output pixel."""
    return 2 * n * c_in * c_out * k * k * h_out * w_out


# ----------------------------------------------------------------------------- models


def load_size_for(size: int) -> int:
    """The reference's 286/256 ratio between --load_size and --crop_size."""
    return round(size * 286 / 256)


def build_options(spec: dict, dataroot: str | None = None):
    from options.train_options import TrainOptions
    size = int(spec["size"])
    argv = ["--dataroot", dataroot or str(ROOT), "--model", spec["model"], "--name", "benchmark",
            "--checkpoints_dir", spec.get("checkpoints_dir") or tempfile.mkdtemp(prefix="bench_ckpt_"),
            "--crop_size", str(size), "--load_size", str(load_size_for(size)),
            "--batch_size", str(spec.get("batch", 1)), "--seed", "0", "--device", spec.get("device", "auto"),
            "--display_id", "0", "--amp", spec.get("amp", "none")]
    if spec.get("channels_last"):
        argv.append("--channels_last")
    if spec.get("compile"):
        argv.append("--compile")
    if spec.get("fused_adam"):
        argv.append("--fused_adam")
    argv += list(spec.get("extra_args", []))
    return TrainOptions().parse(argv)


def build_model(opt, ctx, straightforward: bool = False):
    """The model as train.py builds it, or (`straightforward`) the step written plainly."""
    from models import create_model
    from util.seeding import seed_everything
    seed_everything(0)
    if straightforward:
        from straightforward_step import build_straightforward
        return build_straightforward(opt, ctx.device)
    model = create_model(opt, ctx, 0)
    model.setup(opt)
    return model


def synthetic_batch(opt, batch: int, seed: int = 0) -> dict:
    """Images in [-1, 1] shaped as the datasets deliver them (on the CPU, as from the loader)."""
    generator = torch.Generator().manual_seed(seed)
    size = opt.crop_size

    def images(channels: int) -> torch.Tensor:
        return torch.rand(batch, channels, size, size, generator=generator) * 2 - 1

    a_nc, b_nc = (opt.input_nc, opt.output_nc) if opt.direction == "AtoB" else (opt.output_nc, opt.input_nc)
    return {"A": images(a_nc), "B": images(b_nc),
            "A_paths": [f"synthetic_A_{i}" for i in range(batch)],
            "B_paths": [f"synthetic_B_{i}" for i in range(batch)]}


def count_step_flops(model, opt) -> int:
    """FLOPs of one optimize_parameters() with a batch of one image (conv and matmul FLOPs are
    per image, so a batch of b costs exactly b times this)."""
    model.set_input(synthetic_batch(opt, 1, seed=1))
    return count_flops(model.optimize_parameters)


def check_losses_finite(model) -> None:
    """A configuration that trains on NaN is broken, not fast: fail its measurement."""
    losses = {name: float(value) for name, value in model.get_current_losses().items()}
    broken = [name for name, value in losses.items() if not math.isfinite(value)]
    if broken:
        raise RuntimeError(f"non-finite losses after the timed steps ({', '.join(broken)}): this configuration "
                           f"does not train correctly, so its time is not reported")


def _context(device: str, threads: int | None = None):
    from util.distributed import DistContext, pick_device
    if threads:
        torch.set_num_threads(int(threads))
    return DistContext(device=pick_device(device))


def _common(device: torch.device) -> dict:
    return {"device": str(device), "threads": torch.get_num_threads(),
            "load_avg_end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}


# ----------------------------------------------------------------------------- jobs


def job_step(spec: dict) -> dict:
    ctx = _context(spec.get("device", "auto"), spec.get("threads"))
    device, sync = ctx.device, syncer(ctx.device)
    opt = build_options(spec)
    rss_before = current_rss_mb()
    model = build_model(opt, ctx, straightforward=bool(spec.get("straightforward")))
    batch = synthetic_batch(opt, opt.batch_size)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    def step() -> None:
        model.set_input(batch)
        model.optimize_parameters()

    graphs_before = None
    warm, times, cpu = [], [], []
    # Warm-up first (compilation happens there), then count graphs so that a recompilation
    # inside the timed steps shows up in the result.
    warm, _, _ = run_timed(step, sync, int(spec["warmup"]), 0, 0, 0)
    graphs_before = dynamo_graph_count()
    _, times, cpu = run_timed(step, sync, 0, int(spec["min_steps"]), int(spec["max_steps"]), float(spec["budget_s"]))
    check_losses_finite(model)
    result = {"warmup_s": warm, "times_s": times, "cpu_s": cpu, **summarize(times),
              "graphs_compiled": dynamo_graph_count(), "graphs_compiled_while_timed": dynamo_graph_count() - graphs_before,
              "peak_mem_mb": peak_memory_mb(device), "rss_before_model_mb": rss_before, **_common(device)}
    if spec.get("count_flops"):
        # After timing, so the counting step's memory cannot inflate the peak.
        result["flops_batch1"] = count_step_flops(model, opt)
    return result


def job_loop(spec: dict) -> dict:
    from data import create_dataset
    ctx = _context(spec.get("device", "auto"), spec.get("threads"))
    device, sync = ctx.device, syncer(ctx.device)
    opt = build_options(spec, spec["dataroot"])
    dataset = create_dataset(opt, 0, 0, 1, device.type)
    model = build_model(opt, ctx)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    state = {"epoch": 1}
    dataset.set_epoch(1)
    iterator = iter(dataset)

    def next_batch() -> dict:
        nonlocal iterator
        try:
            return next(iterator)
        except StopIteration:  # a new epoch, as train.py starts one
            state["epoch"] += 1
            dataset.set_epoch(state["epoch"])
            iterator = iter(dataset)
            return next(iterator)

    waits: list[float] = []
    loops: list[float] = []
    cpu: list[float] = []
    warmup, min_steps, max_steps = int(spec["warmup"]), int(spec["min_steps"]), int(spec["max_steps"])
    budget_s = float(spec["budget_s"])
    began = None
    mark = time.perf_counter()
    for i in range(warmup + max_steps):
        if i == warmup:
            began = time.perf_counter()
        elif i > warmup and len(loops) - warmup >= min_steps and time.perf_counter() - began >= budget_s:
            break
        cpu_start = time.process_time()
        data = next_batch()            # what train.py's `for data in dataset` waits for
        got = time.perf_counter()
        model.set_input(data)
        model.optimize_parameters()
        sync()
        end = time.perf_counter()
        waits.append(got - mark)
        loops.append(end - mark)
        cpu.append(time.process_time() - cpu_start)
        mark = end
    check_losses_finite(model)
    timed_loops, timed_waits = loops[warmup:], waits[warmup:]
    return {"warmup_s": loops[:warmup], "warmup_wait_s": waits[:warmup], "times_s": timed_loops,
            "wait_s": timed_waits, "cpu_s": cpu[warmup:], **summarize(timed_loops),
            "data_wait_fraction": sum(timed_waits) / sum(timed_loops),
            "median_wait_s": statistics.median(timed_waits),
            "loader_workers": dataset.dataloader.num_workers, "num_threads": opt.num_threads,
            "dataset_images": len(dataset), "epochs_touched": state["epoch"],
            "peak_mem_mb": peak_memory_mb(device), **_common(device)}


def job_ddp(spec: dict) -> dict:
    """Synthetic steps with the networks wrapped in DDP (under torchrun) or alone (one process).

    Every rank runs the same fixed number of steps (a time budget could differ between ranks
    and leave one waiting in an all-reduce forever). A step's time is the slowest rank's."""
    from util import distributed
    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    ctx = distributed.init_distributed(spec.get("device", "auto"), float(spec.get("ddp_timeout", 600)))
    try:
        sync = syncer(ctx.device)
        opt = build_options(spec)
        model = build_model(opt, ctx)
        batch = synthetic_batch(opt, opt.batch_size, seed=ctx.rank)  # each rank its own images

        def step() -> None:
            model.set_input(batch)
            model.optimize_parameters()

        steps = int(spec["min_steps"])
        warm, times, cpu = run_timed(step, sync, int(spec["warmup"]), steps, steps, 0.0)
        per_rank = distributed.gather_objects(times)
        slowest = [max(column) for column in zip(*per_rank)]
        result = {"world_size": ctx.world_size, "backend": ctx.backend, "warmup_s": warm, "times_s": slowest,
                  "per_rank_times_s": per_rank, "cpu_s": cpu, **summarize(slowest),
                  "peak_mem_mb": peak_memory_mb(ctx.device), **_common(ctx.device)}
        distributed.barrier()
        check_losses_finite(model)  # after the last collective: no rank is left waiting
        return result if ctx.is_main else {}
    finally:
        distributed.shutdown()


def _time_op(fn: Callable[[], Any], sync: Callable[[], None], reps: int, min_time: float = 0.0) -> float:
    """Median seconds of `fn()` over `reps` runs after two warm-up runs."""
    for _ in range(2):
        fn()
    sync()
    times = []
    began = time.perf_counter()
    while len(times) < reps or time.perf_counter() - began < min_time:
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def job_peaks(spec: dict) -> dict:
    """Forward-only FLOP/s of one large conv and one large matmul per dtype: the yardsticks that
    the models' achieved FLOP/s are compared with."""
    ctx = _context(spec.get("device", "auto"), spec.get("threads"))
    device, sync = ctx.device, syncer(ctx.device)
    cuda = device.type == "cuda"
    reps = int(spec.get("reps", 10))
    n, c, hw, k = int(spec.get("conv_batch", 32 if cuda else 4)), 256, 64, 3
    m = int(spec.get("matmul_size", 8192 if cuda else 2048))
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    if cuda:
        dtypes["fp16"] = torch.float16
    conv_flops = conv2d_flops(n, c, c, k, hw, hw)
    result: dict[str, Any] = {"conv": {"batch": n, "channels": c, "size": hw, "kernel": k, "flops": conv_flops},
                              "matmul": {"size": m, "flops": 2 * m ** 3}}
    generator = torch.Generator().manual_seed(0)
    x32 = torch.randn(n, c, hw, hw, generator=generator).to(device)
    w32 = torch.randn(c, c, k, k, generator=generator).mul_(0.02).to(device)
    a32 = torch.randn(m, m, generator=generator).to(device)
    b32 = torch.randn(m, m, generator=generator).to(device)
    # The independent check of FlopCounterMode: it must agree with the textbook count.
    result["conv"]["flops_counted"] = count_flops(lambda: torch.nn.functional.conv2d(x32, w32, padding=1))
    with torch.no_grad():
        for name, dtype in dtypes.items():
            layouts = {}
            for layout, fmt in (("contiguous", torch.contiguous_format), ("channels_last", torch.channels_last)):
                x = x32.to(dtype).contiguous(memory_format=fmt)
                w = w32.to(dtype).contiguous(memory_format=fmt)
                seconds = _time_op(lambda: torch.nn.functional.conv2d(x, w, padding=1), sync, reps)
                layouts[layout] = conv_flops / seconds
            result[f"conv_{name}_flops_per_s"] = max(layouts.values())
            result[f"conv_{name}_by_layout"] = layouts
            a, b = a32.to(dtype), b32.to(dtype)
            seconds = _time_op(lambda: torch.mm(a, b), sync, reps)
            result[f"matmul_{name}_flops_per_s"] = 2 * m ** 3 / seconds
    result.update(_common(device))
    return result


JOBS = {"step": job_step, "loop": job_loop, "ddp": job_ddp, "peaks": job_peaks}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spec", required=True, help="the job, as a JSON object")
    parser.add_argument("--result", required=True, help="where to write the result (JSON)")
    args = parser.parse_args(argv)
    spec = json.loads(args.spec)
    started = time.perf_counter()
    result = JOBS[spec["kind"]](spec)
    if result:  # non-main DDP ranks return nothing
        result["job_wall_s"] = time.perf_counter() - started
        result["spec"] = spec
        Path(args.result).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
