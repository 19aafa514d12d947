"""Summary statistics of step times, shared by the worker (one measurement) and the
orchestrator (passes pooled). No torch here: the orchestrator does not need it."""
from __future__ import annotations

import statistics


def summarize(times: list[float]) -> dict[str, float]:
    """Median, quartiles (inclusive method), min and max of per-step seconds, and their count."""
    if not times:
        raise ValueError("no timed steps")
    ordered = sorted(times)
    if len(ordered) >= 2:
        q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    else:
        q1 = q3 = ordered[0]
    return {"median_s": statistics.median(ordered), "q1_s": q1, "q3_s": q3,
            "min_s": ordered[0], "max_s": ordered[-1], "steps": len(ordered)}
