"""One benchmark measurement in this process, for dev/benchmark.py (which starts one per job).

    python dev/bench_worker.py --spec '{"kind": "step", "model": "pix2pix", ...}' --result out.json
    python -m torch.distributed.run --nproc_per_node=2 dev/bench_worker.py --spec '{"kind": "ddp", ...}' ...

Kinds of job (the `kind` key of the spec):

  peaks  the device's conv (3x3, 256->256 channels, 64x64) and matmul FLOP/s in fp32 and bf16
         (plus fp16 on CUDA), forward only, best of contiguous and channels-last layouts;
  step   `model.optimize_parameters()` on synthetic tensors (no data loading);
  loop   the training loop of train.py with real images from --dataroot and the default
         --num_threads loader workers, timing how long each step waits for its batch;
  ddp    the synthetic step under torchrun (DDP); run without torchrun it is the one-rank
         baseline of the weak-scaling measurement (same code, no DDP).

Every job runs in a fresh process, so its peak memory (RSS on the CPU, which only grows) belongs
to one configuration. The result is one JSON object written to --result.
The jobs are in dev/bench/jobs.py.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "dev"):  # the project, and dev/bench when imported by the tests
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from bench.jobs import JOBS  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--spec", required=True, help="the job, as a JSON object")
    parser.add_argument("--result", required=True, help="where to write the result (JSON)")
    args = parser.parse_args(argv)
    spec = json.loads(args.spec)
    started = time.perf_counter()
    result = JOBS[spec["kind"]](spec)
    if result:  # non-main DDP ranks return nothing
        result["job_wall_s"] = time.perf_counter() - started
        result["spec"] = spec
        Path(args.result).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
