"""What the user sees: the run's own output on stdout, and log records (notes, warnings, errors) on stderr.

Two kinds of message, kept apart as a shell keeps stdout and stderr apart:

- the program's output (the options table, progress, "resuming from ...", the results page): `print0`
  prints it to stdout on the main process only;
- everything else goes through `logging`: each module has its own `logger = logging.getLogger(__name__)`
  and calls `logger.info` (shown as "note: ..."), `logger.warning` ("warning: ...") or `logger.error`.

Nothing is configured when a module is imported: each entry point (train.py, test.py, the scripts) calls
`setup_logging()` once, first thing, and tests/conftest.py does the same for the test process, so that a
library call there says what it would say in a program (pytest captures it: the test run stays quiet).

Under torchrun every process runs the same code, and a message about the run as a whole (a flag that
does nothing, a dataset's floating-point images) should appear once: on ranks other than 0 only errors
are shown, and records that concern that rank alone (`logger.warning(..., extra=THIS_RANK)`, e.g. an
image only it failed to read), each with "[rank N] " in front.
"""
from __future__ import annotations

import logging
import sys
from typing import TextIO

from util import distributed

# `extra=` of a record about this process's own trouble: shown on every rank, not on rank 0 only.
THIS_RANK = {"this_rank": True}

# The packages whose notes (INFO) are shown; other libraries' records propagate too, from WARNING up.
PROJECT_LOGGERS = ("data", "models", "options", "util", "scripts", "__main__")

_PREFIXES = {logging.DEBUG: "debug", logging.INFO: "note", logging.WARNING: "warning", logging.ERROR: "error",
             logging.CRITICAL: "error"}


def print0(*values: object, sep: str = " ", end: str = "\n") -> None:
    """`print` to stdout on the main process only (flushed, so logs interleave in order): the program's output."""
    if distributed.is_main_process():
        print(*values, sep=sep, end=end, flush=True)  # user-facing: the run's own output


class _CurrentStderr(logging.StreamHandler):
    """A handler writing to `sys.stderr` as it is when a record comes, not as it was when the handler was
    made: contextlib.redirect_stderr and pytest's capture then see the records as they see print()."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        pass  # StreamHandler.__init__ and setStream set it: it stays the current sys.stderr


class _ConsoleFormatter(logging.Formatter):
    """`<level>: <message>` ("note: ...", "warning: ...", "error: ..."), after "[rank N] " on ranks other
    than 0, with the traceback of `logger.exception` below."""

    def format(self, record: logging.LogRecord) -> str:
        text = f"{_PREFIXES.get(record.levelno, record.levelname.lower())}: {super().format(record)}"
        rank = distributed.current_context().rank
        return f"[rank {rank}] {text}" if rank != 0 else text


def _shown_on_this_rank(record: logging.LogRecord) -> bool:
    """Rank 0 (and a single process) shows every record; other ranks their errors and their own trouble."""
    return (record.levelno >= logging.ERROR or getattr(record, "this_rank", False)
            or distributed.is_main_process())


def setup_logging(level: int = logging.INFO) -> None:
    """Show log records on stderr (see the module docstring): the project's from `level` up, other
    libraries' from WARNING up. Called by each entry point; a second call changes nothing."""
    root = logging.getLogger()
    if any(isinstance(handler, _CurrentStderr) for handler in root.handlers):
        return
    handler = _CurrentStderr()
    handler.setFormatter(_ConsoleFormatter("%(message)s"))
    handler.addFilter(_shown_on_this_rank)
    root.addHandler(handler)
    for name in PROJECT_LOGGERS:
        logging.getLogger(name).setLevel(level)
