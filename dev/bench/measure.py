"""The sections of a run (peaks, step, loop, scaling, ddp): which jobs each starts, in which
order, and how their results are gathered. Every job runs through a `Runner`."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.derive import best_config, derive, find_row, merge_passes
from bench.environment import demo_dataset
from bench.plan import (
    BASELINE,
    DEFAULT_NETG,
    MODELS,
    SIZE_MULTIPLE,
    STEP_BATCH,
    STEP_ONLY_MODELS,
    STRAIGHTFORWARD,
    VOLUME_MODELS,
    Plan,
    Timing,
    config_spec,
)
from bench.runner import Runner

# (model, size) -> {"total": FLOPs of one step at batch 1, "by_network": {net: {"forward", "backward"}}}
FlopTable = dict[tuple[str, int], dict]


def measure(plan: Plan, runner: Runner, models: list[str], dataroots: dict[str, Path], scratch: Path) -> dict:
    """Run the plan's sections for `models`; the results with derived numbers (bench.derive)."""
    results: dict[str, Any] = {"peaks": None, "step": [], "loop": [], "scaling": [], "ddp": [], "checkpointing": [],
                               "volumes": []}
    volume_models = [m for m in VOLUME_MODELS if m in models]
    step_models = [m for m in (*MODELS, *STEP_ONLY_MODELS) if m in models and m not in VOLUME_MODELS]
    models = [m for m in MODELS if m in models]  # the other sections
    flops: FlopTable = {}
    if "peaks" in plan.sections:
        print("device peaks")
        results["peaks"] = runner.run("peaks", {"kind": "peaks", "reps": plan.peak_reps, **plan.peak_sizes})
    if "step" in plan.sections:
        configs = plan.step_configs(runner.device)
        for model in step_models:  # CUT has no straightforward twin (dev/straightforward_step.py)
            plain = [c for c in configs if model not in STEP_ONLY_MODELS or c != STRAIGHTFORWARD]
            results["step"] += measure_steps(plan, runner, model, plain, flops)
    if "loop" in plan.sections:
        for model in models:
            results["loop"] += measure_loops(plan, runner, model, results["step"], dataroots.get(model), scratch)
    if "scaling" in plan.sections:
        for model in models:
            results["scaling"] += measure_scaling(plan, runner, model, results["step"], flops)
    if "checkpointing" in plan.sections:
        for model in models:
            results["checkpointing"] += measure_checkpointing(plan, runner, model)
    if "volumes" in plan.sections:
        for model in volume_models:
            results["volumes"] += measure_volumes(plan, runner, model)
    if "ddp" in plan.sections and runner.device == "cpu":
        results["ddp"] = [measure_ddp(plan, runner, entry) for entry in plan.ddp if entry["model"] in models]
    elif "ddp" in plan.sections:
        print("DDP weak scaling: skipped (measured on the CPU only: gloo, one thread per rank)")
    derive(results, flops)
    return results


def _network_args(plan: Plan) -> dict:
    return {"extra_args": list(plan.network_args)} if plan.network_args else {}


def _note_flops(flops: FlopTable, model: str, size: int, result: dict) -> None:
    if "flops_batch1" in result:
        flops[(model, size)] = {"total": result["flops_batch1"],
                                "by_network": result.get("flops_by_network_batch1", {})}


def measure_steps(plan: Plan, runner: Runner, model: str, configs: list[str], flops: FlopTable) -> list[dict]:
    """One row per configuration: the synthetic step, in `plan.repeats` passes of alternating
    order, pooled. The first fp32 job also counts the step's FLOPs (into `flops`)."""
    size, batch = plan.step_size[model], STEP_BATCH.get(model, 1)
    print(f"training step: {model}, {size}x{size}, batch {batch}, synthetic tensors"
          + (f", {plan.repeats} passes (second in reverse order)" if plan.repeats > 1 else ""))
    passes: dict[str, list[dict]] = {config: [] for config in configs}
    for number in range(plan.repeats):
        # Alternate the order, so that a load that drifts during the run favours no configuration.
        for config in (configs if number % 2 == 0 else configs[::-1]):
            compiled = config_spec(config)["compile"]
            timing = Timing(plan.compile_warmup if compiled else plan.step.warmup, plan.step.min_steps,
                            plan.step.max_steps, plan.step.budget_s)
            spec = {"kind": "step", "model": model, "size": size, "batch": batch, **config_spec(config),
                    **timing.spec(), "count_flops": config == BASELINE and number == 0,
                    **_network_args(plan)}
            suffix = f"_pass{number + 1}" if plan.repeats > 1 else ""
            result = runner.run(f"step_{model}_{config}{suffix}", spec, compile_cache=f"{model}_{config}")
            _note_flops(flops, model, size, result)
            passes[config].append(result)
    return [{"model": model, "config": config, "size": size, "batch": batch, **merge_passes(passes[config])}
            for config in configs]


def measure_loops(plan: Plan, runner: Runner, model: str, step_rows: list[dict], dataroot: Path | None,
                  scratch: Path) -> list[dict]:
    """train.py's loop on images from disk, plain fp32 and the fastest step configuration."""
    size = plan.loop_size[model]
    loop_configs = [BASELINE]
    best = best_config(step_rows, model)
    if best and best not in loop_configs:
        loop_configs.append(best)
    if dataroot is None:
        images = plan.loop.warmup + plan.loop.max_steps + 2  # one epoch covers the timed steps
        dataroot = demo_dataset(model, size, images, scratch / "datasets")
    print(f"training loop: {model}, {size}x{size}, batch 1, images from {dataroot}")
    rows = []
    for config in loop_configs:
        compiled = config_spec(config)["compile"]
        timing = Timing(plan.compile_warmup if compiled else plan.loop.warmup, plan.loop.min_steps,
                        plan.loop.max_steps, plan.loop.budget_s)
        spec = {"kind": "loop", "model": model, "size": size, "batch": 1, "dataroot": str(dataroot),
                **config_spec(config), **timing.spec(), **_network_args(plan)}
        result = runner.run(f"loop_{model}_{config}", spec, compile_cache=f"{model}_{config}")
        rows.append({"model": model, "config": config, "size": size, "batch": 1, **result})
    return rows


def measure_scaling(plan: Plan, runner: Runner, model: str, step_rows: list[dict], flops: FlopTable) -> list[dict]:
    """The plain fp32 step at the plan's sizes (batch 1) and batches; a point the step section
    measured already is reused."""
    print(f"scaling: {model}, plain fp32, size and batch")
    points = [(s, 1) for s in plan.scaling_sizes[model]]
    points += [(plan.scaling_batch_size[model], b) for b in plan.scaling_batches]
    rows = []
    for size, batch in dict.fromkeys(points):  # in order, without repeats
        if size % SIZE_MULTIPLE[DEFAULT_NETG[model]]:
            continue
        reused = find_row(step_rows, model=model, config=BASELINE, size=size, batch=batch)
        if reused is not None:
            rows.append({**reused, "reused_from": "step"})
            print(f"  {model} {size}x{size} batch {batch}: from the step measurement")
            continue
        spec = {"kind": "step", "model": model, "size": size, "batch": batch, **config_spec(BASELINE),
                **plan.scaling.spec(), "count_flops": (model, size) not in flops, **_network_args(plan)}
        result = runner.run(f"scaling_{model}_{size}px_b{batch}", spec)
        _note_flops(flops, model, size, result)
        rows.append({"model": model, "config": BASELINE, "size": size, "batch": batch, **result})
    return rows


def measure_ddp(plan: Plan, runner: Runner, entry: dict) -> dict:
    """Weak scaling: the same fixed number of steps in one process and in two under torchrun."""
    model, size = entry["model"], entry["size"]
    print(f"DDP weak scaling: {model}, {size}x{size}, batch 1 per process, 1 thread per process")
    spec = {"kind": "ddp", "model": model, "size": size, "batch": 1, **config_spec(BASELINE),
            "warmup": plan.ddp_warmup, "min_steps": entry["steps"], "max_steps": entry["steps"],
            "budget_s": 0, "threads": 1, "extra_args": entry["extra_args"] + plan.network_args}
    one = runner.run(f"ddp_{model}_1rank", spec, threads=1)
    two = runner.run(f"ddp_{model}_2ranks", spec, nproc=2, threads=1)
    return {"model": model, "size": size, "extra_args": entry["extra_args"], "one_rank": one, "two_ranks": two}


def measure_checkpointing(plan: Plan, runner: Runner, model: str) -> list[dict]:
    """The plain fp32 step at the plan's checkpointing size (batch 1), without and with
    --checkpoint_activations: time and peak memory (each in its own process)."""
    size = plan.checkpointing_size.get(model)
    if size is None:
        return []
    print(f"activation checkpointing: {model}, {size}x{size}, batch 1, plain fp32 without and with it")
    return without_and_with_checkpointing(plan, runner, model, size, f"checkpointing_{model}_{size}px", False)


def measure_volumes(plan: Plan, runner: Runner, model: str) -> list[dict]:
    """The plain fp32 step of a volume model (batch 1) at each of the plan's patch sizes, without and with
    --checkpoint_activations, each in its own process: time, peak memory, and (without) the step's FLOPs."""
    rows = []
    for size in plan.volume_sizes:
        print(f"volumes: {model}, {size}^3 patches, batch 1, plain fp32 without and with --checkpoint_activations")
        rows += without_and_with_checkpointing(plan, runner, model, size, f"volumes_{model}_{size}vox", True)
    return rows


def without_and_with_checkpointing(plan: Plan, runner: Runner, model: str, size: int, name: str,
                                   count_flops: bool) -> list[dict]:
    """Two rows: the plain fp32 step (batch 1) at `size`, then with --checkpoint_activations, each job named
    `name`_off/_on in its own process; with `count_flops`, the plain one counts the step's FLOPs."""
    rows = []
    for checkpointing in (False, True):
        extra = list(plan.network_args) + (["--checkpoint_activations"] if checkpointing else [])
        spec = {"kind": "step", "model": model, "size": size, "batch": 1, **config_spec(BASELINE),
                **plan.checkpointing.spec(), "count_flops": count_flops and not checkpointing, "extra_args": extra}
        rows.append({"model": model, "config": BASELINE, "size": size, "batch": 1,
                     "checkpoint_activations": checkpointing,
                     **runner.run(f"{name}_{'on' if checkpointing else 'off'}", spec)})
    return rows
