"""The suite's processes (tests/processes.py) give a script what a user's run gives it, judged against
the real thing: a forked `python script.py` against a new interpreter, run_ranks' ranks against
torchrun's workers. Otherwise a test could pass that a user's run would fail, or the other way round."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import free_port
from processes import ScriptProcess, children_of, run_ranks, run_script_process

REPORT = '''
import sys
preloaded = "torch" in sys.modules  # imported by the forkserver, or not yet (a new interpreter)
import json, os, threading, time, numpy, torch
def late():
    time.sleep(0.5)
    print("a thread that is not a daemon ran to its end", file=sys.stderr)
threading.Thread(target=late).start()
# one write() per report: ranks share one pipe, and print() may write the line and its newline apart
found = {"name": __name__, "file": __file__, "argv": sys.argv, "path": sys.path, "cwd": os.getcwd(),
         "threads": torch.get_num_threads(), "variable": os.environ.get("IMG2IMG_TEST_VARIABLE"),
         "torch_seed": torch.initial_seed(),
         "numpy": int(numpy.random.randint(2**31)), "pid": os.getpid(), "preloaded": preloaded,
         "launch": {name: os.environ.get(name) for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE",
                                                             "LOCAL_WORLD_SIZE", "MASTER_ADDR")}}
os.write(1, (json.dumps(found) + "\\n").encode())
sys.exit(int(sys.argv[1]))
'''
DIFFERS_BETWEEN_RUNS = ("torch_seed", "numpy", "pid", "preloaded")


def report(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def same_in_every_run(found: dict) -> dict:
    return {key: value for key, value in found.items() if key not in DIFFERS_BETWEEN_RUNS}


@pytest.fixture
def report_script(tmp_path) -> Path:
    script = tmp_path / "scripts" / "report.py"
    script.parent.mkdir()
    script.write_text(REPORT)
    return script


def test_a_forked_script_sees_what_a_new_interpreter_gives_it(report_script, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # PYTHONPATH with an absolute, an empty (the folder) and a relative entry, as a user may write it
    env = {**os.environ, "OMP_NUM_THREADS": "2", "IMG2IMG_TEST_VARIABLE": "seen",
           "PYTHONPATH": os.pathsep.join([str(tmp_path / "extra"), "", "relative"])}
    command = [sys.executable, str(report_script), "3", "--flag"]
    fresh = subprocess.run(command, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=60)
    forked = [ScriptProcess(command, elsewhere, env) for _ in range(2)]
    outputs = [process.communicate(timeout=60) for process in forked]
    assert [process.why_new_interpreter() for process in forked] == [None, None]
    assert fresh.returncode == forked[0].returncode == forked[1].returncode == 3, outputs[0][1]
    (seen_fresh,), (seen_forked,), (seen_again,) = (report(out) for out in (fresh.stdout, *(o for o, _ in outputs)))
    assert (seen_fresh["preloaded"], seen_forked["preloaded"]) == (False, True)
    # __main__, argv, sys.path (PYTHONPATH's entries included), folder, threads, environment
    assert same_in_every_run(seen_forked) == same_in_every_run(seen_fresh)
    assert seen_forked["threads"] == 2 and seen_forked["variable"] == "seen"
    # torch's and numpy's global generators start from fresh entropy in each, not from the server's state
    for key in ("torch_seed", "numpy"):
        assert len({seen_fresh[key], seen_forked[key], seen_again[key]}) == 3, key
    assert all(err == fresh.stderr == "a thread that is not a daemon ran to its end\n" for _, err in outputs)


COMPILING = """
import os, sys
preloaded = "torch" in sys.modules
import torch
def step(x):
    return x + 1, torch.compiler.is_compiling()
print(torch.compile(step, backend="eager")(torch.zeros(1))[1], preloaded, os.getpid())
"""


@pytest.mark.slow  # two new interpreters that compile
def test_a_variable_read_at_import_by_what_the_server_imported_reaches_the_script(tmp_path):
    # TORCH_COMPILE_DISABLE is read once, when torch's compiler is imported (in the forkserver, before
    # any test): a fork would compile anyway, so the process becomes a new interpreter (the same pid and
    # output files) that reads it, as the user's run does.
    script = tmp_path / "compiling.py"
    script.write_text(COMPILING)
    command = [sys.executable, str(script)]
    env = {**os.environ, "TORCH_COMPILE_DISABLE": "1"}
    process = ScriptProcess(command, tmp_path, env)
    out, err = process.communicate(timeout=120)
    fresh = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert process.returncode == fresh.returncode == 0, err
    assert out.split()[:2] == fresh.stdout.split()[:2] == ["False", "False"]  # not compiled; not preloaded
    assert out.split()[2] == str(process.pid) and "TORCH_COMPILE_DISABLE" in process.why_new_interpreter()
    # without it, the same script is forked, and compiles as a new interpreter would
    plain = ScriptProcess(command, tmp_path, dict(os.environ))
    assert plain.communicate(timeout=120)[0].split()[:2] == ["True", "True"] and plain.why_new_interpreter() is None


def test_a_pythonpath_entry_hiding_a_module_the_server_imported_gets_a_new_interpreter(tmp_path):
    hiding = tmp_path / "hiding" / "torchvision"
    hiding.mkdir(parents=True)
    (hiding / "__init__.py").write_text("HIDDEN = True\n")
    script = tmp_path / "which.py"
    script.write_text("import torchvision\nprint(getattr(torchvision, 'HIDDEN', False))\n")
    process = ScriptProcess([sys.executable, str(script)], tmp_path,
                            {**os.environ, "PYTHONPATH": str(tmp_path / "hiding")}, merge_stderr=True)
    out, _ = process.communicate(timeout=60)
    assert (process.returncode, out) == (0, "True\n")
    assert "torchvision" in process.why_new_interpreter()


def test_a_forked_process_killed_ends_with_minus_9_and_its_output_so_far(tmp_path):
    script = tmp_path / "sleeper.py"
    script.write_text("import time\nprint('started', flush=True)\ntime.sleep(60)\n")
    process = ScriptProcess([sys.executable, str(script)], tmp_path, dict(os.environ), merge_stderr=True)
    deadline = time.time() + 30
    while "started" not in process.output_so_far()[0]:
        assert process.poll() is None and time.time() < deadline
        time.sleep(0.01)
    os.kill(process.pid, signal.SIGKILL)
    out, _ = process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL and out == "started\n"


@pytest.mark.parametrize("ending, status, stderr_has", [
    ("raise ValueError('broken on purpose')", 1, "ValueError: broken on purpose"),
    ("import sys; sys.exit('a message instead of a status')", 1, "a message instead of a status"),
    ("import os; os.kill(os.getpid(), 15)", -15, ""),
])
def test_a_forked_script_ends_with_the_status_and_stderr_of_a_new_interpreter(ending, status, stderr_has, tmp_path):
    script = tmp_path / "ending.py"
    script.write_text(f"print('before')\n{ending}\n")
    command = [sys.executable, str(script)]
    fresh = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    forked = run_script_process(command, tmp_path, dict(os.environ), timeout=60)
    for result in (fresh, forked):
        assert (result.returncode, result.stdout) == (status, "before\n") and stderr_has in result.stderr
    assert forked.stderr.replace(str(script), "") == fresh.stderr.replace(str(script), "")


def test_only_python_scripts_are_forked_other_commands_start_as_they_are(tmp_path):
    process = ScriptProcess(["bash", "-c", "echo $PWD; exit 4"], tmp_path, dict(os.environ))
    assert process.communicate(timeout=30) == (f"{tmp_path}\n", "") and process.returncode == 4
    assert process.why_new_interpreter() == "not `python script.py ...`"


# ----------------------------------------------------------------------------- ranks and torchrun
def torchrun_command(script: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={free_port()}",
            str(script), *args]


@pytest.mark.slow  # a real torchrun: new interpreters
def test_ranks_see_what_torchruns_workers_see(report_script, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "IMG2IMG_TEST_VARIABLE": "seen"}
    fresh = subprocess.run(torchrun_command(report_script, "0", "--flag"), cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=120)
    ranks = run_ranks(report_script, ["0", "--flag"], env, tmp_path, timeout=120)
    assert fresh.returncode == ranks.returncode == 0, ranks.stderr[-3000:]
    by_rank = [sorted((same_in_every_run(found) for found in report(run.stdout)), key=lambda r: r["launch"]["RANK"])
               for run in (fresh, ranks)]
    assert by_rank[0] == by_rank[1]  # argv, sys.path, folder, threads, environment, rank variables
    assert [found["launch"]["RANK"] for found in by_rank[1]] == ["0", "1"]
    assert all(found["preloaded"] for found in report(ranks.stdout))


# Each worker writes its pid in one write(): the workers share one pipe, and where PYTHONUNBUFFERED is set
# print() writes the number and the newline apart, so that two pids could run together ("2848528486\n\n").
PRINT_PID = 'os.write(1, f"{os.getpid()}\\n".encode())'

FAILING = f'''
import os, sys, time
{PRINT_PID}
if os.environ["RANK"] == "1":
    sys.exit(3)
time.sleep(60)
'''


def test_a_failing_rank_ends_the_others_at_once_and_gives_its_status(tmp_path):
    script = tmp_path / "failing.py"
    script.write_text(FAILING)
    began = time.time()
    result = run_ranks(script, [], dict(os.environ), tmp_path, timeout=120)
    assert time.time() - began < 30  # rank 0 ended by SIGTERM, not at the end of its 60 s sleep
    assert result.returncode == 3
    assert all(not Path(f"/proc/{pid}").exists() for pid in map(int, result.stdout.split()))


def test_ranks_past_their_timeout_are_all_killed(tmp_path):
    script = tmp_path / "sleeper.py"
    script.write_text(f"import os, time\n{PRINT_PID}\ntime.sleep(60)\n")
    began = time.time()
    with pytest.raises(subprocess.TimeoutExpired) as expired:
        run_ranks(script, [], dict(os.environ), tmp_path, timeout=3)
    assert time.time() - began < 30
    pids = [int(pid) for pid in expired.value.output.split()]
    assert len(pids) == 2 and all(not Path(f"/proc/{pid}").exists() for pid in pids)


WAITING = f'''
import os, sys, time
{PRINT_PID}
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
'''


@pytest.mark.slow  # a real torchrun: new interpreters
def test_the_processes_a_torchrun_agent_started_are_its_workers(tmp_path):
    script = tmp_path / "waiting.py"
    script.write_text(WAITING)
    go = tmp_path / "go"
    agent = ScriptProcess(torchrun_command(script, str(go)), tmp_path, dict(os.environ))
    try:
        deadline = time.time() + 120
        while len(agent.output_so_far()[0].split()) < 2:
            assert agent.poll() is None and time.time() < deadline, agent.output_so_far()
            time.sleep(0.05)
        assert agent.children() == children_of(agent.pid)
        assert sorted(agent.children()) == sorted(map(int, agent.output_so_far()[0].split()))
        go.touch()
        assert agent.wait(timeout=60) == 0
    finally:
        agent.kill()
