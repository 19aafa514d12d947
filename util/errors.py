"""User-facing errors.

A `UserError` is a problem with the user's input (a flag, a path, an image, a checkpoint)
that the user can fix. `train.py` and `test.py` print its message as one paragraph and exit
with status 2 instead of showing a traceback. Everything else is a bug and keeps its traceback.
"""

import functools
import gc
import sys
from typing import Callable, NoReturn

EXIT_USER_ERROR = 2


class UserError(Exception):
    """Bad input the user can fix; the message names the file or flag and the fix."""


def describe(error: UserError) -> str:
    """The one-paragraph text shown to the user for `error`."""
    text = str(error)
    if "Original Traceback" in text:
        # Raised in a DataLoader worker: PyTorch re-raises it with the worker's traceback
        # prepended; the user needs only the original message on the last line.
        last = [line for line in text.splitlines() if line.strip()][-1]
        text = last.split("UserError: ", 1)[-1]
    return "error: " + " ".join(text.split())


def print_to_stderr(message: str) -> None:
    print(message, file=sys.stderr)  # user-facing: the one-paragraph error the program exits with


def out_of_memory(error: BaseException) -> str | None:
    """What `error` says ran out, where it says that memory ran out (MemoryError; PyTorch's allocators: the CPU's
    "can't allocate memory", CUDA's OutOfMemoryError; also as a DataLoader worker re-raises them), else None."""
    if isinstance(error, MemoryError):
        return " ".join(str(error).split()) or "MemoryError"
    if not isinstance(error, RuntimeError):
        return None
    lines = [" ".join(line.split()) for line in str(error).splitlines() if line.strip()] or [""]
    if "Original Traceback" in str(error):  # a DataLoader worker's: the original error is the last line
        last = lines[-1]
        oom = last.startswith(("MemoryError", "torch.OutOfMemoryError")) or "can't allocate memory" in last
        return last if oom else None
    oom = type(error).__name__ == "OutOfMemoryError" or "can't allocate memory" in lines[0]
    return lines[0] if oom else None


def out_of_memory_paragraph(what: str, advice: str = "") -> str:
    """The one paragraph of memory running out: `what` ran out, and `advice`, the program's flags that size its
    memory (e.g. "lower --batch_size"; default: its sizes in general)."""
    return (f"error: out of memory ({what}): the sizes asked for need more memory than this machine has; "
            f"{advice or 'ask this program for less'} (docs/training_tips.md, \"Ranges of the flags that size "
            f"memory\").")


def exits_on_user_error(report: Callable[[str], None] = print_to_stderr, memory_advice: str = ""):
    """Decorator of an entry point's function that returns the exit status: a UserError raised in it
    ends it with its one-paragraph message (`describe`) given to `report` (default: printed on
    stderr; train.py and test.py pass the rank-aware one) and exit status 2, and so does memory
    running out (sizes the user asked for: `out_of_memory_paragraph` with `memory_advice`, which names
    the program's flags that size memory). Everything else keeps its traceback."""
    def decorate(function):
        @functools.wraps(function)
        def run(*args, **kwargs) -> int:
            try:
                return function(*args, **kwargs)
            except UserError as err:
                report(describe(err))
                return EXIT_USER_ERROR
            except (MemoryError, RuntimeError) as err:
                what = out_of_memory(err)
                if what is None:
                    raise
                report(out_of_memory_paragraph(what, memory_advice))
                return EXIT_USER_ERROR
        return run
    return decorate


def exit_with_status(status: int) -> NoReturn:
    """End an entry point whose work is done: `sys.exit(status)` without the interpreter's last
    full garbage collection. With torch and torch._dynamo imported (torch.optim imports it) that
    pass walks every object still alive, a cost (dev/benchmark_history.md) that every
    torchrun worker and every run of a script paid after its last line. Everything still closes
    as at any exit (atexit handlers, objects freed by reference counting); only unreachable
    cycles are left to the operating system, and every file we write is closed before this."""
    gc.freeze()
    sys.exit(status)
