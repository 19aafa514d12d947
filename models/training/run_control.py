"""Owning a run folder, and stopping cleanly when asked to.

`RunLock`: one training run per `checkpoints_dir/name`. The main process holds an exclusive
lock on `<run>/.run.lock` for the whole run; a second run on the same folder is refused with a
message naming the holder. The operating system drops the lock when the holder dies, however it
dies, so a crashed or killed run never blocks the next one.

`StopRequest`: SIGTERM (cluster pre-emption, `kill`) and SIGINT (Ctrl-C) only set a flag; the
training loop checks it after each step, saves a `latest` checkpoint and exits.
"""
from __future__ import annotations

import fcntl
import os
import signal
import socket
import time

from util.errors import UserError


class RunLock:
    """The exclusive lock on `<run_dir>/.run.lock` (see the module docstring)."""

    def __init__(self, run_dir: str) -> None:
        self.path = os.path.join(run_dir, ".run.lock")
        self.file = None

    def acquire(self) -> "RunLock":
        """Take the lock and write who holds it into the file; UserError if another process holds
        it or the folder cannot be written."""
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            handle = open(self.path, "a+")
        except OSError as err:
            raise UserError(f"cannot write to the run folder {os.path.dirname(self.path)} ({err.strerror}); choose "
                            f"another --checkpoints_dir (or --name).") from None
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise UserError(f"another training run is using {os.path.dirname(self.path)} ({holder}); two runs "
                            f"writing the same checkpoints would corrupt each other. Wait for it to finish, stop "
                            f"it, or choose another --name or --checkpoints_dir.") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} on {socket.gethostname()}, started {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        handle.flush()
        self.file = handle
        return self

    def release(self) -> None:
        """Give the lock back (also dropped by the operating system when the process dies)."""
        if self.file is not None:
            fcntl.flock(self.file.fileno(), fcntl.LOCK_UN)
            self.file.close()
            self.file = None


class StopRequest:
    """Remembers the first SIGTERM/SIGINT instead of dying mid-step; a second SIGINT exits at once."""

    def __init__(self) -> None:
        self.signal_number: int | None = None
        self.previous = {}

    def install(self) -> "StopRequest":
        """Catch SIGTERM and SIGINT from now on (until `uninstall`)."""
        for signum in (signal.SIGTERM, signal.SIGINT):
            self.previous[signum] = signal.signal(signum, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.signal_number == signal.SIGINT and signum == signal.SIGINT:
            raise KeyboardInterrupt  # Ctrl-C twice: the user does not want to wait for the save
        self.signal_number = signum
        # user-facing: the run's console says why it is about to stop
        print(f"\nreceived {signal.Signals(signum).name}: saving a checkpoint after this step, then stopping",
              flush=True)

    @property
    def requested(self) -> bool:
        """Whether this process has been sent SIGTERM or SIGINT."""
        return self.signal_number is not None

    @property
    def exit_code(self) -> int:
        """The status a process killed by the signal would have had: 128 + its number."""
        return 128 + (self.signal_number or 0)

    def uninstall(self) -> None:
        """Put back the handlers that were there before `install`."""
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        self.previous = {}
