"""The record of validations in the run folder: `val_log.txt` for people, `metrics.jsonl` for
programs, and `metrics_plot.png` beside `loss_plot.png` (written by the main process).

    (epoch: 3, iters: 1200, time: 2.1 s, 3% of the epoch) L1: 0.0523 PSNR: 25.4400 SSIM: 0.8100
    {"epoch": 3, "iteration": 1200, "seconds": 2.1, "epoch_seconds": 70.3, "images": 50, "metrics": {...}}

A run continued after a crash repeats the epochs it redoes; the plot keeps the last row of each epoch.
"""
from __future__ import annotations

import json
import logging
import math
import os
import time

from util.display.loss_log import draw_panels
from util.safe_files import append_line, read_json_lines

logger = logging.getLogger(__name__)

VAL_LOG = "val_log.txt"
METRICS_JSONL = "metrics.jsonl"
METRICS_PLOT = "metrics_plot.png"


class ValidationLog:
    def __init__(self, run_dir: str) -> None:
        self.run_dir = run_dir
        self.started = False

    def append(self, epoch: int, iteration: int, scores: dict[str, float], seconds: float, epoch_seconds: float,
               images: int) -> str:
        """Add one validation to both logs; returns the console line."""
        share = f", {100 * seconds / epoch_seconds:.0f}% of the epoch" if epoch_seconds > 0 else ""
        values = " ".join(f"{k}: {v:.4f}" for k, v in scores.items()) or "no metrics (see the warnings above)"
        line = f"(epoch: {epoch}, iters: {iteration}, time: {seconds:.1f} s{share}) {values}"
        os.makedirs(self.run_dir, exist_ok=True)
        if not self.started:
            append_line(os.path.join(self.run_dir, VAL_LOG),
                        f"================ Validation ({time.strftime('%c')}) ================")
            self.started = True
        append_line(os.path.join(self.run_dir, VAL_LOG), line)
        record = {"epoch": epoch, "iteration": iteration, "seconds": round(seconds, 3),
                  "epoch_seconds": round(epoch_seconds, 3), "images": images,
                  "metrics": {k: (v if math.isfinite(v) else str(v)) for k, v in scores.items()}}
        append_line(os.path.join(self.run_dir, METRICS_JSONL), json.dumps(record))
        return f"validation {line}"


def read_metrics(run_dir: str) -> dict[int, dict]:
    """The rows of metrics.jsonl by epoch (the last row of each epoch). Lines that are no record (the
    last one cut short by a kill, or damage) are skipped with a warning naming them."""
    path = os.path.join(run_dir, METRICS_JSONL)
    if not os.path.exists(path):
        return {}
    records, damaged = read_json_lines(path)
    if damaged:
        logger.warning(f"{path}: skipping line(s) {', '.join(map(str, damaged))}, which hold no validation record "
                       f"(cut short by a killed run, or damaged)")
    return {int(record["epoch"]): record for record in records if isinstance(record.get("epoch"), int)}


def metric_series(run_dir: str) -> tuple[list[int], dict[str, list[float]]]:
    """The validated epochs in order, and each metric's value at them (NaN where a validation lacked
    it; the `_std` companions of KID left out): what the metrics plots draw."""
    rows = read_metrics(run_dir)
    epochs = sorted(rows)
    names = dict.fromkeys(k for e in epochs for k in rows[e].get("metrics", {}) if not k.endswith("_std"))
    return epochs, {name: [float(rows[e].get("metrics", {}).get(name, math.nan)) for e in epochs] for name in names}


def plot_metrics(run_dir: str, title: str) -> str | None:
    """metrics_plot.png from metrics.jsonl: one plot per metric over the epochs; None without metrics."""
    epochs, values = metric_series(run_dir)
    if not values:
        return None
    out = os.path.join(run_dir, METRICS_PLOT)
    draw_panels([float(e) for e in epochs], values, out, f"{title}: validation")
    return out
