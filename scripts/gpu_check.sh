#!/usr/bin/env bash
# Prove and measure the CUDA path on a machine with an NVIDIA GPU, from a plain checkout (docs/gpu.md).
#
#   bash scripts/gpu_check.sh                 # the GPU tests, then the benchmark
#   bash scripts/gpu_check.sh tests [ARGS]    # only tests/test_gpu.py; ARGS go to pytest (e.g. -k cycle_gan)
#   bash scripts/gpu_check.sh bench [ARGS]    # only dev/benchmark.py --device cuda; ARGS go to it
#                                             # (e.g. --quick, --sections step, --resume after a cut)
#   bash scripts/gpu_check.sh --reference REF compare
#                                             # the reference's train.py and ours side by side on this GPU
#                                             # (dev/compare_reference.py): CycleGAN and pix2pix, 256 px, batch 1
#                                             # (our default flags and --compile --fused_adam) and batch 8 (default
#                                             # flags, --amp bf16, and --amp bf16 --channels_last), in alternating rounds
# Options (before the mode): --out DIR (default gpu_check_out), --wheels DIR (or $IMG2IMG_WHEELS),
# --reference DIR (or $IMG2IMG_REFERENCE: a checkout of junyanz/pytorch-CycleGAN-and-pix2pix, for compare),
# --workers N (pytest processes sharing the GPU; default half the cores, at most 8, where pytest-xdist is
# installed, else 1: on one H200, 8 workers ran in 3 min tests whose durations add up to 18).
#
# Needs Python (python3, or $PYTHON) with a CUDA build of torch, torchvision, numpy, Pillow and
# pytest, and a C compiler for torch.compile; no network. dominate (the HTML pages) and visdom
# are not needed: without dominate, test.py writes its images without a page, with a warning.
# Packages missing here are installed from a folder of wheels when one is given (`pip download
# dominate pytest -d wheels/` on a machine with a network), into OUT/site-packages: the Python
# environment itself is not changed.
# Without a GPU it says so and exits 0, running nothing.
set -uo pipefail
cd "$(dirname "$0")/.."

out=gpu_check_out
wheels=${IMG2IMG_WHEELS:-}
reference=${IMG2IMG_REFERENCE:-}
workers=auto
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --wheels) wheels=$2; shift 2 ;;
    --reference) reference=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    *) break ;;
  esac
done
mode=${1:-all}
[ $# -gt 0 ] && shift
case "$mode" in
  tests|bench) ;;
  compare)
    [ -n "$reference" ] && [ -f "$reference/train.py" ] || {
      echo "gpu_check: compare needs --reference DIR (or IMG2IMG_REFERENCE), a checkout of the reference" \
           "(junyanz/pytorch-CycleGAN-and-pix2pix) holding its train.py; got '${reference}'" >&2; exit 2; } ;;
  all) [ $# = 0 ] || { echo "gpu_check: extra arguments need a mode: tests ARGS (pytest) or bench ARGS (benchmark.py)" >&2; exit 2; } ;;
  *) echo "gpu_check: unknown mode '$mode' (all, tests, bench or compare; options --out DIR --wheels DIR" \
          "--reference DIR first)" >&2; exit 2 ;;
esac

case "$workers" in
  auto) ;;
  ''|*[!0-9]*|0) echo "gpu_check: --workers takes a whole number of pytest processes, 1 or more (got '$workers')" >&2; exit 2 ;;
esac

if [ -n "${PYTHON:-}" ]; then python=$PYTHON
elif [ -x .venv/bin/python ]; then python=.venv/bin/python
else python=$(command -v python3 || command -v python || true)
fi
if [ -z "$python" ] || ! "$python" -c "import torch" 2>/dev/null; then
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "gpu_check: no NVIDIA GPU here (no nvidia-smi) and no PyTorch: nothing to check."
    exit 0
  fi
  echo "gpu_check: '${python:-python3}' cannot import torch. Install a CUDA build of PyTorch (requirements.txt)" \
       "or point PYTHON at a Python that has one." >&2
  exit 1
fi
if ! "$python" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "gpu_check: PyTorch $("$python" -c 'import torch; print(torch.__version__)') sees no CUDA GPU" \
       "(torch.cuda.is_available() is False): nothing to check. Run this on a machine with an NVIDIA GPU."
  exit 0
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
# where missing packages are installed from --wheels (by this check or an earlier one of this folder)
export PYTHONPATH="$out/site-packages${PYTHONPATH:+:$PYTHONPATH}"
# module:package pairs; the first group is needed, the second only makes the output complete
required="torch:torch torchvision:torchvision numpy:numpy PIL:Pillow pytest:pytest"
optional="dominate:dominate matplotlib:matplotlib tqdm:tqdm nibabel:nibabel monai:monai fastapi:fastapi uvicorn:uvicorn multipart:python-multipart"
missing() {
  for pair in $1; do "$python" -c "import ${pair%%:*}" 2>/dev/null || printf '%s ' "${pair#*:}"; done
}
need=$(missing "$required")
nice_to_have=$(missing "$optional")
if [ -n "$need$nice_to_have" ] && [ -n "$wheels" ]; then
  echo "gpu_check: installing ${need}${nice_to_have}from $wheels into $out/site-packages (no network)"
  # one by one: a package without a wheel in the folder must not keep the others out. --target ignores
  # what the environment has, so a package whose dependencies the folder lacks (nibabel's numpy, say)
  # is installed alone, its dependencies taken from the environment
  install=("$python" -m pip install --quiet --no-index --find-links "$wheels" --target "$out/site-packages")
  for package in $need $nice_to_have; do
    "${install[@]}" "$package" 2>/dev/null || "${install[@]}" --no-deps "$package" \
      || echo "gpu_check: no usable wheel for $package in $wheels" >&2
  done
  need=$(missing "$required")
  nice_to_have=$(missing "$optional")
fi
"$python" - <<'EOF'
import platform, torch
props = torch.cuda.get_device_properties(0)
print(f"gpu_check: Python {platform.python_version()}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
      f"{torch.cuda.device_count()} x {props.name} ({props.total_memory / 2**30:.0f} GiB)")
EOF
if [ -n "$need" ]; then
  echo "gpu_check: missing, needed: $need- install them, or pass --wheels DIR holding their wheels" \
       "(pip download $need-d DIR on a machine with a network)." >&2
  exit 1
fi
[ -n "$nice_to_have" ] && echo "gpu_check: not installed, not needed: $nice_to_have(no HTML pages / loss plots / progress bars / volume checks)"
command -v gcc >/dev/null 2>&1 || command -v cc >/dev/null 2>&1 \
  || echo "gpu_check: no C compiler (gcc, cc): torch.compile cannot work, so the --compile checks will fail" >&2

status=0
if [ "$mode" = compare ]; then
  # batch 1, the reference's default: the launch-bound step (our default flags, and the fast path's CUDA graphs);
  # batch 8: the GPU's arithmetic (bf16 and channels-last). Data loaded by 4 processes, as users run both.
  common=(--reference "$reference" --models cycle_gan,pix2pix --num_threads 4)
  # Batch 8 first: no compiling, about 2.5 minutes on an H100 (2 min 24 s with two of our configurations);
  # batch 1 then takes about 7 (its fast runs compile, 1-2 minutes each with an empty inductor cache).
  echo "gpu_check: dev/compare_reference.py -> $out/compare_batch8, $out/compare_batch1"
  "$python" dev/compare_reference.py "${common[@]}" --out "$out/compare_batch8" --batch_size 8 --images 160 \
    --print_freq 40 --rounds 1 --ours default: --ours "bf16:--amp bf16" \
    --ours "bf16_channels_last:--amp bf16 --channels_last" "$@" 2>&1 \
    | tee "$out/compare_batch8.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  "$python" dev/compare_reference.py "${common[@]}" --out "$out/compare_batch1" --batch_size 1 --images 80 \
    --print_freq 20 --rounds 2 --ours default: --ours "fast:--compile --fused_adam" "$@" 2>&1 \
    | tee "$out/compare_batch1.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  echo "gpu_check: the tables are in $out/compare_batch8/compare.md and $out/compare_batch1/compare.md"
  echo "gpu_check: $([ $status = 0 ] && echo passed || echo FAILED); logs in $out"
  exit $status
fi
if [ "$mode" != bench ]; then
  have_xdist=no
  "$python" -c "import xdist" 2>/dev/null && have_xdist=yes
  if [ "$workers" = auto ]; then
    half=$(( $(nproc 2>/dev/null || echo 2) / 2 ))
    workers=1
    [ "$have_xdist" = yes ] && workers=$(( half > 8 ? 8 : (half < 1 ? 1 : half) ))
  fi
  parallel=()
  if [ "$workers" -gt 1 ]; then
    [ "$have_xdist" = yes ] || { echo "gpu_check: --workers $workers needs pytest-xdist (pip install pytest-xdist)" >&2; exit 2; }
    parallel=(-n "$workers")
  fi
  echo "gpu_check: tests/test_gpu.py (${workers} pytest process(es)) -> $out/gpu_tests.log, $out/gpu_tests.xml"
  "$python" -m pytest -m gpu -rs -p no:cacheprovider tests/test_gpu.py "${parallel[@]}" --junitxml "$out/gpu_tests.xml" "$@" \
    2>&1 | tee "$out/gpu_tests.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
if [ "$mode" != tests ]; then
  echo "gpu_check: dev/benchmark.py --device cuda -> $out/benchmark/"
  "$python" dev/benchmark.py --device cuda --out "$out/benchmark" "$@" 2>&1 | tee "$out/benchmark.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  echo "gpu_check: the tables are in $out/benchmark/benchmark.md (all numbers in benchmark.json);" \
       "copy them into docs/benchmarks.md under 'On a GPU', with the machine line above."
fi
echo "gpu_check: $([ $status = 0 ] && echo passed || echo FAILED); logs in $out"
exit $status
