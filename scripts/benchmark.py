"""Benchmark training speed: CycleGAN and pix2pix, plain fp32 against the fast settings.

    python scripts/benchmark.py --out bench_out            # the full run (about 1.5 h on 2 CPU cores)
    python scripts/benchmark.py --quick --out bench_out    # smaller sizes, fewer configs and steps (minutes)
    python scripts/benchmark.py --dataroot ./datasets/horse2zebra --out bench_out   # your own data

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

Each measurement runs in a fresh process (scripts/bench_worker.py), so peak memory is per
configuration, and --compile starts from an empty inductor cache (the compile time reported is a
cold compile; it is excluded from the step-time median). Steps are timed after warm-up; the table
gives the median and the interquartile range. The full run measures the step configurations in
two passes, the second in reverse order, and pools them (--repeats), so that a load that drifts
during the run favours none of them. FLOPs per step are counted by
torch.utils.flop_counter.FlopCounterMode on the eager fp32 step (forward and backward of every
network in optimize_parameters) and divided by the median step time for the achieved FLOP/s,
which is also given as a fraction of the measured conv peak of the same dtype.

Writes OUT/benchmark.md (the tables, also printed), OUT/benchmark.json (everything, including
every step time) and OUT/logs/ (one log per measurement).
"""
from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "scripts" / "bench_worker.py"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MODELS = ("cycle_gan", "pix2pix")
# A configuration is "fp32" (plain eager float32) or settings joined by "+".
SETTINGS: dict[str, dict] = {
    "bf16": {"amp": "bf16"},
    "fp16": {"amp": "fp16"},
    "channels_last": {"channels_last": True},
    "compile": {"compile": True},
    "fused_adam": {"fused_adam": True},
    # Not a setting of ours: the step written plainly (scripts/straightforward_step.py), in fp32.
    "straightforward": {"straightforward": True},
}
STRAIGHTFORWARD = "straightforward"
CONFIGS = ["fp32", STRAIGHTFORWARD, "bf16", "channels_last", "compile", "fused_adam", "bf16+channels_last",
           "bf16+compile", "channels_last+compile", "channels_last+compile+fused_adam", "bf16+channels_last+compile",
           "bf16+channels_last+compile+fused_adam"]
CUDA_CONFIGS = ["fp16", "fp16+channels_last", "fp16+channels_last+compile", "fp16+channels_last+compile+fused_adam"]
BASELINE = "fp32"
# What the project aims for (issue 6); reported as met or not, never enforced. "not slower than the
# straightforward step" allows 5%, the spread of repeated timings on a quiet machine.
TARGETS = {"speedup": {"cycle_gan": 2.0, "pix2pix": 1.5}, "not_slower_than_straightforward": 1.05,
           "data_wait_fraction": 0.05, "ddp_efficiency": 0.9}
# The generators' smallest input multiple: unet_256 halves 8 times, so it needs multiples of 256.
SIZE_MULTIPLE = {"resnet_9blocks": 4, "unet_256": 256}
DEFAULT_NETG = {"cycle_gan": "resnet_9blocks", "pix2pix": "unet_256"}


@dataclass
class Timing:
    warmup: int
    min_steps: int
    max_steps: int
    budget_s: float

    def spec(self) -> dict:
        return {"warmup": self.warmup, "min_steps": self.min_steps, "max_steps": self.max_steps,
                "budget_s": self.budget_s}


@dataclass
class Plan:
    """What one run measures. `full_plan()` and `quick_plan()` are the two presets."""
    name: str
    step_size: dict[str, int]
    configs: list[str]
    step: Timing
    compile_warmup: int
    loop_size: dict[str, int]
    loop: Timing
    scaling_sizes: dict[str, list[int]]
    scaling_batches: list[int]
    scaling_batch_size: dict[str, int]
    scaling: Timing
    ddp: list[dict]
    ddp_warmup: int
    peak_reps: int
    repeats: int = 1  # passes over the step configurations, alternating their order
    peak_sizes: dict = field(default_factory=dict)  # conv_batch, matmul_size; the worker's defaults if empty
    sections: set[str] = field(default_factory=lambda: {"peaks", "step", "loop", "scaling", "ddp"})


def full_plan() -> Plan:
    return Plan(
        name="full",
        step_size={"cycle_gan": 256, "pix2pix": 256},
        configs=list(CONFIGS),
        step=Timing(warmup=2, min_steps=4, max_steps=15, budget_s=40.0),
        repeats=2,
        compile_warmup=3,
        loop_size={"cycle_gan": 256, "pix2pix": 256},
        loop=Timing(warmup=2, min_steps=8, max_steps=30, budget_s=60.0),
        scaling_sizes={"cycle_gan": [128, 256, 512], "pix2pix": [256, 512]},
        scaling_batches=[1, 4, 8],
        scaling_batch_size={"cycle_gan": 256, "pix2pix": 256},
        scaling=Timing(warmup=1, min_steps=3, max_steps=10, budget_s=30.0),
        ddp=[{"model": "cycle_gan", "size": 256, "steps": 4, "extra_args": []},
             {"model": "pix2pix", "size": 256, "steps": 10, "extra_args": ["--norm", "syncbatch"]}],
        ddp_warmup=1,
        peak_reps=10,
    )


def quick_plan() -> Plan:
    return Plan(
        name="quick",
        # pix2pix's unet_256 takes multiples of 256 only, so it stays at 256 (it is the cheap one).
        step_size={"cycle_gan": 64, "pix2pix": 256},
        configs=["fp32", STRAIGHTFORWARD, "bf16", "channels_last", "fused_adam", "bf16+channels_last"],
        step=Timing(warmup=1, min_steps=3, max_steps=5, budget_s=6.0),
        compile_warmup=2,
        loop_size={"cycle_gan": 64, "pix2pix": 256},
        loop=Timing(warmup=1, min_steps=3, max_steps=8, budget_s=6.0),
        scaling_sizes={"cycle_gan": [32, 64], "pix2pix": [256]},
        scaling_batches=[1, 2],
        scaling_batch_size={"cycle_gan": 64, "pix2pix": 256},
        scaling=Timing(warmup=1, min_steps=3, max_steps=3, budget_s=0.0),
        ddp=[{"model": "cycle_gan", "size": 64, "steps": 3, "extra_args": []}],
        ddp_warmup=1,
        peak_reps=5,
        peak_sizes={"conv_batch": 1, "matmul_size": 1536},
    )


# ----------------------------------------------------------------------------- environment


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def load_average() -> list[float] | None:
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None


def machine_info(device: str) -> dict[str, Any]:
    import torch
    cpu_model = platform.processor() or platform.machine()
    flags = ""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "Model name":
                cpu_model = value.strip()
            if key.strip() == "Flags":
                flags = value
    except (OSError, subprocess.SubprocessError):
        pass
    gcc = shutil.which("gcc") or shutil.which("cc")
    gcc_version = None
    if gcc:
        try:
            gcc_version = subprocess.run([gcc, "--version"], capture_output=True, text=True, timeout=10).stdout.splitlines()[0]
        except (OSError, subprocess.SubprocessError, IndexError):
            pass
    info = {
        "cpu_model": cpu_model,
        "cores_usable": usable_cores(),
        "cpu_bf16_instructions": {name: name in flags.split() for name in ("avx512_bf16", "amx_bf16")},
        "torch": torch.__version__, "python": platform.python_version(), "platform": platform.platform(),
        "compiler": gcc_version, "device": device,
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def pick_device(requested: str) -> str:
    """"cpu" or "cuda", chosen as train.py chooses (util.distributed.pick_device)."""
    from util.distributed import pick_device as pick_training_device
    from util.errors import UserError
    try:
        return pick_training_device(requested).type
    except UserError as err:
        sys.exit(f"benchmark: {err}")


# ----------------------------------------------------------------------------- datasets


def dataset_layout(path: Path) -> str | None:
    """'cycle_gan' for trainA+trainB folders, 'pix2pix' for an aligned train folder."""
    if (path / "trainA").is_dir() and (path / "trainB").is_dir():
        return "cycle_gan"
    if (path / "train").is_dir():
        return "pix2pix"
    return None


def demo_dataset(model: str, size: int, images: int, parent: Path) -> Path:
    """A demo dataset (scripts/make_demo_dataset.py) with `images` training images at `size`."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("make_demo_dataset", ROOT / "scripts" / "make_demo_dataset.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    folder = parent / f"{model}_{size}"
    if model == "cycle_gan":
        return module.make_cyclegan_demo(folder, size, 0, images, 2)
    return module.make_pix2pix_demo(folder, size, 0, images, 2, 2)


# ----------------------------------------------------------------------------- running jobs


class Runner:
    """Runs each measurement in a fresh worker process and keeps its log."""

    def __init__(self, out: Path, device: str, timeout_s: float, scratch: Path, threads: int | None = None,
                 resume: bool = False):
        self.out = out
        self.logs = out / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.device = device
        self.timeout_s = timeout_s
        self.scratch = scratch
        self.threads = threads  # compute threads of single-process jobs (None: torch's default)
        self.resume = resume  # reuse results already in logs/ for identical specs
        self.count = 0

    def run(self, name: str, spec: dict, nproc: int = 0, threads: int | None = None,
            compile_cache: str | None = None) -> dict:
        """Run one job; `compile_cache` names an inductor cache shared by the jobs that pass the same
        name (the first of them compiles cold, the others find the cache warm)."""
        self.count += 1
        spec = {"device": self.device, "checkpoints_dir": str(self.scratch / "checkpoints"), **spec}
        if self.threads and not nproc and not threads:
            threads = self.threads
            spec["threads"] = threads
        result_path = self.logs / f"{name}.json"
        log_path = self.logs / f"{name}.log"
        if self.resume and result_path.exists():
            try:
                previous = json.loads(result_path.read_text())
            except ValueError:
                previous = {}
            if previous.get("spec") == spec and "error" not in previous:
                print(f"  [{self.count}] {name}: kept from the earlier run (--resume)", flush=True)
                return previous
        result_path.unlink(missing_ok=True)
        command = [sys.executable, str(WORKER), "--spec", json.dumps(spec), "--result", str(result_path)]
        if nproc:
            command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
                       f"--master_port={free_port()}", *command[1:]]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if threads:
            env["OMP_NUM_THREADS"] = str(threads)
        if spec.get("compile"):  # a fresh cache: a cold compile, whatever ran on this machine before
            env["TORCHINDUCTOR_CACHE_DIR"] = str(self.scratch / f"inductor_{compile_cache or name}")
        print(f"  [{self.count}] {name} ...", end="", flush=True)
        started = time.perf_counter()
        load_before = load_average()
        try:
            with open(log_path, "w") as log:
                proc = subprocess.run(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                      timeout=self.timeout_s)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        wall = time.perf_counter() - started
        if rc == 0 and result_path.exists():
            result = json.loads(result_path.read_text())
            result["load_avg_start"] = load_before
            result_path.write_text(json.dumps(result, indent=1))  # with the load, for --resume
            print(f" {result['median_s']:.3f} s/step" if "median_s" in result else " done", f"({wall:.0f} s)", flush=True)
            return result
        tail = log_path.read_text(errors="replace").strip().splitlines()[-3:] if log_path.exists() else []
        error = f"exit {rc}: " + " | ".join(tail)
        print(f" FAILED ({error[:200]}); log: {log_path}", flush=True)
        return {"error": error, "log": str(log_path), "spec": spec}


def config_spec(config: str) -> dict:
    """The train.py settings of a configuration name, e.g. "bf16+compile"."""
    spec = {"amp": "none", "channels_last": False, "compile": False, "fused_adam": False, "straightforward": False}
    if config != BASELINE:
        for setting in config.split("+"):
            spec.update(SETTINGS[setting])
    return spec


def peak_dtype(config: str) -> str:
    return {"none": "fp32", "bf16": "bf16", "fp16": "fp16"}[config_spec(config)["amp"]]


# ----------------------------------------------------------------------------- measuring


def measure(args: argparse.Namespace, plan: Plan, runner: Runner, scratch: Path) -> dict:
    results: dict[str, Any] = {"peaks": None, "step": [], "loop": [], "scaling": [], "ddp": []}
    models = [m for m in MODELS if m in args.models]
    configs = list(plan.configs)
    if runner.device == "cuda" and plan.name == "full":
        configs += list(CUDA_CONFIGS)
    flops: dict[tuple[str, int], int] = {}  # (model, size) -> FLOPs per step at batch 1

    if "peaks" in plan.sections:
        print("device peaks")
        results["peaks"] = runner.run("peaks", {"kind": "peaks", "reps": plan.peak_reps, **plan.peak_sizes})

    if "step" in plan.sections:
        for model in models:
            size = plan.step_size[model]
            print(f"training step: {model}, {size}x{size}, batch 1, synthetic tensors"
                  + (f", {plan.repeats} passes (second in reverse order)" if plan.repeats > 1 else ""))
            passes: dict[str, list[dict]] = {config: [] for config in configs}
            for number in range(plan.repeats):
                # Alternate the order, so that a load that drifts during the run favours no configuration.
                for config in (configs if number % 2 == 0 else configs[::-1]):
                    compiled = config_spec(config)["compile"]
                    timing = Timing(plan.compile_warmup if compiled else plan.step.warmup, plan.step.min_steps,
                                    plan.step.max_steps, plan.step.budget_s)
                    spec = {"kind": "step", "model": model, "size": size, "batch": 1, **config_spec(config),
                            **timing.spec(), "count_flops": config == BASELINE and number == 0}
                    suffix = f"_pass{number + 1}" if plan.repeats > 1 else ""
                    result = runner.run(f"step_{model}_{config}{suffix}", spec, compile_cache=f"{model}_{config}")
                    if "flops_batch1" in result:
                        flops[(model, size)] = result["flops_batch1"]
                    passes[config].append(result)
            for config in configs:
                results["step"].append({"model": model, "config": config, "size": size, "batch": 1,
                                        **merge_passes(passes[config])})

    if "loop" in plan.sections:
        for model in models:
            size = plan.loop_size[model]
            loop_configs = [BASELINE]
            best = best_config(results["step"], model)
            if best and best not in loop_configs:
                loop_configs.append(best)
            dataroot = args.dataroots.get(model)
            images = plan.loop.warmup + plan.loop.max_steps + 2  # one epoch covers the timed steps
            if dataroot is None:
                dataroot = demo_dataset(model, size, images, scratch / "datasets")
            print(f"training loop: {model}, {size}x{size}, batch 1, images from {dataroot}")
            for config in loop_configs:
                compiled = config_spec(config)["compile"]
                timing = Timing(plan.compile_warmup if compiled else plan.loop.warmup, plan.loop.min_steps,
                                plan.loop.max_steps, plan.loop.budget_s)
                spec = {"kind": "loop", "model": model, "size": size, "batch": 1, "dataroot": str(dataroot),
                        **config_spec(config), **timing.spec()}
                result = runner.run(f"loop_{model}_{config}", spec, compile_cache=f"{model}_{config}")
                results["loop"].append({"model": model, "config": config, "size": size, "batch": 1, **result})

    if "scaling" in plan.sections:
        for model in models:
            print(f"scaling: {model}, plain fp32, size and batch")
            points = [(s, 1) for s in plan.scaling_sizes[model]]
            points += [(plan.scaling_batch_size[model], b) for b in plan.scaling_batches]
            seen = set()
            for size, batch in points:
                if (size, batch) in seen:
                    continue
                seen.add((size, batch))
                if size % SIZE_MULTIPLE[DEFAULT_NETG[model]]:
                    continue
                reused = find_row(results["step"], model=model, config=BASELINE, size=size, batch=batch)
                if reused is not None:
                    results["scaling"].append({**reused, "reused_from": "step"})
                    print(f"  {model} {size}x{size} batch {batch}: from the step measurement")
                    continue
                spec = {"kind": "step", "model": model, "size": size, "batch": batch, **config_spec(BASELINE),
                        **plan.scaling.spec(), "count_flops": (model, size) not in flops}
                result = runner.run(f"scaling_{model}_{size}px_b{batch}", spec)
                if "flops_batch1" in result:
                    flops[(model, size)] = result["flops_batch1"]
                results["scaling"].append({"model": model, "config": BASELINE, "size": size, "batch": batch, **result})

    if "ddp" in plan.sections and runner.device == "cpu":
        for entry in plan.ddp:
            if entry["model"] not in models:
                continue
            model, size = entry["model"], entry["size"]
            print(f"DDP weak scaling: {model}, {size}x{size}, batch 1 per process, 1 thread per process")
            spec = {"kind": "ddp", "model": model, "size": size, "batch": 1, **config_spec(BASELINE),
                    "warmup": plan.ddp_warmup, "min_steps": entry["steps"], "max_steps": entry["steps"],
                    "budget_s": 0, "threads": 1, "extra_args": entry["extra_args"]}
            one = runner.run(f"ddp_{model}_1rank", spec, threads=1)
            two = runner.run(f"ddp_{model}_2ranks", spec, nproc=2, threads=1)
            results["ddp"].append({"model": model, "size": size, "extra_args": entry["extra_args"],
                                   "one_rank": one, "two_ranks": two})
    elif "ddp" in plan.sections:
        print("DDP weak scaling: skipped (measured on the CPU only: gloo, one thread per rank)")

    derive(results, flops)
    return results


def compile_seconds(run: dict) -> float:
    """Warm-up time beyond what the same number of steady steps take: the compilation."""
    return max(0.0, sum(run["warmup_s"]) - len(run["warmup_s"]) * run["median_s"])


def merge_passes(runs: list[dict]) -> dict:
    """One result from the passes of a configuration: all timed steps pooled (median and quartiles
    over them), the highest peak memory, the first (cold-cache) pass's compile time; each pass's
    median kept."""
    failed = next((run for run in runs if "error" in run), None)
    if failed is not None:
        return failed
    for run in runs:
        if run.get("warmup_s") and run.get("graphs_compiled"):
            run["compile_s"] = compile_seconds(run)
    if len(runs) == 1:
        return runs[0]
    times = [t for run in runs for t in run["times_s"]]
    merged = {**runs[0], **_worker_summarize(times), "times_s": times,
              "cpu_s": [t for run in runs for t in run["cpu_s"]],
              "peak_mem_mb": max(run["peak_mem_mb"] for run in runs),
              "pass_medians_s": [run["median_s"] for run in runs],
              "load_avg_start": [run.get("load_avg_start") for run in runs],
              "load_avg_end": [run.get("load_avg_end") for run in runs],
              "warmup_s": [run["warmup_s"] for run in runs]}
    if "compile_s" in runs[0]:
        # The first pass compiled with an empty inductor cache; later passes found it filled.
        merged["compile_s"] = runs[0]["compile_s"]
        merged["compile_s_per_pass"] = [run.get("compile_s") for run in runs]
    merged["graphs_compiled_while_timed"] = sum(run.get("graphs_compiled_while_timed", 0) for run in runs)
    return merged


@functools.lru_cache(maxsize=None)
def _worker_module():
    import importlib.util
    spec = importlib.util.spec_from_file_location("bench_worker_stats", WORKER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _worker_summarize(times: list[float]) -> dict:
    return _worker_module().summarize(times)


def find_row(rows: list[dict], **match: Any) -> dict | None:
    """The first successful measurement in `rows` whose fields equal `match`."""
    return next((r for r in rows if "error" not in r and all(r.get(k) == v for k, v in match.items())), None)


def best_config(step_results: list[dict], model: str) -> str | None:
    """The non-baseline configuration with the shortest median step (None if none succeeded)."""
    candidates = [r for r in step_results if r["model"] == model and r["config"] not in (BASELINE, STRAIGHTFORWARD)
                  and "error" not in r]
    return min(candidates, key=lambda r: r["median_s"])["config"] if candidates else None


def derive(results: dict, flops: dict[tuple[str, int], int]) -> None:
    """Images/s, FLOPs, achieved FLOP/s, utilisation, speed-ups and efficiencies, in place."""
    peaks = results["peaks"] if results["peaks"] and "error" not in results["peaks"] else None

    def enrich(row: dict) -> None:
        if "error" in row:
            return
        row["images_per_s"] = row["batch"] / row["median_s"]
        per_image = flops.get((row["model"], row["size"]))
        if per_image is not None:
            row["flops_per_step"] = per_image * row["batch"]
            row["achieved_flops_per_s"] = row["flops_per_step"] / row["median_s"]
            dtype = peak_dtype(row["config"])
            peak = peaks.get(f"conv_{dtype}_flops_per_s") if peaks else None
            row["peak_dtype"] = dtype
            row["utilisation_of_conv_peak"] = row["achieved_flops_per_s"] / peak if peak else None
        if config_spec(row["config"])["compile"] and "compile_s" not in row and row.get("warmup_s"):
            row["compile_s"] = compile_seconds(row)

    for section in ("step", "loop", "scaling"):
        for row in results[section]:
            enrich(row)
    for section in ("step", "loop"):
        for row in results[section]:
            base = find_row(results[section], model=row["model"], config=BASELINE, size=row["size"], batch=row["batch"])
            if base is not None and "error" not in row:
                row["speedup_vs_fp32"] = base["median_s"] / row["median_s"]
    for row in results["step"]:
        loop = find_row(results["loop"], model=row["model"], config=row["config"], size=row["size"])
        row["data_wait_fraction"] = loop["data_wait_fraction"] if loop else None
    for row in results["loop"]:
        step = find_row(results["step"], model=row["model"], config=row["config"], size=row["size"])
        if step is not None and "error" not in row:
            row["loop_over_step"] = row["median_s"] / step["median_s"]
    for row in results["scaling"]:
        ref = min((r for r in results["scaling"] if r["model"] == row["model"] and "error" not in r),
                  key=lambda r: (r["size"] * r["size"] * r["batch"]), default=None)
        if ref is not None and "error" not in row:
            row["time_vs_smallest"] = row["median_s"] / ref["median_s"]
            row["work_vs_smallest"] = (row["size"] ** 2 * row["batch"]) / (ref["size"] ** 2 * ref["batch"])
    for row in results["ddp"]:
        one, two = row["one_rank"], row["two_ranks"]
        if "error" not in one and "error" not in two:
            row["one_rank_images_per_s"] = 1 / one["median_s"]
            row["two_ranks_images_per_s"] = 2 / two["median_s"]
            row["efficiency"] = row["two_ranks_images_per_s"] / (2 * row["one_rank_images_per_s"])


def _starts(row: dict) -> list[float]:
    starts = row.get("load_avg_start") or []
    if starts and not isinstance(starts[0], list):
        starts = [starts]
    return [start[0] for start in starts if start]


def noise_caveat(rows: list[dict], cores: int) -> str:
    """Why these measurements may be unreliable ('' if no reason is seen): other processes loading
    the machine (1-minute load average above the core count when a measurement started) or a wide
    spread of step times."""
    notes = []
    loads = [load for row in rows for load in _starts(row)]
    if loads and max(loads) > cores + 0.5:
        notes.append(f"load average up to {max(loads):.1f} on {cores} cores")
    spreads = [(row["q3_s"] - row["q1_s"]) / row["median_s"] for row in rows
               if row.get("median_s") and "q1_s" in row and "q3_s" in row]
    if spreads and max(spreads) > 0.2:
        notes.append(f"IQR up to {max(spreads):.0%} of the median")
    return "; ".join(notes)


def evaluate_targets(results: dict, cores: int = 0) -> list[dict]:
    cores = cores or usable_cores()
    targets = []
    for model, goal in TARGETS["speedup"].items():
        best = best_config(results["step"], model)
        row = find_row(results["step"], model=model, config=best)
        if row is None or "speedup_vs_fp32" not in row:
            continue
        base = find_row(results["step"], model=model, config=BASELINE)
        targets.append({"target": f"{model}: best fast configuration >= {goal:.1f}x plain fp32 eager",
                        "measured": f"{row['speedup_vs_fp32']:.2f}x ({best}, {row['size']}px)",
                        "value": row["speedup_vs_fp32"], "goal": goal, "met": row["speedup_vs_fp32"] >= goal,
                        "caveat": noise_caveat([row, base], cores)})
    for model in TARGETS["speedup"]:
        base = find_row(results["step"], model=model, config=BASELINE)
        plain = find_row(results["step"], model=model, config=STRAIGHTFORWARD)
        if base is not None and plain is not None:
            ratio = base["median_s"] / plain["median_s"]
            goal = TARGETS["not_slower_than_straightforward"]
            targets.append({"target": f"{model}: plain fp32 eager not slower than the straightforward step "
                                      f"(time ratio <= {goal})",
                            "measured": f"{ratio:.3f} ({base['median_s']:.3f} s vs {plain['median_s']:.3f} s, "
                                        f"{base['size']}px)",
                            "value": ratio, "goal": goal, "met": ratio <= goal,
                            "caveat": noise_caveat([base, plain], cores)})
    for row in results["loop"]:
        if "error" in row:
            continue
        goal = TARGETS["data_wait_fraction"]
        targets.append({"target": f"{row['model']} {row['config']}: data wait < {goal:.0%} of loop time "
                                  f"(default --num_threads, demo data)",
                        "measured": f"{row['data_wait_fraction']:.2%} ({row['size']}px, {row['loader_workers']} workers)",
                        "value": row["data_wait_fraction"], "goal": goal, "met": row["data_wait_fraction"] < goal,
                        "caveat": noise_caveat([row], cores)})
    for row in results["ddp"]:
        if "efficiency" not in row:
            continue
        goal = TARGETS["ddp_efficiency"]
        targets.append({"target": f"{row['model']}: DDP weak-scaling efficiency >= {goal} at 2 ranks (CPU, gloo)",
                        "measured": f"{row['efficiency']:.2f} ({row['size']}px)",
                        "value": row["efficiency"], "goal": goal, "met": row["efficiency"] >= goal,
                        "caveat": noise_caveat([row["one_rank"], row["two_ranks"]], cores)})
    return targets


# ----------------------------------------------------------------------------- reporting


def _num(value: float | None, fmt: str = "{:.3f}") -> str:
    return "—" if value is None else fmt.format(value)


def _iqr(row: dict) -> str:
    return f"{row['q1_s']:.3f}–{row['q3_s']:.3f}"


def _g(value: float | None) -> str:
    return "—" if value is None else f"{value / 1e9:.1f}"


def _load_cell(row: dict) -> str:
    """The 1-minute load average when the measurement started (per pass)."""
    starts = row.get("load_avg_start")
    if not starts:
        return "—"
    if not isinstance(starts[0], list):
        starts = [starts]
    return " / ".join(f"{start[0]:.1f}" for start in starts if start)


def _compile_cell(row: dict) -> str:
    if not config_spec(row["config"])["compile"]:
        return "—"
    if not row.get("graphs_compiled"):
        return "not compiled (no C compiler?)"
    extra = f", {row['graphs_compiled_while_timed']} while timed" if row.get("graphs_compiled_while_timed") else ""
    warm = row.get("compile_s_per_pass", [])[1:]
    warm_text = f"; warm cache {warm[0]:.0f}" if warm and warm[0] is not None else ""
    return f"{row.get('compile_s', 0):.0f} cold{warm_text} ({row['graphs_compiled']} graphs{extra})"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def render_markdown(report: dict) -> str:
    meta, results = report["meta"], report["results"]
    m = meta["machine"]
    bf16_hw = ", ".join(name for name, present in m.get("cpu_bf16_instructions", {}).items() if present)
    lines = [f"## Benchmark ({meta['mode']} run, {meta['date']})", "",
             f"`{meta['command']}`", "",
             f"Machine: {m['cpu_model']}, {m['cores_usable']} usable cores, torch {m['torch']} "
             f"(CPU capability {m['torch_cpu_capability']}), Python {m['python']}, device {m['device']}, "
             f"compute threads per process: {meta.get('threads', 'default')}"
             + (f" ({m['gpu']})" if m.get("gpu") else "") + f"; compiler: {m['compiler'] or 'none'}"
             + (f"; CPU bf16 instructions: {bf16_hw or 'none (oneDNN emulates bf16)'}" if m["device"] == "cpu" else "")
             + ". "
             f"Load average (1/5/15 min) at start {meta['load_avg_start']}, at end {meta['load_avg_end']}; "
             f"run took {meta['runtime_s'] / 60:.1f} min.", ""]
    peaks = results.get("peaks")
    if peaks and "error" not in peaks:
        conv, mm = peaks["conv"], peaks["matmul"]
        lines += [f"### Device peaks (forward only; conv 3x3 {conv['channels']}->{conv['channels']} at "
                  f"{conv['size']}x{conv['size']}, batch {conv['batch']}; matmul {mm['size']}^2; best of "
                  f"contiguous and channels-last)", ""]
        rows = []
        for dtype in ("fp32", "bf16", "fp16"):
            if f"conv_{dtype}_flops_per_s" in peaks:
                rows.append([dtype, _g(peaks[f"conv_{dtype}_flops_per_s"]), _g(peaks[f"matmul_{dtype}_flops_per_s"])])
        lines += _table(["dtype", "conv GFLOP/s", "matmul GFLOP/s"], rows) + [""]
        lines += [f"FlopCounterMode counts {conv['flops_counted'] / 1e9:.2f} GFLOP for this conv; the textbook "
                  f"2·N·Cin·Cout·k²·H·W gives {conv['flops'] / 1e9:.2f}.", ""]
    elif peaks:
        lines += [f"Device peaks: FAILED ({peaks['error'][:300]})", ""]

    for model in MODELS:
        rows_in = [r for r in results["step"] if r["model"] == model]
        if not rows_in:
            continue
        size = rows_in[0]["size"]
        lines += [f"### Training step: {model} ({DEFAULT_NETG[model]}), {size}x{size}, batch 1, synthetic tensors", ""]
        rows = []
        for r in rows_in:
            if "error" in r:
                rows.append([r["config"], f"FAILED: {r['error'][:120]}"] + [""] * 12)
                continue
            passes = " / ".join(f"{m:.3f}" for m in r.get("pass_medians_s", [r["median_s"]]))
            rows.append([r["config"], f"{r['median_s']:.3f}", _iqr(r), passes, f"{r['steps']}", f"{r['images_per_s']:.3f}",
                         _num(r.get("speedup_vs_fp32"), "{:.2f}x"), f"{r['peak_mem_mb']:.0f}",
                         _g(r.get("flops_per_step")), _g(r.get("achieved_flops_per_s")),
                         _num(r.get("utilisation_of_conv_peak"), "{:.0%}") + f" ({r.get('peak_dtype', '?')})",
                         _num(r.get("data_wait_fraction"), "{:.1%}"), _compile_cell(r), _load_cell(r)])
        lines += _table(["config", "median s/step", "IQR s", "pass medians", "steps", "img/s", "vs fp32", "peak MiB",
                         "GFLOP/step", "GFLOP/s", "of conv peak", "data wait", "compile s", "load"], rows) + [""]
    if results["step"]:
        lines += ["vs fp32: plain fp32 eager median / this median (same run). of conv peak: achieved FLOP/s over "
                  "the measured conv peak of the dtype in brackets. compile s: warm-up time beyond steady steps "
                  "with an empty inductor cache (cold) and, in a second pass, with the cache the first filled. "
                  "load: 1-minute load average when each measurement started; above the number of cores, other "
                  "processes competed for them and the times are inflated.", ""]

    if results["loop"]:
        lines += ["### Training loop with real data (train.py's loop, default --num_threads)", ""]
        rows = []
        for r in results["loop"]:
            if "error" in r:
                rows.append([r["model"], r["config"], f"FAILED: {r['error'][:120]}"] + [""] * 10)
                continue
            rows.append([r["model"], r["config"], f"{r['size']}", f"{r['median_s']:.3f}", _iqr(r), f"{r['steps']}",
                         f"{r['images_per_s']:.3f}", _num(r.get("speedup_vs_fp32"), "{:.2f}x"),
                         f"{r['data_wait_fraction']:.2%}", _num(r.get("loop_over_step"), "{:.2f}"),
                         f"{r['loader_workers']} (--num_threads {r['num_threads']})", f"{r['peak_mem_mb']:.0f}",
                         _load_cell(r)])
        lines += _table(["model", "config", "px", "median s/step", "IQR s", "steps", "img/s", "vs fp32",
                         "data wait", "loop / step", "loader workers", "peak MiB", "load"], rows)
        lines += ["", "data wait: time blocked on the next batch / loop time. loop / step: loop median over "
                      "the synthetic step median (cost of loading in the same cores).", ""]

    if results["scaling"]:
        lines += ["### Scaling of the plain fp32 step with image size and batch", ""]
        rows = []
        for r in results["scaling"]:
            if "error" in r:
                rows.append([r["model"], f"{r['size']}", f"{r['batch']}", f"FAILED: {r['error'][:120]}"] + [""] * 7)
                continue
            rows.append([r["model"], f"{r['size']}", f"{r['batch']}", f"{r['median_s']:.3f}", _iqr(r),
                         f"{r['images_per_s']:.3f}", _g(r.get("flops_per_step")), _g(r.get("achieved_flops_per_s")),
                         f"{r['peak_mem_mb']:.0f}",
                         f"{r['time_vs_smallest']:.2f} / {r['work_vs_smallest']:.0f}" if "time_vs_smallest" in r else "—",
                         _load_cell(r)])
        lines += _table(["model", "px", "batch", "median s/step", "IQR s", "img/s", "GFLOP/step", "GFLOP/s",
                         "peak MiB", "time / pixels vs smallest", "load"], rows)
        if any(r["model"] == "pix2pix" for r in results["scaling"]):
            lines += ["", "pix2pix has no 128px point: its default unet_256 generator takes multiples of 256 only."]
        lines += [""]

    if results["ddp"]:
        lines += ["### DDP weak scaling on the CPU (gloo, batch 1 and 1 thread per process, synthetic tensors)", ""]
        rows = []
        for r in results["ddp"]:
            one, two = r["one_rank"], r["two_ranks"]
            note = " ".join(r["extra_args"]) or "default flags"
            if "efficiency" not in r:
                error = one.get("error") or two.get("error")
                rows.append([r["model"], f"{r['size']}", note, f"FAILED: {str(error)[:120]}"] + [""] * 5)
                continue
            rows.append([r["model"], f"{r['size']}", note, f"{one['median_s']:.3f} ({_iqr(one)})",
                         f"{two['median_s']:.3f} ({_iqr(two)})", f"{r['one_rank_images_per_s']:.3f}",
                         f"{r['two_ranks_images_per_s']:.3f}", f"{r['efficiency']:.2f}",
                         f"{_load_cell(one)} / {_load_cell(two)}"])
        lines += _table(["model", "px", "flags", "1 process s/step (IQR)", "2 processes s/step (IQR)",
                         "img/s, 1 process", "img/s, 2 processes", "efficiency", "load"], rows)
        lines += ["", "efficiency = img/s with 2 processes / (2 x img/s with 1 process); a step of 2 processes "
                      "takes as long as its slower rank.", ""]

    if report["targets"]:
        lines += ["### Targets", ""]
        lines += _table(["target", "measured", "met", "caveat"],
                        [[t["target"], t["measured"], "yes" if t["met"] else "**no**", t.get("caveat") or "—"]
                         for t in report["targets"]])
        lines += [""]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--out", type=Path, default=Path("bench_out"), help="folder for benchmark.md, benchmark.json and logs/")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer configurations and steps, no --compile (a few minutes on 2 cores)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="where to measure")
    parser.add_argument("--dataroot", action="append", default=[], type=Path,
                        help="a dataset for the loop measurement instead of the generated demo data: trainA/trainB "
                             "folders are used for cycle_gan, an aligned train/ folder for pix2pix (repeatable)")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated subset of " + ", ".join(MODELS))
    parser.add_argument("--configs", default=None, help="comma-separated subset of: " + ", ".join(CONFIGS) +
                        " (fp32 is always measured: everything is compared with it)")
    parser.add_argument("--sections", default=None, help="comma-separated subset of: peaks, step, loop, scaling, ddp")
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
    parser.add_argument("--keep_scratch", action="store_true", help="keep OUT/scratch (generated datasets, inductor caches) after the run")
    args = parser.parse_args(argv)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    bad = [m for m in args.models if m not in MODELS]
    if bad:
        parser.error(f"--models: unknown {bad}; choose from {MODELS}")
    args.dataroots = {}
    for root in args.dataroot:
        layout = dataset_layout(root)
        if layout is None:
            parser.error(f"--dataroot {root}: expected trainA/ and trainB/ (CycleGAN) or train/ (pix2pix) inside")
        args.dataroots[layout] = root.resolve()
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    plan = quick_plan() if args.quick else full_plan()
    if args.configs:
        wanted = [c.strip() for c in args.configs.split(",") if c.strip()]
        unknown = [c for c in wanted if c not in CONFIGS and c not in CUDA_CONFIGS]
        if unknown:
            sys.exit(f"benchmark: --configs: unknown {unknown}")
        plan.configs = [BASELINE] + [c for c in wanted if c != BASELINE]
    if args.repeats is not None:
        plan.repeats = max(1, args.repeats)
    if args.sections:
        plan.sections = {s.strip() for s in args.sections.split(",") if s.strip()}
    device = pick_device(args.device)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    # Generated datasets, inductor caches and checkpoints; kept if the run is interrupted, so that
    # --resume finds the same paths (and so the same job specs).
    scratch = out / "scratch"
    scratch.mkdir(exist_ok=True)
    command = "python scripts/benchmark.py " + " ".join(argv if argv is not None else sys.argv[1:])
    partial = bool(args.configs or args.sections) or set(args.models) != set(MODELS)
    meta = {"mode": f"{plan.name} plan, partial" if partial else plan.name, "command": command.strip(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine_info(device), "load_avg_start": load_average(), "plan": _plan_json(plan),
            "threads": args.threads or "default"}
    print(f"benchmark ({plan.name}) on {device}: {meta['machine']['cpu_model']}, "
          f"{meta['machine']['cores_usable']} cores, torch {meta['machine']['torch']}; load average "
          f"{meta['load_avg_start']}; writing to {out}")
    try:
        runner = Runner(out, device, args.job_timeout, scratch, args.threads, args.resume)
        results = measure(args, plan, runner, scratch)
    except BaseException:
        print(f"benchmark interrupted; the finished measurements are in {out / 'logs'}: run the same command "
              f"with --resume to continue", file=sys.stderr)
        raise
    if not args.keep_scratch:
        shutil.rmtree(scratch, ignore_errors=True)
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
    failed = [r for section in ("step", "loop", "scaling") for r in results[section] if "error" in r]
    failed += [r for r in results["ddp"] if "efficiency" not in r]
    if results["peaks"] is not None and "error" in results["peaks"]:
        failed.append(results["peaks"])
    return 1 if failed else 0


def _plan_json(plan: Plan) -> dict:
    data = {k: v for k, v in vars(plan).items()}
    data["sections"] = sorted(plan.sections)
    for key in ("step", "loop", "scaling"):
        data[key] = vars(getattr(plan, key))
    return data


if __name__ == "__main__":
    sys.exit(main())
