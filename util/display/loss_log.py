"""Reading `loss_log.txt` and drawing its loss curves (`loss_plot.png`).

The log is a series of sections, one per `train.py` run in the folder (a resumed run appends a new
one), each opened by `================ Training Loss (<date>) ================` and holding lines

    (epoch: 3, iters: 200, time: 0.051, data: 0.002) G_GAN: 0.812 G_L1: 12.301 D_real: 0.402 D_fake: 0.377

where `iters` counts the images done in that epoch. The x axis of the plot is the fractional epoch
(epochs completed: 2.5 = halfway through epoch 3), using the dataset size that train.py writes into
the log ("The number of training images = N"), or, in logs without it, the largest `iters` seen.
A resumed run replaces the curve from where it starts: the points that an earlier run logged after
that place belong to weights that were thrown away.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field

from util.safe_files import atomic_write

SECTION_MARK = "================ Training Loss"
LOSS_LINE = re.compile(r"^\(epoch: (\d+), iters: (\d+), time: [^,]*, data: [^)]*\)\s?(.*)$")
LOSS_PAIR = re.compile(r"([^\s:]+): (\S+)")
DATASET_SIZE = re.compile(r"The number of training images = (\d+)")


@dataclass
class LossRecord:
    epoch: int
    iters: int
    losses: dict[str, float]


@dataclass
class LogSection:
    header: str = ""
    images_per_epoch: int | None = None
    records: list[LossRecord] = field(default_factory=list)


@dataclass
class LossCurves:
    names: list[str]
    x: list[float]                  # fractional epoch of each point
    values: dict[str, list[float]]  # per loss name, NaN where a line lacks that loss
    resumes: list[float]            # x where a later run took over


def to_float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def parse_loss_log(path: str) -> list[LogSection]:
    """The sections of a loss log; lines before the first section mark form a section of their own."""
    sections: list[LogSection] = []
    current = LogSection()
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith(SECTION_MARK):
                if current.records or current.header or current.images_per_epoch:
                    sections.append(current)
                current = LogSection(header=line.strip("= "))
                continue
            match = LOSS_LINE.match(line)
            if match:
                losses = {name: to_float(value) for name, value in LOSS_PAIR.findall(match.group(3))}
                current.records.append(LossRecord(int(match.group(1)), int(match.group(2)), losses))
                continue
            size = DATASET_SIZE.search(line)
            if size and current.images_per_epoch is None:
                current.images_per_epoch = int(size.group(1))
    if current.records or current.header or current.images_per_epoch:
        sections.append(current)
    return sections


def loss_curves(sections: list[LogSection]) -> LossCurves:
    """All sections as one curve per loss over the fractional epoch, later runs replacing earlier points."""
    known = [s.images_per_epoch for s in sections if s.images_per_epoch]
    largest_iters = max((r.iters for s in sections for r in s.records), default=1)
    points: list[tuple[float, dict[str, float]]] = []
    resumes: list[float] = []
    names: list[str] = []
    for section in sections:
        if not section.records:
            continue
        per_epoch = section.images_per_epoch or (known[-1] if known else largest_iters) or 1
        xs = [r.epoch - 1 + min(r.iters / per_epoch, 1.0) for r in section.records]
        start = xs[0]
        if points and points[0][0] < start:
            resumes.append(start)
        points = [p for p in points if p[0] < start]
        points += [(x, r.losses) for x, r in zip(xs, section.records)]
        for r in section.records:
            names += [n for n in r.losses if n not in names]
    return LossCurves(names=names, x=[x for x, _ in points],
                      values={n: [losses.get(n, math.nan) for _, losses in points] for n in names},
                      resumes=resumes)


def smooth(values: list[float], window: int) -> list[float]:
    """Centred moving average that skips NaNs."""
    half = window // 2
    out = []
    for i in range(len(values)):
        chunk = [v for v in values[max(0, i - half):i + half + 1] if v == v]
        out.append(sum(chunk) / len(chunk) if chunk else math.nan)
    return out


def plot_loss_log(log_path: str, out_path: str, title: str | None = None) -> str | None:
    """Draw the losses of `log_path` into `out_path` (PNG); returns it, or None if the log has no losses."""
    curves = loss_curves(parse_loss_log(log_path))
    if not curves.x:
        return None
    suffix = f" (resumed {len(curves.resumes)}x: dotted lines)" if curves.resumes else ""
    title = (title or os.path.basename(os.path.dirname(os.path.abspath(log_path))) or "losses") + suffix
    window = max(3, len(curves.x) // 25) if len(curves.x) >= 30 else 0
    draw_panels(curves.x, curves.values, out_path, title, marks=curves.resumes, smooth_window=window)
    return out_path


def draw_panels(x: list[float], values: dict[str, list[float]], out_path: str, title: str,
                marks: list[float] = (), smooth_window: int = 0) -> None:
    """One small plot per series in `values` (over the shared epoch axis `x`) in a PNG at `out_path`;
    `marks` are drawn as dotted vertical lines, `smooth_window` > 0 adds a moving average."""
    # A bare Figure draws with Agg and needs no display; pyplot (its backends and global state)
    # would double the time this takes at the end of every run.
    from matplotlib.figure import Figure

    names = list(values)
    ncols = 1 if len(names) == 1 else 2
    nrows = -(-len(names) // ncols)
    width, height = 5.0 * ncols, 2.3 * nrows + 0.6  # inches
    fig = Figure(figsize=(width, height))
    axes = fig.subplots(nrows, ncols, sharex=True, squeeze=False)
    for ax, name in zip(axes.flat, names):
        series = values[name]
        if smooth_window:
            ax.plot(x, series, color="tab:blue", alpha=0.3, linewidth=0.8)
            ax.plot(x, smooth(series, smooth_window), color="tab:blue", linewidth=1.5)
        else:
            ax.plot(x, series, color="tab:blue", linewidth=1.2, marker="." if len(x) < 60 else None)
        for mark in marks:
            ax.axvline(mark, color="gray", linestyle=":", linewidth=1)
        ax.set_title(name, fontsize=10, y=1.0)  # placed, not measured against the ticks: no ticks on top
        ax.grid(True, alpha=0.3)
    for ax in axes.flat[len(names):]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("epoch")
    labelled_above = nrows > 1 and len(names) % ncols != 0
    if labelled_above:  # the last column's bottom plot is hidden: label the one above
        axes[-2][-1].xaxis.set_tick_params(labelbottom=True)
        axes[-2][-1].set_xlabel("epoch")
    fig.suptitle(title, fontsize=11)
    # Margins in inches rather than tight_layout, which draws the figure once more to measure its labels (half
    # the time of a plot drawn after every run and validation): room for the suptitle, each plot's title, tick
    # labels of up to ~7 characters and "epoch" (under a plot above a hidden one too).
    left, right, bottom, top = 0.75, 0.2, 0.55, 0.6  # inches
    column_gap, row_gap = 0.95, 0.85 if labelled_above else 0.4  # inches
    plot_width = (width - left - right - (ncols - 1) * column_gap) / ncols
    plot_height = (height - bottom - top - (nrows - 1) * row_gap) / nrows
    fig.subplots_adjust(left=left / width, right=1 - right / width, bottom=bottom / height, top=1 - top / height,
                        wspace=column_gap / plot_width, hspace=row_gap / plot_height)  # gaps: shares of a plot
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    atomic_write(out_path, lambda f: fig.savefig(f, dpi=90, format="png"))  # a viewer never sees half a plot
