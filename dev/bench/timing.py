"""Timing and memory inside a worker: timed steps after warm-up, peak memory, compiled graphs."""
from __future__ import annotations

import os
import resource
import statistics
import sys
import time
from typing import Any, Callable

import torch


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
    """A function that waits for the device's queued work (nothing to wait for on the CPU)."""
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


def time_op(fn: Callable[[], Any], sync: Callable[[], None], reps: int, min_time: float = 0.0) -> float:
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
