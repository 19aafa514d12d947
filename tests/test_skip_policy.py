"""CI runs every test: where .ci/run sets IMG2IMG_FAIL_ON_SKIP, a skipped test fails, except one
marked gpu; an expected failure is still no failure. Checked on a small throwaway test file run
by pytest with the suite's own hooks (tests/skip_policy.py)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from skip_policy import FAIL_ON_SKIP

SAMPLE = '''
import pytest

def test_skipped_inside():
    pytest.skip("no frobnicator")

@pytest.mark.skipif(True, reason="no chromium")
def test_skipped_by_marker():
    pass

@pytest.mark.gpu
def test_needs_a_gpu():
    pytest.skip("no CUDA GPU")

@pytest.mark.xfail(reason="known bug")
def test_known_bug():
    assert False

def test_plain():
    pass
'''
MODULE_SKIPPED = 'import pytest\npytest.importorskip("no_such_package_here")\n\ndef test_never_collected():\n    pass\n'


def run_sample(tmp_path: Path, ci: bool, workers: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """pytest -rA (a summary line per test) on the sample files, with or without the CI variable,
    in one process or with pytest-xdist's `workers` flags (as scripts/run_tests.sh runs the suite)."""
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    (tmp_path / "test_module_skipped.py").write_text(MODULE_SKIPPED)
    env = {k: v for k, v in os.environ.items() if k != FAIL_ON_SKIP}
    if ci:
        env[FAIL_ON_SKIP] = "1"
    env["PYTHONPATH"] = str(Path(__file__).parent)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "skip_policy", "-p", "no:cacheprovider", "-rA",
                           "-o", "markers=gpu: needs a GPU", *workers, str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def summary(result: subprocess.CompletedProcess) -> set[str]:
    """The summary lines, shortened to outcome and test (or skip reason)."""
    lines = re.findall(r"^(PASSED|FAILED|ERROR|XFAIL) (test_\S+?)(?: - .*|: .*)?$", result.stdout, re.M)
    skips = re.findall(r"^SKIPPED \[1\] \S+: (.*)$", result.stdout, re.M)
    return {f"{outcome} {test}" for outcome, test in lines} | {f"SKIPPED {reason}" for reason in skips}


def test_outside_ci_skips_stay_skips(tmp_path):
    result = run_sample(tmp_path, ci=False)
    assert summary(result) == {
        "SKIPPED no frobnicator", "SKIPPED no chromium", "SKIPPED no CUDA GPU",
        "SKIPPED could not import 'no_such_package_here': No module named 'no_such_package_here'",
        "XFAIL test_sample.py::test_known_bug", "PASSED test_sample.py::test_plain"}, result.stdout
    assert result.returncode == 0


@pytest.mark.parametrize("workers", [(), ("-n", "2", "--dist", "loadfile")], ids=["one_process", "xdist"])
def test_in_ci_every_skip_but_a_gpu_one_fails(tmp_path, workers):
    result = run_sample(tmp_path, ci=True, workers=workers)
    assert summary(result) == {
        "FAILED test_sample.py::test_skipped_inside", "ERROR test_sample.py::test_skipped_by_marker",  # at setup
        "SKIPPED no CUDA GPU",
        "SKIPPED could not import 'no_such_package_here': No module named 'no_such_package_here'",
        "FAILED test_module_skipped.py",  # no test to fail: reported at the end, and the run fails
        "XFAIL test_sample.py::test_known_bug", "PASSED test_sample.py::test_plain"}, result.stdout
    assert result.returncode == 1
