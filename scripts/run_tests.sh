#!/usr/bin/env bash
# Set up .venv and run the whole test suite (CPU; includes 2-process torchrun tests).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The linter first (ruff.toml: pyflakes, pycodestyle, import order, 120 columns): any finding fails the run.
.venv/bin/ruff check .
# The HTML pages are checked in headless Chromium. Where it is missing and we may install system
# packages (root with apt, e.g. CI), install it; otherwise those few tests are skipped with a reason.
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "run_tests: installing chromium for the HTML rendering tests"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "run_tests: could not install chromium; the HTML rendering tests will be skipped"
fi
# The suite starts ~140 Python processes (train.py and test.py runs, torchrun workers); where bytecode
# caching is off (PYTHONDONTWRITEBYTECODE, set on some machines), each compiled the project's modules anew.
unset PYTHONDONTWRITEBYTECODE
# -rs lists every skipped test with its reason; in CI (.ci/run) a skip fails (tests/skip_policy.py).
# Two pytest-xdist workers, a test file each at a time: much of the suite waits on subprocesses
# (interpreter start-up, torchrun rendezvous, file I/O), so two files share 2 cores well (18 -> 11 min
# on 2 cores). Arguments are passed on: `-n 0` runs in one process, `tests/test_cli.py` one file.
exec .venv/bin/python -m pytest tests -q -rs -n 2 --dist loadfile "$@"
