"""The suite's processes, chosen by what a test must prove, started with public APIs only.

- `run_ranks`: the N processes of a distributed run, for the tests that compare N processes with
  one (the launcher is no part of what they show). `torch.multiprocessing.start_processes` starts
  them from multiprocessing's forkserver; each runs the script as `__main__` with the variables
  torchrun gives its workers (or others given as `launch`), its output in files of its own. A
  failing rank ends the others (start_processes' join); past the timeout all are killed.
- `ScriptProcess` / `run_script_process`: `python script.py args` in a process of its own, for the
  tests that need one (a signal, SIGKILL, a second run on the same folder), forked from the same
  forkserver in the same way.
- A new interpreter (subprocess.Popen) for everything else: `python -m torch.distributed.run ...`
  (conftest.torchrun: torchrun itself, a failing or killed worker, --max-restarts, two nodes), other
  programs, and `new_interpreter=True` where the interpreter is the point.

The forkserver imports torch, torchvision and torch._dynamo once per test process
(`set_forkserver_preload`), ~3 CPU-s that each forked process does not spend. A forked process is
given what a new interpreter would be given: the command line (`sys.argv`, the script run as
`__main__`), `sys.path` (the script's folder, then PYTHONPATH, then what a new interpreter has),
folder, environment, a session of its own, compute threads (OMP_NUM_THREADS, via
torch.set_num_threads) and fresh seeds for torch's and numpy's global generators (Python's `random`
reseeds itself after a fork). It ends as multiprocessing ends a process: threads that are not
daemons are waited for, output flushed, the status of SystemExit (1 and the traceback for an
uncaught exception); atexit handlers do not run (multiprocessing leaves with os._exit), so a test
about what happens at exit asks for `new_interpreter=True`.

What the server's imports read from the environment (torch._dynamo's config alone reads dozens of
variables) cannot be redone in a fork. So the forked process compares the environment it is asked
for with the server's: if any variable differs other than those it redoes or that nothing imported
reads at import (REDONE_OR_READ_LATER), or a PYTHONPATH entry would hide a module the server
imported, it replaces itself (os.execve, same pid, output and session) with a new interpreter
running the same command, so that such a variable is never silently ignored.
"""
from __future__ import annotations

import atexit
import functools
import importlib
import json
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import weakref
from pathlib import Path

import torch.multiprocessing

PRELOADED = ["torch", "torchvision", "torch._dynamo"]
_forkserver = torch.multiprocessing.get_context("forkserver")
_forkserver.set_forkserver_preload(PRELOADED)
# The test process imports them too, before any test copies os.environ: what these imports put into the
# environment (torch._dynamo: TORCHINDUCTOR_CACHE_DIR, its default) is then in the server's and in the
# environments the tests pass on alike.
for module in PRELOADED:
    importlib.import_module(module)

# Variables that may differ between the server's environment and a forked process's without a new
# interpreter: redone in the fork (OMP_NUM_THREADS, PYTHONPATH); set by pytest per test; the terminal's
# size, which GNU readline puts into the test process's environment (C's, not os.environ) when pdb
# loads it, read only when a terminal's size is asked for; the launch variables util/distributed.py
# reads when the process group starts. Nothing the server imports reads any of them at import.
REDONE_OR_READ_LATER = {"OMP_NUM_THREADS", "PYTHONPATH", "PYTEST_CURRENT_TEST", "COLUMNS", "LINES", "RANK",
                        "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                        "TORCHELASTIC_RESTART_COUNT"}
READ_LATER_PREFIXES = ("SLURM_", "IMG2IMG_")  # srun's launch variables; the product's own, read when used


@functools.cache
def _interpreter_path() -> tuple[str, ...]:
    """`sys.path` of a new interpreter without PYTHONPATH, after its first entry (the script's folder):
    the standard library and site-packages, read once from such an interpreter."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    listed = subprocess.run([sys.executable, "-c", "import json, sys; print(json.dumps(sys.path[1:]))"],
                            env=env, capture_output=True, text=True, check=True).stdout
    return tuple(json.loads(listed))


def is_python_script(command: list[str]) -> bool:
    """Whether `command` is `python script.py ...` with this interpreter (what can be forked)."""
    return len(command) >= 2 and command[0] == sys.executable and command[1].endswith(".py")


def _needs_a_new_interpreter(env: dict[str, str]) -> str | None:
    """In a forked process, before anything else: why `env` cannot be given to it in a fork (a
    variable that differs from the server's environment and may have been read by what the server
    imported, or a PYTHONPATH entry that hides a module the server imported), or None."""
    # A value is the server's if the server was started with it (its parent, whose environment at
    # exec /proc keeps), or if the server's imports set it: torch._dynamo sets TORCHINDUCTOR_CACHE_DIR
    # to the default it would have found without it.
    started, now = _environment_at_exec(os.getppid()), os.environ
    differing = sorted(name for name in set(env) | set(started) | set(now)
                       if env.get(name) not in (started.get(name), now.get(name))
                       and name not in REDONE_OR_READ_LATER and not name.startswith(READ_LATER_PREFIXES))
    if differing:
        return f"environment differs from the forkserver's in {', '.join(differing)}"
    for entry in _pythonpath(env):
        try:
            names = os.listdir(entry)
        except OSError:
            continue
        for name in names:
            where = getattr(sys.modules.get(name.split(".")[0]), "__file__", None)
            if where and not os.path.abspath(where).startswith(entry + os.sep):
                return f"PYTHONPATH entry {entry} holds {name}, which the forkserver imported from {where}"
    return None


def _environment_at_exec(pid: int) -> dict[str, str]:
    """The environment process `pid` was started with (proc(5): /proc/<pid>/environ)."""
    pairs = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(pair.decode(errors="surrogateescape").split("=", 1) for pair in pairs if b"=" in pair)


def _pythonpath(env: dict[str, str]) -> list[str]:
    """PYTHONPATH's entries as a new interpreter puts them on sys.path (relative to the current folder,
    an empty entry meaning it)."""
    value = env.get("PYTHONPATH")
    return [os.path.abspath(entry) for entry in value.split(os.pathsep)] if value else []


def _run_script(script: str, args: list[str], cwd: str, env: dict[str, str], out_path: str, err_path: str,
                base_path: tuple[str, ...]) -> None:
    """In a forked process: become `python script args` run in `cwd` with `env` and the output files,
    then run it (SystemExit and its status reach multiprocessing, which ends the process); or, with a
    reason written to `<out_path>.why`, a new interpreter that runs it."""
    os.setsid()  # a session of its own, so that a timeout ends it with whatever it started
    for fd, path in ((1, out_path), (2, err_path)):
        target = os.open(path, os.O_WRONLY | os.O_APPEND)
        os.dup2(target, fd)
        os.close(target)
    os.chdir(cwd)
    command = [sys.executable, script, *args]
    reason = _needs_a_new_interpreter(env)
    if reason:
        Path(f"{out_path}.why").write_text(reason)
        os.execve(sys.executable, command, env)
    os.environ.clear()
    os.environ.update(env)
    sys.argv = [script, *args]
    sys.path[:] = [str(Path(script).resolve().parent), *_pythonpath(env), *base_path]
    torch.multiprocessing.set_start_method(None, force=True)  # unset, as in a new interpreter
    import numpy
    torch.seed()  # a new interpreter's global generators start from fresh entropy, not the server's state
    numpy.random.seed()
    if env.get("OMP_NUM_THREADS"):  # read by torch at import, in the server: the caller's value
        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
    try:
        runpy.run_path(script, run_name="__main__")
    except Exception as error:  # as the interpreter: the traceback from the script's frame on, then status 1
        frames = error.__traceback__
        while frames is not None and frames.tb_frame.f_code.co_filename != script:
            frames = frames.tb_next
        traceback.print_exception(type(error), error, frames or error.__traceback__)
        sys.exit(1)


def _run_rank(rank: int, script: str, args: list[str], cwd: str, env: dict[str, str], launch: dict[str, str],
              folder: str, base_path: tuple[str, ...]) -> None:
    """Rank `rank` of a run_ranks() run: the script with the launch variables of this rank."""
    rank_env = {**env, **{name: value.format(rank=rank) for name, value in launch.items()}}
    _run_script(script, args, cwd, rank_env, f"{folder}/rank{rank}.out", f"{folder}/rank{rank}.err", base_path)


def torchrun_variables(nprocs: int, port: int) -> dict[str, str]:
    """What torchrun gives worker `{rank}` of `nprocs` on one node (the variables util/distributed.py
    and torch's env:// rendezvous read)."""
    return {"RANK": "{rank}", "LOCAL_RANK": "{rank}", "WORLD_SIZE": str(nprocs), "LOCAL_WORLD_SIZE": str(nprocs),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}


def run_ranks(script: Path | str, args: list[str], env: dict[str, str], cwd: Path, timeout: float, nprocs: int = 2,
              launch: dict[str, str] | None = None, port: int = 0) -> subprocess.CompletedProcess:
    """`python script args` as `nprocs` ranks of one distributed run (launch: the variables of rank
    `{rank}`, torchrun_variables by default): the first failing rank's exit status (-N for a signal),
    else 0; stdout and stderr of all ranks, rank by rank. A failing rank ends the others; past
    `timeout` all are killed (then subprocess.TimeoutExpired)."""
    folder = tempfile.TemporaryDirectory(prefix="ranks_")
    for rank in range(nprocs):
        for stream in ("out", "err"):
            Path(folder.name, f"rank{rank}.{stream}").touch()
    launch = launch or torchrun_variables(nprocs, port)
    context = torch.multiprocessing.start_processes(
        _run_rank, args=(str(script), list(args), str(cwd), dict(env), launch, folder.name, _interpreter_path()),
        nprocs=nprocs, join=False, start_method="forkserver")
    code, deadline, timed_out, failure = 0, time.monotonic() + timeout, False, ""
    try:
        # As torchrun's agent: the first rank that fails has the others sent SIGTERM at once.
        while not context.join(timeout=max(0.0, deadline - time.monotonic())):
            if time.monotonic() >= deadline:
                timed_out = True
                break
    except torch.multiprocessing.ProcessExitedException as exited:
        code = exited.exit_code
    except torch.multiprocessing.ProcessRaisedException as raised:  # not expected: _run_script catches them
        code, failure = 1, str(raised)
    finally:
        for process in context.processes:
            if process.exitcode is None:  # not yet reaped: its pid is still its own
                _kill_session(process.pid)
            process.join()
    outputs = [[Path(folder.name, f"rank{rank}.{stream}").read_text() for rank in range(nprocs)]
               for stream in ("out", "err")]
    command = [sys.executable, str(script), *args]
    if timed_out:
        raise subprocess.TimeoutExpired(command, timeout, "".join(outputs[0]), "".join(outputs[1]))
    return subprocess.CompletedProcess(command, code, "".join(outputs[0]), "".join(outputs[1]) + failure)


def _kill_session(pid: int) -> None:
    """SIGKILL to the session `pid` leads (the process and what it started), or to `pid` alone if it
    does not lead one yet; nothing if it is gone."""
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
            return
        except ProcessLookupError:
            continue


def children_of(pid: int) -> list[int]:
    """The pids of the processes whose parent is `pid`, in the order they were started (for a torchrun
    agent: its workers), read from /proc (proc(5))."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # ended meanwhile
            continue
        fields = text[text.rindex(")") + 2:].split()  # after "pid (name) ": state, ppid, ..., starttime (22nd)
        if int(fields[1]) == pid:
            found.append((int(fields[19]), int(stat.parent.name)))
    return [child for _, child in sorted(found)]


_alive: weakref.WeakSet[ScriptProcess] = weakref.WeakSet()


class ScriptProcess:
    """`command` started in a process and a session of its own, with what subprocess.Popen gives for
    it (pid, poll, wait, communicate, send_signal, kill, returncode); its stdout and stderr (stderr in
    stdout with `merge_stderr`) are files, read when asked. `python script.py ...` is forked (see the
    module's docstring) unless `new_interpreter`; anything else is started by subprocess.Popen."""

    def __init__(self, command: list[str], cwd: Path, env: dict[str, str], merge_stderr: bool = False,
                 new_interpreter: bool = False) -> None:
        self.args = list(command)
        self._folder = tempfile.TemporaryDirectory(prefix="process_")
        self._out = os.path.join(self._folder.name, "out")
        self._err = self._out if merge_stderr else os.path.join(self._folder.name, "err")
        for path in {self._out, self._err}:
            Path(path).touch()
        self.returncode: int | None = None
        if is_python_script(command) and not new_interpreter:
            self._process = _forkserver.Process(target=_run_script, args=(
                command[1], command[2:], str(cwd), dict(env), self._out, self._err, _interpreter_path()))
            self._process.start()
            self.pid = self._process.pid
            self._subprocess = None
        else:
            self._not_forked = "asked for" if new_interpreter else "not `python script.py ...`"
            with open(self._out, "a") as out, open(self._err, "a") as err:
                self._subprocess = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=err,
                                                    stdin=subprocess.DEVNULL, start_new_session=True)
            self.pid = self._subprocess.pid
        _alive.add(self)

    def poll(self) -> int | None:
        self.returncode = self._subprocess.poll() if self._subprocess else self._process.exitcode
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self._subprocess:
            self._subprocess.wait(timeout)
        else:
            self._process.join(timeout)
            if self._process.exitcode is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
        return self.poll()

    def output_so_far(self) -> tuple[str, str]:
        """Its stdout and stderr so far ("" for stderr merged into stdout)."""
        out = Path(self._out).read_text()
        return out, ("" if self._err == self._out else Path(self._err).read_text())

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        return self.output_so_far()

    def why_new_interpreter(self) -> str | None:
        """None if it is a fork (the script runs in it as `__main__`); else why it is a new interpreter."""
        if self._subprocess:
            return self._not_forked
        why = Path(f"{self._out}.why")
        return why.read_text() if why.exists() else None

    def children(self) -> list[int]:
        """The pids of the processes it started, oldest first (a torchrun agent's: its workers)."""
        return children_of(self.pid)

    def send_signal(self, sig: int) -> None:
        """`sig` to the process alone (as Popen.send_signal), unless it has ended."""
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        """SIGKILL to it and everything it started (its session, and its children's, which torchrun
        starts in sessions of their own), then wait for it."""
        if self.poll() is None:
            children = self.children()  # before it ends: then they are no longer its children
            _kill_session(self.pid)  # first, so that it cannot start them again (torchrun --max-restarts)
            for child in children:
                _kill_session(child)
        self.wait()


def run_script_process(command: list[str], cwd: Path, env: dict[str, str], timeout: float,
                       new_interpreter: bool = False) -> subprocess.CompletedProcess:
    """What subprocess.run(command, cwd, env, capture_output=True, text=True, timeout) gives, in a
    ScriptProcess; past `timeout` the process and its children are killed (then TimeoutExpired)."""
    process = ScriptProcess(command, cwd, env, new_interpreter=new_interpreter)
    try:
        out, err = process.communicate(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def _kill_the_ones_left() -> None:
    """At the test process's exit: a process that a failed test left running is killed, so that
    multiprocessing's own exit, which waits for its processes, does not wait for it."""
    for process in list(_alive):
        process.kill()


atexit.register(_kill_the_ones_left)  # after multiprocessing's exit function, so it runs before it
