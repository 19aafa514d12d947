"""The suite's script processes are forked from a server that imported torch (tests/forked_processes.py):
what the scripts see must be what `python script args` gives them, or a test could pass that a user's
run would fail."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import free_port
from forked_processes import ForkedProcess, run_forked

REPORT = '''
import sys
preloaded = "torch._dynamo" in sys.modules
import json, os, numpy, torch
multiprocessing_main = getattr(sys.modules.get("__mp_main__"), "__spec__", None)  # torchrun's, if it ran again
print(json.dumps({"name": __name__, "argv": sys.argv, "path": sys.path, "cwd": os.getcwd(),
                  "threads": torch.get_num_threads(), "variable": os.environ.get("FORK_TEST_VARIABLE"),
                  "numpy": int(numpy.random.randint(2**31)), "pid": os.getpid(), "preloaded": preloaded,
                  "rank": os.environ.get("RANK"), "world": os.environ.get("WORLD_SIZE"),
                  "multiprocessing_main": getattr(multiprocessing_main, "name", None)}))
sys.exit(int(sys.argv[1]))
'''


def test_a_forked_script_sees_what_a_new_interpreter_gives_it(tmp_path):
    script = tmp_path / "scripts" / "report.py"
    script.parent.mkdir()
    script.write_text(REPORT)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "FORK_TEST_VARIABLE": "seen", "PYTHONPATH": str(tmp_path / "extra")}
    command = [sys.executable, str(script), "3", "--flag"]
    fresh = subprocess.run(command, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=60)
    forked = run_forked(command, elsewhere, env, timeout=60)
    again = run_forked(command, elsewhere, env, timeout=60)
    assert fresh.returncode == forked.returncode == 3, forked.stderr
    seen_fresh, seen_forked = json.loads(fresh.stdout), json.loads(forked.stdout)
    numbers = {seen_fresh.pop("numpy"), seen_forked.pop("numpy"), json.loads(again.stdout)["numpy"]}
    assert (seen_fresh.pop("preloaded"), seen_forked.pop("preloaded")) == (False, True)
    assert seen_fresh.pop("pid") != seen_forked.pop("pid")
    assert seen_forked == seen_fresh  # __main__, argv, sys.path (PYTHONPATH too), folder, threads, environment
    assert len(numbers) == 3  # numpy's global generator freshly seeded in each, not copied from the server


def reports(output: str) -> list[dict]:
    """The JSON lines REPORT printed, by rank, without what differs between any two processes."""
    found = sorted((json.loads(line) for line in output.splitlines() if line.startswith("{")), key=lambda r: r["rank"])
    return [{key: value for key, value in report.items() if key not in ("numpy", "pid", "preloaded")}
            for report in found]


def torchrun_command(script: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={free_port()}",
            str(script), *args]


@contextlib.contextmanager
def forked_agent(command: list[str], cwd: Path, env: dict[str, str]) -> Iterator[ForkedProcess]:
    """A forked torchrun agent, killed with its workers if the test ends before it does."""
    agent = ForkedProcess(command, cwd, env)
    try:
        yield agent
    finally:
        agent.kill()


def all_ended(pids: list[int], within: float = 10) -> bool:
    """Whether every process of `pids` is gone (reaped, not a zombie) within `within` seconds."""
    deadline = time.time() + within
    while any(os.path.exists(f"/proc/{pid}") for pid in pids):
        if time.time() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_torchrun_workers_are_forked_too_and_see_what_new_interpreters_give_them(tmp_path):
    script = tmp_path / "report.py"
    script.write_text(REPORT)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "FORK_TEST_VARIABLE": "seen", "PYTHONPATH": str(tmp_path / "extra")}
    fresh = subprocess.run(torchrun_command(script, "0", "--flag"), cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=120)
    with forked_agent(torchrun_command(script, "0", "--flag"), tmp_path, env) as agent:
        out, err = agent.communicate(timeout=120)
    assert fresh.returncode == agent.returncode == 0, err[-3000:]
    forked = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert sorted(report["pid"] for report in forked) == sorted(agent.torchrun_workers())
    assert all(report["preloaded"] for report in forked)  # not new interpreters: nothing to import
    assert reports(out) == reports(fresh.stdout) and [r["rank"] for r in reports(out)] == ["0", "1"]
    assert err.count("RuntimeWarning") == fresh.stderr.count("RuntimeWarning")  # torchrun's module run once


FAILING = '''
import os, sys, time
if os.environ["RANK"] == "1":
    sys.exit(3)
time.sleep(60)
'''


def test_a_failing_forked_worker_ends_the_run_and_the_other_worker_as_under_a_new_torchrun(tmp_path):
    script = tmp_path / "failing.py"
    script.write_text(FAILING)
    began = time.time()
    fresh = subprocess.run(torchrun_command(script), cwd=tmp_path, env=dict(os.environ), capture_output=True,
                           text=True, timeout=120)
    assert time.time() - began < 40
    began = time.time()
    with forked_agent(torchrun_command(script), tmp_path, dict(os.environ)) as agent:
        _, err = agent.communicate(timeout=120)
    assert time.time() - began < 40  # rank 0 ended by torchrun's SIGTERM to its session, not its 60 s sleep
    for run_err, code in ((fresh.stderr, fresh.returncode), (err, agent.returncode)):
        assert code == 1 and "exitcode  : 3" in run_err and "exitcode  : -15" in run_err, run_err[-3000:]
    assert all_ended(agent.torchrun_workers())


def test_a_forked_agent_stopped_as_its_workers_start_ends_them_at_once(tmp_path):
    # A worker is handed to torchrun only once it leads its own session, so that the agent's killpg
    # reaches it however early the agent is stopped.
    script = tmp_path / "sleeper.py"
    script.write_text("import time\ntime.sleep(60)\n")
    with forked_agent(torchrun_command(script), tmp_path, dict(os.environ)) as agent:
        deadline = time.time() + 60
        while len(agent.torchrun_workers()) < 2:
            assert agent.poll() is None and time.time() < deadline
            time.sleep(0.001)
        agent.send_signal(signal.SIGTERM)
        agent.communicate(timeout=20)
        assert all_ended(agent.torchrun_workers())


def test_torchruns_redirected_output_of_forked_workers_goes_to_its_log_files(tmp_path):
    script = tmp_path / "report.py"
    script.write_text(REPORT)
    command = torchrun_command(script, "0")
    command[3:3] = ["--redirects", "1", "--log-dir", str(tmp_path / "logs")]
    with forked_agent(command, tmp_path, dict(os.environ)) as agent:
        out, err = agent.communicate(timeout=120)
    assert agent.returncode == 0, err[-3000:]
    logged = "".join(path.read_text() for path in sorted((tmp_path / "logs").rglob("stdout.log")))
    assert not reports(out) and [report["rank"] for report in reports(logged)] == ["0", "1"]


def test_a_forked_process_can_be_killed_and_says_so_as_a_popen_does(tmp_path):
    script = tmp_path / "sleeper.py"
    script.write_text("import time\nprint('started', flush=True)\ntime.sleep(60)\n")
    process = ForkedProcess([sys.executable, str(script)], tmp_path, dict(os.environ), merge_stderr=True)
    deadline = time.time() + 30
    while "started" not in process.output_so_far()[0]:
        assert process.poll() is None and time.time() < deadline
        time.sleep(0.01)
    os.kill(process.pid, signal.SIGKILL)
    out, _ = process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL and out == "started\n"


def test_an_uncaught_exception_ends_a_forked_script_with_status_1_and_its_traceback(tmp_path):
    script = tmp_path / "broken.py"
    script.write_text("raise ValueError('broken on purpose')\n")
    result = run_forked([sys.executable, str(script)], Path(tmp_path), dict(os.environ), timeout=60)
    assert result.returncode == 1
    assert "Traceback" in result.stderr and "ValueError: broken on purpose" in result.stderr


def test_only_python_scripts_and_modules_are_forked(tmp_path):
    with pytest.raises(ValueError, match="start other programs with subprocess"):
        ForkedProcess(["bash", "scripts/demo.sh"], tmp_path, dict(os.environ))
