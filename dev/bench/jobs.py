"""The kinds of job a worker runs (the "kind" key of its spec): step, loop, ddp, peaks.
Each returns the result written to the worker's --result JSON (see dev/bench_worker.py)."""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import torch

from bench.flops import conv2d_flops, count_dispatched_ops, count_flops
from bench.stats import summarize
from bench.timing import current_rss_mb, dynamo_graph_count, peak_memory_mb, run_timed, syncer, time_op
from bench.training import (
    build_model,
    build_options,
    check_losses_finite,
    common_fields,
    count_step_flops,
    make_context,
    synthetic_batch,
)


def job_step(spec: dict) -> dict:
    """One training step (the training engine's, as train.py takes it) on one synthetic batch, repeated; the
    aten operators one step dispatches ("ops_per_step"); with "count_flops", also
    the step's FLOPs per image (counted at batch 1, or on the model's smallest batch and divided: its
    mean image), in all ("flops_batch1") and per network ("flops_by_network_batch1")."""
    ctx = make_context(spec.get("device", "auto"), spec.get("threads"))
    device, sync = ctx.device, syncer(ctx.device)
    opt = build_options(spec)
    rss_before = current_rss_mb()
    trainee = build_model(opt, ctx, straightforward=bool(spec.get("straightforward")))
    batch = synthetic_batch(opt, opt.batch_size)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    def step() -> None:
        trainee.step(batch)

    # Warm-up first (compilation happens there), then count graphs so that a recompilation
    # inside the timed steps shows up in the result.
    warm, _, _ = run_timed(step, sync, int(spec["warmup"]), 0, 0, 0)
    graphs_before = dynamo_graph_count()
    _, times, cpu = run_timed(step, sync, 0, int(spec["min_steps"]), int(spec["max_steps"]), float(spec["budget_s"]))
    check_losses_finite(trainee.model)
    graphs_after = dynamo_graph_count()
    result = {"warmup_s": warm, "times_s": times, "cpu_s": cpu, **summarize(times),
              "graphs_compiled": graphs_after, "graphs_compiled_while_timed": graphs_after - graphs_before,
              "peak_mem_mb": peak_memory_mb(device), "rss_before_model_mb": rss_before, **common_fields(device)}
    # After timing, so that counting cannot inflate the peak memory: the aten operators one more step dispatches
    # (each a kernel launch or more on a GPU; the same count on every device). Not for compiled networks: under
    # the counting mode torch.compile steps aside and the step runs eagerly (dev/profile_step.py counts their launches)
    result["ops_per_step"] = None if spec.get("compile") else count_dispatched_ops(step)[0]
    if spec.get("count_flops"):
        result["flops_batch1"], result["flops_by_network_batch1"] = count_step_flops(trainee, opt)
    return result


class _Batches:
    """train.py's `for data in dataset` across epochs: a new epoch (set_epoch) when one ends."""

    def __init__(self, dataset):
        self.dataset, self.epoch = dataset, 1
        dataset.set_epoch(1)
        self.iterator = iter(dataset)

    def next(self) -> dict:
        try:
            return next(self.iterator)
        except StopIteration:
            self.epoch += 1
            self.dataset.set_epoch(self.epoch)
            self.iterator = iter(self.dataset)
            return next(self.iterator)


def _timed_loop(trainee, batches: _Batches, sync: Callable[[], None], spec: dict) -> tuple[list, list, list]:
    """(loop s, wait s, CPU s) per step, warm-up steps included: a step's loop time runs from the
    end of the previous step, its wait is the part spent getting the batch."""
    waits, loops, cpu = [], [], []
    warmup, min_steps, max_steps = int(spec["warmup"]), int(spec["min_steps"]), int(spec["max_steps"])
    began = None
    mark = time.perf_counter()
    for i in range(warmup + max_steps):
        if i == warmup:
            began = time.perf_counter()
        elif i > warmup and len(loops) - warmup >= min_steps and time.perf_counter() - began >= float(spec["budget_s"]):
            break
        cpu_start = time.process_time()
        data = batches.next()            # what train.py's `for data in dataset` waits for
        got = time.perf_counter()
        trainee.step(data)
        sync()
        end = time.perf_counter()
        waits.append(got - mark)
        loops.append(end - mark)
        cpu.append(time.process_time() - cpu_start)
        mark = end
    return loops, waits, cpu


def job_loop(spec: dict) -> dict:
    """train.py's loop on images from spec["dataroot"] with the default loader workers."""
    from data import create_dataset
    ctx = make_context(spec.get("device", "auto"), spec.get("threads"))
    device, sync = ctx.device, syncer(ctx.device)
    opt = build_options(spec, spec["dataroot"])
    dataset = create_dataset(opt, 0, ctx)
    trainee = build_model(opt, ctx)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    batches = _Batches(dataset)
    loops, waits, cpu = _timed_loop(trainee, batches, sync, spec)
    check_losses_finite(trainee.model)
    warmup = int(spec["warmup"])
    timed_loops, timed_waits = loops[warmup:], waits[warmup:]
    return {"warmup_s": loops[:warmup], "warmup_wait_s": waits[:warmup], "times_s": timed_loops,
            "wait_s": timed_waits, "cpu_s": cpu[warmup:], **summarize(timed_loops),
            "data_wait_fraction": sum(timed_waits) / sum(timed_loops),
            "median_wait_s": statistics.median(timed_waits),
            "loader_workers": dataset.dataloader.num_workers, "num_threads": opt.num_threads,
            "dataset_images": len(dataset), "epochs_touched": batches.epoch,
            "peak_mem_mb": peak_memory_mb(device), **common_fields(device)}


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
        trainee = build_model(opt, ctx)
        batch = synthetic_batch(opt, opt.batch_size, seed=ctx.rank)  # each rank its own images

        def step() -> None:
            trainee.step(batch)

        steps = int(spec["min_steps"])
        warm, times, cpu = run_timed(step, sync, int(spec["warmup"]), steps, steps, 0.0)
        per_rank = distributed.gather_objects(times)
        slowest = [max(column) for column in zip(*per_rank)]
        result = {"world_size": ctx.world_size, "backend": ctx.backend, "warmup_s": warm, "times_s": slowest,
                  "per_rank_times_s": per_rank, "cpu_s": cpu, **summarize(slowest),
                  "peak_mem_mb": peak_memory_mb(ctx.device), **common_fields(ctx.device)}
        distributed.barrier()
        check_losses_finite(trainee.model)  # after the last collective: no rank is left waiting
        return result if ctx.is_main else {}
    finally:
        distributed.shutdown()


def _peak_rates(x32: torch.Tensor, w32: torch.Tensor, a32: torch.Tensor, b32: torch.Tensor, dtype: torch.dtype,
                sync: Callable[[], None], reps: int) -> dict[str, Any]:
    """FLOP/s of the conv (per memory layout) and of the matmul in `dtype`."""
    conv_flops = conv2d_flops(x32.shape[0], x32.shape[1], w32.shape[0], w32.shape[2], x32.shape[2], x32.shape[3])
    layouts = {}
    with torch.no_grad():
        for layout, fmt in (("contiguous", torch.contiguous_format), ("channels_last", torch.channels_last)):
            x = x32.to(dtype).contiguous(memory_format=fmt)
            w = w32.to(dtype).contiguous(memory_format=fmt)
            layouts[layout] = conv_flops / time_op(lambda: torch.nn.functional.conv2d(x, w, padding=1), sync, reps)
        a, b = a32.to(dtype), b32.to(dtype)
        matmul = 2 * a.shape[0] ** 3 / time_op(lambda: torch.mm(a, b), sync, reps)
    return {"conv": max(layouts.values()), "by_layout": layouts, "matmul": matmul}


def job_peaks(spec: dict) -> dict:
    """Forward-only FLOP/s of one large conv and one large matmul per dtype: the yardsticks that
    the models' achieved FLOP/s are compared with."""
    ctx = make_context(spec.get("device", "auto"), spec.get("threads"))
    device, sync = ctx.device, syncer(ctx.device)
    cuda = device.type == "cuda"
    n, c, hw, k = int(spec.get("conv_batch", 32 if cuda else 4)), 256, 64, 3
    m = int(spec.get("matmul_size", 8192 if cuda else 2048))
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16} | ({"fp16": torch.float16} if cuda else {})
    result: dict[str, Any] = {"conv": {"batch": n, "channels": c, "size": hw, "kernel": k,
                                       "flops": conv2d_flops(n, c, c, k, hw, hw)},
                              "matmul": {"size": m, "flops": 2 * m ** 3}}
    generator = torch.Generator().manual_seed(0)
    x32 = torch.randn(n, c, hw, hw, generator=generator).to(device)
    w32 = torch.randn(c, c, k, k, generator=generator).mul_(0.02).to(device)
    a32 = torch.randn(m, m, generator=generator).to(device)
    b32 = torch.randn(m, m, generator=generator).to(device)
    # The independent check of FlopCounterMode: it must agree with the textbook count.
    result["conv"]["flops_counted"] = count_flops(lambda: torch.nn.functional.conv2d(x32, w32, padding=1))
    for name, dtype in dtypes.items():
        rates = _peak_rates(x32, w32, a32, b32, dtype, sync, int(spec.get("reps", 10)))
        result[f"conv_{name}_flops_per_s"] = rates["conv"]
        result[f"conv_{name}_by_layout"] = rates["by_layout"]
        result[f"matmul_{name}_flops_per_s"] = rates["matmul"]
    result.update(common_fields(device))
    return result


JOBS = {"step": job_step, "loop": job_loop, "ddp": job_ddp, "peaks": job_peaks}
