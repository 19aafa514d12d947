"""The suite's processes, forked from a server that has imported PyTorch once.

A test that needs a process of its own (one it kills, one beside another, a run whose exit status is
the point) starts `python train.py ...` or `torchrun ...` as a user does. Started as a new
interpreter, each spends ~3 CPU-s importing torch, torchvision and torch._dynamo before its first
line of work, and the suite starts about a hundred. Here each is a fork of a forkserver (one per test
process) that imported them once: the same script or module run as `__main__` with the same command
line, environment, working folder and `sys.path` as `python script args` or `python -m module args`
gives, in a process and session of its own (a pid to kill, an exit status, -9 when killed), minus the
import. What a new interpreter takes from its environment at start-up is redone in the fork:
`sys.path` from PYTHONPATH, the compute threads from OMP_NUM_THREADS, fresh seeds for numpy's global
generator (Python's `random` reseeds itself after a fork), multiprocessing's start method unset. The
server is single-threaded, so forking it is safe (forking the test process itself is not: pytest-xdist
keeps threads in it). A forked torchrun agent starts its workers through the same server instead of
as new interpreters (its own threads make forking the agent unsafe): the same command, environment,
folder, output and session as torchrun's Popen gives them, but the server is their parent, so
`ForkedProcess.torchrun_workers()` lists them.
"""
from __future__ import annotations

import atexit
import dataclasses
import functools
import io
import json
import multiprocessing
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

_forkserver = multiprocessing.get_context("forkserver")
_forkserver.set_forkserver_preload(["torch", "torchvision", "torch._dynamo", "torch.distributed.run"])


@dataclasses.dataclass(frozen=True)
class _Launch:
    """What a forked process was given that it passes on to the torchrun workers it starts, if it is
    torchrun's agent."""
    out_path: str  # its stdout, and a worker's unless torchrun redirects it
    err_path: str
    base_path: tuple[str, ...]  # _interpreter_path(), read once by the test process
    workers_path: str  # where it lists its workers' pids, for ForkedProcess.torchrun_workers()


_this_launch: _Launch | None = None  # set in a forked process


@functools.cache
def _interpreter_path() -> tuple[str, ...]:
    """`sys.path` of a new interpreter without PYTHONPATH, after its first entry (the script's folder):
    the standard library and site-packages, read once from such an interpreter."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    listed = subprocess.run([sys.executable, "-c", "import json, sys; print(json.dumps(sys.path[1:]))"],
                            env=env, capture_output=True, text=True, check=True).stdout
    return tuple(json.loads(listed))


def _main(command: list[str], env: dict[str, str], cwd: str, launch: _Launch) -> None:
    """The forked process: a session of its own (so that a timeout can end it with its children), its
    output to the files, the caller's environment and folder, then `command` (see is_python_command)
    as `__main__`, ending as the interpreter would."""
    global _this_launch
    os.setsid()
    for fd, path in ((1, launch.out_path), (2, launch.err_path)):
        target = os.open(path, os.O_WRONLY | os.O_APPEND)
        os.dup2(target, fd)
        os.close(target)
    # Unbuffered, as `python -u` (torchrun's workers) and as a killed process's last lines need.
    sys.stdout = io.TextIOWrapper(open(1, "wb", buffering=0, closefd=False), write_through=True)
    sys.stderr = io.TextIOWrapper(open(2, "wb", buffering=0, closefd=False), write_through=True)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    _this_launch = launch
    multiprocessing.set_start_method(None, force=True)  # unset, as in a new interpreter (the server's is forkserver)
    command = _without_unbuffered_flag(command)
    module = command[2] if command[1] == "-m" else None
    sys.argv = [module or command[1], *command[3 if module else 2:]]
    first = os.getcwd() if module else str(Path(command[1]).resolve().parent)
    extra = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
    sys.path[:] = [first, *extra, *launch.base_path]
    import numpy
    import torch
    numpy.random.seed()  # a new interpreter's global numpy generator starts from fresh entropy
    if env.get("OMP_NUM_THREADS"):  # read by torch at import, in the server: apply the caller's
        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
    if module == "torch.distributed.run":
        _fork_the_workers_of_this_agent()
    status = 0
    try:
        if module:
            # As `python -m` in a new interpreter: the module's code runs once, as __main__ (the server
            # imported torchrun's; runpy warns about a module imported before).
            sys.modules.pop(module, None)
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(command[1], run_name="__main__")
    except SystemExit as stop:
        status = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if not isinstance(stop.code, int) and stop.code is not None:
            print(stop.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 (as the interpreter: the traceback, then status 1)
        traceback.print_exc()
        status = 1
    threading._shutdown()  # the interpreter's exit: wait for threads that are not daemons, then atexit
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _without_unbuffered_flag(command: list[str]) -> list[str]:
    """`command` without python's `-u`, which torchrun gives its workers: a forked process's stdout and
    stderr are unbuffered anyway (_main)."""
    return [command[0], *command[2:]] if command[1:2] == ["-u"] else command


def is_python_command(command: list[str]) -> bool:
    """Whether `command` is `python [-u] script.py ...` or `python [-u] -m module ...` with this
    interpreter."""
    command = _without_unbuffered_flag(command) if command else command
    return len(command) >= 2 and command[0] == sys.executable and (
        command[1] == "-m" and len(command) >= 3 or command[1].endswith(".py"))


def _fork_the_workers_of_this_agent() -> None:
    """In a forked torchrun agent: each worker that is a Python script or module is forked from the
    server that forked the agent (its socket and liveness pipe are inherited) instead of started as a
    new interpreter; anything else (`--no-python`, a Python whose forkserver authenticates its clients,
    3.14 on) is started by torchrun's Popen as before. Either way its pid is listed for the tests."""
    from multiprocessing import forkserver, process, spawn

    from torch.distributed.elastic.multiprocessing.subprocess_handler import subprocess_handler

    server = forkserver._forkserver
    can_fork = not hasattr(server, "_forkserver_authkey")
    # The server's child does not know the server's pid, so ensure_running would start a second server.
    server.ensure_running = lambda: None
    preparation_data = spawn.get_preparation_data

    def what_a_worker_needs(name: str) -> dict:
        """The server's child finds _main in this folder; it must not run the agent's __main__ (torchrun)
        again, as spawn does by default."""
        data = {key: value for key, value in preparation_data(name).items() if not key.startswith("init_main_from")}
        return {**data, "sys_path": [*data["sys_path"], str(Path(__file__).parent)]}

    spawn.get_preparation_data = what_a_worker_needs
    start_with_popen = subprocess_handler.SubprocessHandler._popen

    def start_worker(handler: subprocess_handler.SubprocessHandler, args: tuple,
                     env: dict[str, str]) -> ForkedProcess | subprocess.Popen:
        if can_fork and is_python_command(list(args)):
            out = handler._stdout.name if handler._stdout else _this_launch.out_path
            err = handler._stderr.name if handler._stderr else _this_launch.err_path
            worker = ForkedProcess(list(args), Path.cwd(), env, output_files=(out, err))
            process._children.discard(worker._process)  # as a Popen's child: not waited for at the agent's exit
        else:
            worker = start_with_popen(handler, args, env)
        with open(_this_launch.workers_path, "a") as workers:
            workers.write(f"{worker.pid}\n")
        return worker

    subprocess_handler.SubprocessHandler._popen = start_worker


class ForkedProcess:
    """`command` (see is_python_command) forked from the server: what subprocess.Popen gives for it
    (pid, poll, wait, communicate, kill, returncode), stdout and stderr read from files when it ends
    (stderr into stdout with `merge_stderr`), or written to `output_files` (a torchrun worker's)."""

    def __init__(self, command: list[str], cwd: Path, env: dict[str, str], merge_stderr: bool = False,
                 output_files: tuple[str, str] | None = None) -> None:
        if not is_python_command(command):
            raise ValueError(f"not `{sys.executable} script.py ...` or `... -m module ...`: {command[:3]}; "
                             f"start other programs with subprocess")
        self.args = command
        if output_files:
            self._folder = None
            self._out, self._err = output_files
            self._workers = os.devnull
        else:
            self._folder = tempfile.TemporaryDirectory(prefix="forked_")
            self._out = os.path.join(self._folder.name, "out")
            self._err = self._out if merge_stderr else os.path.join(self._folder.name, "err")
            for path in {self._out, self._err}:
                Path(path).touch()
            self._workers = os.path.join(self._folder.name, "workers")
        base_path = _this_launch.base_path if _this_launch else _interpreter_path()
        launch = _Launch(self._out, self._err, base_path, self._workers)
        self._process = _forkserver.Process(target=_main, args=(command, env, str(cwd), launch))
        self._process.start()
        self.pid = self._process.pid
        self.returncode: int | None = None
        self._wait_for_its_session()

    def _wait_for_its_session(self) -> None:
        """Return once it leads a session of its own, as Popen(start_new_session=True) does, so that
        os.killpg(pid) (torchrun's way of ending a worker, and kill()) reaches it from the start."""
        while self._process.exitcode is None:
            try:
                if os.getpgid(self.pid) == self.pid:
                    return
            except ProcessLookupError:
                return
            time.sleep(0.001)

    def torchrun_workers(self) -> list[int]:
        """The pids of the workers this torchrun agent has started, in order (forked by the server,
        they are not its children)."""
        path = Path(self._workers)
        return [int(pid) for pid in path.read_text().split()] if path.exists() else []

    def poll(self) -> int | None:
        self.returncode = self._process.exitcode
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self.poll() is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def output_so_far(self) -> tuple[str, str]:
        """Its stdout and stderr so far ("" for stderr merged into stdout)."""
        out = Path(self._out).read_text()
        return out, ("" if self._err == self._out else Path(self._err).read_text())

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        return self.output_so_far()

    def send_signal(self, sig: int) -> None:
        """`sig` to the process alone (as Popen.send_signal), unless it has ended."""
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        """SIGKILL to it and everything it started (its session, and a torchrun agent's workers')."""
        for session in (self.pid, *self.torchrun_workers()):
            try:
                os.killpg(session, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._process.join()
        self.poll()


def run_forked(command: list[str], cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """What subprocess.run(command, cwd, env, capture_output=True, text=True, timeout) gives, forked;
    past `timeout` the process and its children are killed (then TimeoutExpired)."""
    process = ForkedProcess(command, cwd, env)
    try:
        out, err = process.communicate(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def run_torchrun(argv: list[str], env: dict[str, str], cwd: Path, timeout: float) -> tuple[int, str, str]:
    """torchrun `argv` (its own flags, the script, the script's flags) in `cwd` with `env`: exit status,
    stdout and stderr of the agent and its workers. Past `timeout` the agent and its workers are killed
    (then subprocess.TimeoutExpired)."""
    result = run_forked([sys.executable, "-m", "torch.distributed.run", *argv], cwd, env, timeout)
    return result.returncode, result.stdout, result.stderr
