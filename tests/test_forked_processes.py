"""The suite's script processes are forked from a server that imported torch (tests/forked_processes.py):
what the scripts see must be what `python script args` gives them, or a test could pass that a user's
run would fail."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from forked_processes import ForkedProcess, run_forked

REPORT = '''
import json, os, sys, numpy, torch
print(json.dumps({"name": __name__, "argv": sys.argv, "path": sys.path, "cwd": os.getcwd(),
                  "threads": torch.get_num_threads(), "variable": os.environ.get("FORK_TEST_VARIABLE"),
                  "numpy": int(numpy.random.randint(2**31))}))
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
    assert seen_forked == seen_fresh  # __main__, argv, sys.path (PYTHONPATH too), folder, threads, environment
    assert len(numbers) == 3  # numpy's global generator freshly seeded in each, not copied from the server


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
