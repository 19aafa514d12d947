"""The markdown report of a run: one table per section, in the order docs/benchmarks.md shows."""
from __future__ import annotations

from typing import Callable

from bench.plan import DEFAULT_NETG, MODELS, STEP_ONLY_MODELS, config_spec


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
    """The whole report: machine, then each measured section, then the targets."""
    results = report["results"]
    lines = _header(report["meta"])
    lines += _peaks_section(results.get("peaks"))
    lines += _step_section(results["step"])
    lines += _loop_section(results["loop"])
    lines += _scaling_section(results["scaling"])
    lines += _ddp_section(results["ddp"])
    lines += _checkpointing_section(results.get("checkpointing", []))
    lines += _volumes_section(results.get("volumes", []))
    if report["targets"]:
        lines += ["### Targets", ""]
        lines += _table(["target", "measured", "met", "caveat"],
                        [[t["target"], t["measured"], "yes" if t["met"] else "**no**", t.get("caveat") or "—"]
                         for t in report["targets"]])
        lines += [""]
    return "\n".join(lines)


def _header(meta: dict) -> list[str]:
    m = meta["machine"]
    bf16_hw = ", ".join(name for name, present in m.get("cpu_bf16_instructions", {}).items() if present)
    return [f"## Benchmark ({meta['mode']} run, {meta['date']})", "",
            f"`{meta['command']}`", "",
            f"Machine: {m['cpu_model']}, {m['cores_usable']} usable cores, torch {m['torch']} "
            f"(CPU capability {m['torch_cpu_capability']}), Python {m['python']}, device {m['device']}, "
            f"compute threads per process: {meta.get('threads', 'default')}"
            + (f" ({m['gpu']})" if m.get("gpu") else "") + f"; compiler: {m['compiler'] or 'none'}"
            + (f"; CPU bf16 instructions: {bf16_hw or 'none (oneDNN emulates bf16)'}" if m["device"] == "cpu" else "")
            + ". "
            f"Load average (1/5/15 min) at start {meta['load_avg_start']}, at end {meta['load_avg_end']}; "
            f"run took {meta['runtime_s'] / 60:.1f} min.", ""]


def _peaks_section(peaks: dict | None) -> list[str]:
    if not peaks:
        return []
    if "error" in peaks:
        return [f"Device peaks: FAILED ({peaks['error'][:300]})", ""]
    conv, mm = peaks["conv"], peaks["matmul"]
    lines = [f"### Device peaks (forward only; conv 3x3 {conv['channels']}->{conv['channels']} at "
             f"{conv['size']}x{conv['size']}, batch {conv['batch']}; matmul {mm['size']}^2; best of "
             f"contiguous and channels-last)", ""]
    rows = [[dtype, _g(peaks[f"conv_{dtype}_flops_per_s"]), _g(peaks[f"matmul_{dtype}_flops_per_s"])]
            for dtype in ("fp32", "bf16", "fp16") if f"conv_{dtype}_flops_per_s" in peaks]
    lines += _table(["dtype", "conv GFLOP/s", "matmul GFLOP/s"], rows) + [""]
    lines += [f"FlopCounterMode counts {conv['flops_counted'] / 1e9:.2f} GFLOP for this conv; the textbook "
              f"2·N·Cin·Cout·k²·H·W gives {conv['flops'] / 1e9:.2f}.", ""]
    return lines


def _step_row(r: dict) -> list[str]:
    if "error" in r:
        return [r["config"], f"FAILED: {r['error'][:120]}"] + [""] * 13
    passes = " / ".join(f"{m:.3f}" for m in r.get("pass_medians_s", [r["median_s"]]))
    return [r["config"], f"{r['median_s']:.3f}", _iqr(r), passes, f"{r['steps']}", f"{r['images_per_s']:.3f}",
            _num(r.get("speedup_vs_fp32"), "{:.2f}x"), f"{r['peak_mem_mb']:.0f}",
            _g(r.get("flops_per_step")), _g(r.get("achieved_flops_per_s")),
            _num(r.get("utilisation_of_conv_peak"), "{:.0%}") + f" ({r.get('peak_dtype', '?')})",
            _num(r.get("data_wait_fraction"), "{:.1%}"), _num(r.get("ops_per_step"), "{:d}"), _compile_cell(r),
            _load_cell(r)]


def _step_section(step_rows: list[dict]) -> list[str]:
    lines = []
    for model in (*MODELS, *STEP_ONLY_MODELS):
        rows_in = [r for r in step_rows if r["model"] == model]
        if not rows_in:
            continue
        size, batch = rows_in[0]["size"], rows_in[0]["batch"]
        lines += [f"### Training step: {model} ({DEFAULT_NETG[model]}), {size}x{size}, batch {batch}, synthetic "
                  f"tensors", ""]
        lines += _table(["config", "median s/step", "IQR s", "pass medians", "steps", "img/s", "vs fp32", "peak MiB",
                         "GFLOP/step", "GFLOP/s", "of conv peak", "data wait", "aten ops/step", "compile s", "load"],
                        [_step_row(r) for r in rows_in]) + [""]
        lines += _flops_by_network(rows_in)
    if step_rows:
        lines += ["vs fp32: plain fp32 eager median / this median (same run). of conv peak: achieved FLOP/s over "
                  "the measured conv peak of the dtype in brackets. compile s: warm-up time beyond steady steps "
                  "with an empty inductor cache (cold) and, in a second pass, with the cache the first filled. "
                  "load: 1-minute load average when each measurement started; above the number of cores, other "
                  "processes competed for them and the times are inflated. aten ops/step: the operators one step "
                  "dispatches (forward, backward, optimizers), each a kernel launch or more on a GPU: at small "
                  "batches the launches, not the FLOPs, set a GPU step's time.", ""]
    return lines


def _flops_by_network(rows: list[dict]) -> list[str]:
    """GFLOP of each network's forward and backward passes in one step (the first row that has them)."""
    counted = next((r for r in rows if r.get("flops_by_network")), None)
    if counted is None:
        return []
    table = [[net, _g(phases.get("forward", 0)), _g(phases.get("backward", 0)),
              _g(phases.get("forward", 0) + phases.get("backward", 0))]
             for net, phases in counted["flops_by_network"].items()]
    return ["FLOPs per network in one step (FlopCounterMode, attributed by the weights each conv uses):", ""] \
        + _table(["network", "forward GFLOP", "backward GFLOP", "total GFLOP"], table) + [""]


def _loop_section(loop_rows: list[dict]) -> list[str]:
    if not loop_rows:
        return []
    rows = []
    for r in loop_rows:
        if "error" in r:
            rows.append([r["model"], r["config"], f"FAILED: {r['error'][:120]}"] + [""] * 10)
            continue
        rows.append([r["model"], r["config"], f"{r['size']}", f"{r['median_s']:.3f}", _iqr(r), f"{r['steps']}",
                     f"{r['images_per_s']:.3f}", _num(r.get("speedup_vs_fp32"), "{:.2f}x"),
                     f"{r['data_wait_fraction']:.2%}", _num(r.get("loop_over_step"), "{:.2f}"),
                     f"{r['loader_workers']} (--num_threads {r['num_threads']})", f"{r['peak_mem_mb']:.0f}",
                     _load_cell(r)])
    return (["### Training loop with real data (train.py's loop, default --num_threads)", ""]
            + _table(["model", "config", "px", "median s/step", "IQR s", "steps", "img/s", "vs fp32",
                      "data wait", "loop / step", "loader workers", "peak MiB", "load"], rows)
            + ["", "data wait: time blocked on the next batch / loop time. loop / step: loop median over "
                   "the synthetic step median (cost of loading in the same cores).", ""])


def _scaling_section(scaling_rows: list[dict]) -> list[str]:
    if not scaling_rows:
        return []
    rows = []
    for r in scaling_rows:
        if "error" in r:
            rows.append([r["model"], f"{r['size']}", f"{r['batch']}", f"FAILED: {r['error'][:120]}"] + [""] * 7)
            continue
        rows.append([r["model"], f"{r['size']}", f"{r['batch']}", f"{r['median_s']:.3f}", _iqr(r),
                     f"{r['images_per_s']:.3f}", _g(r.get("flops_per_step")), _g(r.get("achieved_flops_per_s")),
                     f"{r['peak_mem_mb']:.0f}",
                     f"{r['time_vs_smallest']:.2f} / {r['work_vs_smallest']:.0f}" if "time_vs_smallest" in r else "—",
                     _load_cell(r)])
    lines = ["### Scaling of the plain fp32 step with image size and batch", ""]
    lines += _table(["model", "px", "batch", "median s/step", "IQR s", "img/s", "GFLOP/step", "GFLOP/s",
                     "peak MiB", "time / pixels vs smallest", "load"], rows)
    if any(r["model"] == "pix2pix" for r in scaling_rows):
        lines += ["", "pix2pix has no 128px point: its default unet_256 generator takes multiples of 256 only."]
    return lines + [""]


def _ddp_section(ddp_rows: list[dict]) -> list[str]:
    if not ddp_rows:
        return []
    rows = []
    for r in ddp_rows:
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
    return (["### DDP weak scaling on the CPU (gloo, batch 1 and 1 thread per process, synthetic tensors)", ""]
            + _table(["model", "px", "flags", "1 process s/step (IQR)", "2 processes s/step (IQR)",
                      "img/s, 1 process", "img/s, 2 processes", "efficiency", "load"], rows)
            + ["", "efficiency = img/s with 2 processes / (2 x img/s with 1 process); a step of 2 processes "
                   "takes as long as its slower rank.", ""])


def _volumes_section(rows: list[dict]) -> list[str]:
    """FLOPs, time and peak memory of the volume models' plain step per patch size, without and with
    --checkpoint_activations."""
    if not rows:
        return []
    cells = _checkpointing_cells(rows, lambda r: f"{r['size']}^3", lambda r: [
        f"{r['flops_batch1'] / 1e9:.1f}" if "flops_batch1" in r else "—", f"{r['median_s']:.3f}"])
    return (["### Volumes (plain fp32 step, batch 1, one patch)", ""]
            + _table(["model", "patch", "setting", "GFLOP/step", "median s/step", "peak MiB", "load"], cells)
            + ["", "peak MiB: the process's peak RSS on the CPU (torch.cuda.max_memory_allocated on a GPU), model and "
                   "optimizer states included; GFLOP counted once, on the plain step.", ""])


def _checkpointing_section(rows: list[dict]) -> list[str]:
    """Time and peak memory of the plain step without and with --checkpoint_activations."""
    if not rows:
        return []
    cells = _checkpointing_cells(rows, lambda r: f"{r['size']}", lambda r: [f"{r['median_s']:.3f}", _iqr(r)])
    return (["### Activation checkpointing (plain fp32 step, batch 1)", ""]
            + _table(["model", "px", "setting", "median s/step", "IQR s", "peak MiB", "load"], cells)
            + ["", "peak MiB: the process's peak RSS on the CPU (torch.cuda.max_memory_allocated on a GPU), "
                   "model and optimizer states included.", ""])


def _checkpointing_cells(rows: list[dict], size: Callable[[dict], str],
                         measured: Callable[[dict], list[str]]) -> list[list[str]]:
    """Table rows of without/with --checkpoint_activations measurements: model, `size`, the setting,
    the `measured` cells, peak MiB and load (a failed measurement says so in one cell)."""
    cells = []
    for r in rows:
        setting = "--checkpoint_activations" if r["checkpoint_activations"] else "plain"
        if "error" in r:
            cells.append([r["model"], size(r), setting, f"FAILED: {r['error'][:120]}", "", "", ""])
            continue
        cells.append([r["model"], size(r), setting, *measured(r), f"{r['peak_mem_mb']:.0f}", _load_cell(r)])
    return cells
