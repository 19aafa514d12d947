#!/usr/bin/env bash
# Create .venv (if missing) and install the project's dependencies into it.
# Re-running is cheap: the install is skipped while requirements files are unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
# The Python the project needs (README, environment.yml say the same): checked before anything is made.
PYTHON_FLOOR=3.10
interpreter=$([ -x .venv/bin/python ] && echo .venv/bin/python || echo "$PYTHON")
if ! "$interpreter" -c "import sys; sys.exit(sys.version_info < tuple(map(int, '$PYTHON_FLOOR'.split('.'))))" 2>/dev/null; then
  echo "setup: this project needs Python $PYTHON_FLOOR or newer, and $interpreter is $("$interpreter" --version 2>&1 || echo missing); run with PYTHON=python3.11 (or another $PYTHON_FLOOR+) after removing .venv if it is older." >&2
  exit 2
fi
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.requirements.sha
wanted=$(cat requirements.txt requirements-dev.txt | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ]; then
  echo "setup: .venv is up to date"
  exit 0
fi
# visdom is an sdist whose build needs pkg_resources, gone from setuptools>=81. A pip
# constraint reaches the isolated build environment; keep any constraints the machine has.
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
echo "setuptools<81" > "$constraints"
configured=$(.venv/bin/python -m pip config list 2>/dev/null | sed -n "s/^global.constraint='\(.*\)'$/\1/p")
for existing in ${PIP_CONSTRAINT:-} $configured; do
  [ -f "$existing" ] && cat "$existing" >> "$constraints"
done
echo "setup: installing requirements (first time: a few minutes, PyTorch is large)"
PIP_CONSTRAINT="$constraints" .venv/bin/python -m pip install --disable-pip-version-check -q --no-compile \
  -r requirements-dev.txt 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
# Bytecode for every installed module, on all cores (pip compiles on one: 30 s of the 90 on 2 cores).
# Not fatal: a few packages ship files for newer Pythons, which pip skips silently too.
site_packages=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
.venv/bin/python -m compileall -q -q -j 0 "$site_packages" || true
# visdom's page needs scripts its package lacks (docs/visualization.md); fetch them from the npm
# registry if it answers. Not fatal: the server starts without them and says how to install them.
.venv/bin/python scripts/visdom_server.py --install_scripts >/dev/null \
  || echo "setup: visdom's page scripts were not installed (above); its page stays blank until they are"
echo "$wanted" > "$stamp"
echo "setup: done"
