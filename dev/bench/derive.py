"""Numbers derived from the measurements: pooled passes, images/s, FLOPs and FLOP/s per step and
per network, utilisation of the conv peak, speed-ups over plain fp32, data-wait fractions,
scaling ratios, DDP efficiency, and the targets met or not."""
from __future__ import annotations

from typing import Any

from bench.environment import usable_cores
from bench.plan import BASELINE, STRAIGHTFORWARD, TARGETS, config_spec, peak_dtype
from bench.stats import summarize


def compile_seconds(run: dict) -> float:
    """Warm-up time beyond what the same number of steady steps take: the compilation."""
    return max(0.0, sum(run["warmup_s"]) - len(run["warmup_s"]) * run["median_s"])


def merge_passes(runs: list[dict]) -> dict:
    """One result from the passes of a configuration: all timed steps pooled (median and quartiles
    over them), the highest peak memory, the first (cold-cache) pass's compile time; each pass's
    median kept. The first failed pass, if any, instead."""
    failed = next((run for run in runs if "error" in run), None)
    if failed is not None:
        return failed
    for run in runs:
        if run.get("warmup_s") and run.get("graphs_compiled"):
            run["compile_s"] = compile_seconds(run)
    if len(runs) == 1:
        return runs[0]
    times = [t for run in runs for t in run["times_s"]]
    merged = {**runs[0], **summarize(times), "times_s": times,
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


def find_row(rows: list[dict], **match: Any) -> dict | None:
    """The first successful measurement in `rows` whose fields equal `match`."""
    return next((r for r in rows if "error" not in r and all(r.get(k) == v for k, v in match.items())), None)


def best_config(step_results: list[dict], model: str) -> str | None:
    """The non-baseline configuration with the shortest median step (None if none succeeded)."""
    candidates = [r for r in step_results if r["model"] == model and r["config"] not in (BASELINE, STRAIGHTFORWARD)
                  and "error" not in r]
    return min(candidates, key=lambda r: r["median_s"])["config"] if candidates else None


def derive(results: dict, flops: dict[tuple[str, int], dict]) -> None:
    """Add the derived numbers to `results` in place. `flops[(model, size)]` holds "total", the
    FLOPs of one step at batch 1, and "by_network", {network: {"forward": .., "backward": ..}}."""
    peaks = results["peaks"] if results["peaks"] and "error" not in results["peaks"] else None
    for section in ("step", "loop", "scaling"):
        for row in results[section]:
            if "error" not in row:
                _add_rates(row, flops.get((row["model"], row["size"])), peaks)
    _add_speedups(results)
    _add_scaling_ratios(results["scaling"])
    for row in results["ddp"]:
        one, two = row["one_rank"], row["two_ranks"]
        if "error" not in one and "error" not in two:
            row["one_rank_images_per_s"] = 1 / one["median_s"]
            row["two_ranks_images_per_s"] = 2 / two["median_s"]
            row["efficiency"] = row["two_ranks_images_per_s"] / (2 * row["one_rank_images_per_s"])


def _add_rates(row: dict, flops: dict | None, peaks: dict | None) -> None:
    """Images/s; FLOPs of the row's batch (in all and per network), FLOP/s and utilisation."""
    row["images_per_s"] = row["batch"] / row["median_s"]
    if flops is not None:
        # Conv FLOPs are per image: a batch of b costs b times the batch-1 count.
        row["flops_per_step"] = flops["total"] * row["batch"]
        row["flops_by_network"] = {net: {phase: count * row["batch"] for phase, count in phases.items()}
                                   for net, phases in flops["by_network"].items()}
        row["achieved_flops_per_s"] = row["flops_per_step"] / row["median_s"]
        dtype = peak_dtype(row["config"])
        peak = peaks.get(f"conv_{dtype}_flops_per_s") if peaks else None
        row["peak_dtype"] = dtype
        row["utilisation_of_conv_peak"] = row["achieved_flops_per_s"] / peak if peak else None
    if config_spec(row["config"])["compile"] and "compile_s" not in row and row.get("warmup_s"):
        row["compile_s"] = compile_seconds(row)


def _add_speedups(results: dict) -> None:
    """Speed-up over plain fp32 (step and loop); each step row's loop data wait and each loop
    row's time over the step's."""
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


def _add_scaling_ratios(rows: list[dict]) -> None:
    """Time and work (pixels x batch) of each scaling point relative to the model's smallest."""
    for row in rows:
        ref = min((r for r in rows if r["model"] == row["model"] and "error" not in r),
                  key=lambda r: (r["size"] * r["size"] * r["batch"]), default=None)
        if ref is not None and "error" not in row:
            row["time_vs_smallest"] = row["median_s"] / ref["median_s"]
            row["work_vs_smallest"] = (row["size"] ** 2 * row["batch"]) / (ref["size"] ** 2 * ref["batch"])


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
    """The project's targets (bench.plan.TARGETS), each with what was measured and whether it is met."""
    cores = cores or usable_cores()
    return (_speedup_targets(results["step"], cores) + _straightforward_targets(results["step"], cores)
            + _compile_targets(results["step"], cores) + _data_wait_targets(results["loop"], cores)
            + _ddp_targets(results["ddp"], cores))


def _speedup_targets(step_rows: list[dict], cores: int) -> list[dict]:
    targets = []
    for model, goal in TARGETS["speedup"].items():
        best = best_config(step_rows, model)
        row = find_row(step_rows, model=model, config=best)
        if row is None or "speedup_vs_fp32" not in row:
            continue
        base = find_row(step_rows, model=model, config=BASELINE)
        targets.append({"target": f"{model}: best fast configuration >= {goal:.1f}x plain fp32 eager",
                        "measured": f"{row['speedup_vs_fp32']:.2f}x ({best}, {row['size']}px)",
                        "value": row["speedup_vs_fp32"], "goal": goal, "met": row["speedup_vs_fp32"] >= goal,
                        "caveat": noise_caveat([row, base], cores)})
    return targets


def _straightforward_targets(step_rows: list[dict], cores: int) -> list[dict]:
    return _time_ratio_targets(step_rows, cores, STRAIGHTFORWARD, TARGETS["not_slower_than_straightforward"],
                               "plain fp32 eager not slower than the straightforward step", numerator=BASELINE)


def _compile_targets(step_rows: list[dict], cores: int) -> list[dict]:
    """--compile against plain fp32 on this machine. Where it is slower, a training run's compile
    probe (models/training/compile_probe.py) measures the same and goes on uncompiled."""
    return _time_ratio_targets(step_rows, cores, BASELINE, TARGETS["compile_not_slower"],
                               "--compile not slower than plain fp32 eager", numerator="compile",
                               note="; where it is, train.py's probe goes on uncompiled")


def _time_ratio_targets(step_rows: list[dict], cores: int, denominator: str, goal: float, claim: str,
                        numerator: str, note: str = "") -> list[dict]:
    """Per model: the step time of config `numerator` over that of `denominator`, met when <= `goal`."""
    targets = []
    for model in TARGETS["speedup"]:
        top = find_row(step_rows, model=model, config=numerator)
        bottom = find_row(step_rows, model=model, config=denominator)
        if top is None or bottom is None or "median_s" not in top or "median_s" not in bottom:
            continue
        ratio = top["median_s"] / bottom["median_s"]
        targets.append({"target": f"{model}: {claim} (time ratio <= {goal}{note})",
                        "measured": f"{ratio:.3f} ({top['median_s']:.3f} s vs {bottom['median_s']:.3f} s, "
                                    f"{top['size']}px)",
                        "value": ratio, "goal": goal, "met": ratio <= goal,
                        "caveat": noise_caveat([top, bottom], cores)})
    return targets


def _data_wait_targets(loop_rows: list[dict], cores: int) -> list[dict]:
    goal = TARGETS["data_wait_fraction"]
    return [{"target": f"{row['model']} {row['config']}: data wait < {goal:.0%} of loop time "
                       f"(default --num_threads, demo data)",
             "measured": f"{row['data_wait_fraction']:.2%} ({row['size']}px, {row['loader_workers']} workers)",
             "value": row["data_wait_fraction"], "goal": goal, "met": row["data_wait_fraction"] < goal,
             "caveat": noise_caveat([row], cores)}
            for row in loop_rows if "error" not in row]


def _ddp_targets(ddp_rows: list[dict], cores: int) -> list[dict]:
    goal = TARGETS["ddp_efficiency"]
    return [{"target": f"{row['model']}: DDP weak-scaling efficiency >= {goal} at 2 ranks (CPU, gloo)",
             "measured": f"{row['efficiency']:.2f} ({row['size']}px)",
             "value": row["efficiency"], "goal": goal, "met": row["efficiency"] >= goal,
             "caveat": noise_caveat([row["one_rank"], row["two_ranks"]], cores)}
            for row in ddp_rows if "efficiency" in row]
