"""torchrun's agent, forked from a process that has imported it already.

`torchrun` is `torch.distributed.run.main`: a Python process (the elastic agent) that imports torch,
starts the workers as processes of their own, watches and ends them. Started as a new interpreter, the
agent spends ~2.3 CPU-s importing torch before it starts anything, and the suite starts ~30 of them. Here
each agent is a fork of a forkserver that imported `torch.distributed.run` once (one per test process):
the same agent code with the same command line, starting the same worker processes, minus the import.
The forkserver is single-threaded, so forking it is safe (forking the test process itself is not:
pytest-xdist keeps threads in it).
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

_forkserver = multiprocessing.get_context("forkserver")
_forkserver.set_forkserver_preload(["torch.distributed.run"])


def _agent(argv: list[str], env: dict[str, str], cwd: str, out_path: str, err_path: str) -> None:
    """The agent's process: a session of its own (so that a timeout can end it with its workers), its
    output and its workers' output to the files, the caller's environment, then torchrun's main."""
    os.setsid()
    for fd, path in ((1, out_path), (2, err_path)):
        target = os.open(path, os.O_WRONLY | os.O_APPEND)
        os.dup2(target, fd)
        os.close(target)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    from torch.distributed.run import main
    sys.argv = ["torchrun", *argv]
    main(argv)  # an error ends this process with exit status 1 and the traceback on stderr, as torchrun's


def run_torchrun(argv: list[str], env: dict[str, str], cwd: Path, timeout: float) -> tuple[int, str, str]:
    """torchrun `argv` (its own flags, the script, the script's flags) in `cwd` with `env`: exit status,
    stdout and stderr of the agent and its workers. Past `timeout` the agent and its workers are killed
    (then subprocess.TimeoutExpired)."""
    with tempfile.TemporaryDirectory(prefix="torchrun_") as folder:
        out_path, err_path = os.path.join(folder, "out"), os.path.join(folder, "err")
        for path in (out_path, err_path):
            Path(path).touch()
        agent = _forkserver.Process(target=_agent, args=(argv, env, str(cwd), out_path, err_path))
        agent.start()
        agent.join(timeout)
        if agent.exitcode is None:
            try:
                os.killpg(agent.pid, signal.SIGKILL)  # the workers too, not only the agent
            except ProcessLookupError:
                agent.kill()
            agent.join()
            raise subprocess.TimeoutExpired(["torchrun", *argv], timeout)
        return agent.exitcode, Path(out_path).read_text(), Path(err_path).read_text()
