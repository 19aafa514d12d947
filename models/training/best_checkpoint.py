"""The best validation so far by one metric (`--save_best METRIC`), for the trained weights and for
the generators' moving averages (--ema_decay): the part of the Checkpointer
(models/training/checkpointer.py) that decides when `best_net_*.pth` / `best_ema_net_*.pth` are due.

`best.json` records, for each kind of weights, the epoch, the iteration and every metric of its
best validation. The tracker's state is part of the training state, so an exact resume ends with
the same best files as an uninterrupted run.
"""
from __future__ import annotations

import json
import os

from util.evaluation.metrics import higher_is_better
from util.safe_files import atomic_write_text

# The two kinds of weights a validation scores, by the keys the tracker's state has always been
# saved under in training-state files (so those files keep loading): the trained weights under ""
# and the generators' moving averages under "ema".
TRAINED_WEIGHTS, EMA_WEIGHTS = "", "ema"
BEST_FILE = "best.json"


def ema_key(key: str) -> str:
    """The key under which a validation reports metric `key` of the averaged generators."""
    return f"ema_{key}"


class BestTracker:
    """Remembers, for each kind of weights, the best value of `metric` and the validation it came from."""

    def __init__(self, metric: str) -> None:
        self.metric = metric
        self.higher_is_better = higher_is_better(metric)
        self.best: dict[str, dict] = {}  # kind -> {"epoch", "iteration", "value", "metrics"}

    def improved(self, kind: str, scores: dict[str, float], epoch: int, iteration: int) -> bool:
        """Record `scores` (one validation's metrics) for `kind` (TRAINED_WEIGHTS or EMA_WEIGHTS);
        True if they hold a new best."""
        key = self.metric if kind == TRAINED_WEIGHTS else ema_key(self.metric)
        if key not in scores:
            return False
        value = scores[key]
        old = self.best.get(kind)
        if old is not None and not (value > old["value"] if self.higher_is_better else value < old["value"]):
            return False
        self.best[kind] = {"epoch": epoch, "iteration": iteration, "value": value, "metrics": dict(scores)}
        return True

    def summary(self) -> dict:
        """What best.json holds."""
        summary = {"metric": self.metric, "higher_is_better": self.higher_is_better}
        for kind, label in ((TRAINED_WEIGHTS, "best"), (EMA_WEIGHTS, "best_ema")):
            if kind in self.best:
                summary[label] = self.best[kind]
        return summary

    def write(self, run_dir: str) -> None:
        """Write best.json into `run_dir` (main process only)."""
        text = json.dumps(self.summary(), indent=1, sort_keys=True) + "\n"
        atomic_write_text(os.path.join(run_dir, BEST_FILE), text)

    def state_dict(self) -> dict:
        return {"metric": self.metric, "best": self.best}

    def load_state_dict(self, state: dict) -> None:
        if state.get("metric") == self.metric:  # a run continued with another --save_best starts afresh
            self.best = state["best"]
