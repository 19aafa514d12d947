"""Console output that only the main process prints, so that callers need no rank checks.

Under torchrun every process runs the same code; messages about the run as a whole (options,
progress, warnings about the dataset) should appear once. `print0` and `warn0` print on rank 0
(and in a single process) and do nothing elsewhere. A message about one rank's own trouble
should use plain `print` with the rank in it.
"""
from __future__ import annotations

import sys

from util import distributed


def print0(*values: object, sep: str = " ", end: str = "\n") -> None:
    """`print` to stdout on the main process only (flushed, so logs interleave in order)."""
    if distributed.is_main_process():
        print(*values, sep=sep, end=end, flush=True)


def warn0(message: str) -> None:
    """`warning: <message>` to stderr on the main process only."""
    if distributed.is_main_process():
        print(f"warning: {message}", file=sys.stderr, flush=True)
