"""Runs each measurement in a fresh worker process (dev/bench_worker.py) and keeps its log."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.environment import ROOT, free_port, load_average

WORKER = ROOT / "dev" / "bench_worker.py"


class Runner:
    """Runs jobs (a spec dict each) in worker processes; results and logs go to OUT/logs/<name>.*.

    A job that fails, times out or writes no result gives {"error": ..., "log": ..., "spec": ...}
    instead of a result: the run goes on and reports it."""

    def __init__(self, out: Path, device: str, timeout_s: float, scratch: Path, threads: int | None = None,
                 resume: bool = False):
        self.out = out
        self.logs = out / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.device = device
        self.timeout_s = timeout_s
        self.scratch = scratch
        self.threads = threads  # compute threads of single-process jobs (None: torch's default)
        self.resume = resume  # reuse results already in logs/ for identical specs
        self.count = 0

    def run(self, name: str, spec: dict, nproc: int = 0, threads: int | None = None,
            compile_cache: str | None = None) -> dict:
        """Run one job (under torchrun with `nproc` processes if > 0); `compile_cache` names an
        inductor cache shared by the jobs that pass the same name (the first of them compiles
        cold, the others find the cache warm)."""
        self.count += 1
        spec = {"device": self.device, "checkpoints_dir": str(self.scratch / "checkpoints"), **spec}
        if self.threads and not nproc and not threads:
            threads = self.threads
            spec["threads"] = threads
        result_path, log_path = self.logs / f"{name}.json", self.logs / f"{name}.log"
        previous = self._earlier_result(result_path, spec)
        if previous is not None:
            print(f"  [{self.count}] {name}: kept from the earlier run (--resume)", flush=True)
            return previous
        result_path.unlink(missing_ok=True)
        print(f"  [{self.count}] {name} ...", end="", flush=True)
        started, load_before = time.perf_counter(), load_average()
        rc = self._execute(self._command(spec, result_path, nproc),
                           self._environment(spec, name, threads, compile_cache), log_path)
        wall = time.perf_counter() - started
        if rc == 0 and result_path.exists():
            result = json.loads(result_path.read_text())
            result["load_avg_start"] = load_before
            result_path.write_text(json.dumps(result, indent=1))  # with the load, for --resume
            done = f" {result['median_s']:.3f} s/step" if "median_s" in result else " done"
            print(done, f"({wall:.0f} s)", flush=True)
            return result
        tail = log_path.read_text(errors="replace").strip().splitlines()[-3:] if log_path.exists() else []
        error = f"exit {rc}: " + " | ".join(tail)
        print(f" FAILED ({error[:200]}); log: {log_path}", flush=True)
        return {"error": error, "log": str(log_path), "spec": spec}

    def _earlier_result(self, result_path: Path, spec: dict) -> dict | None:
        """With --resume, the finished result of an identical job from an earlier run."""
        if not (self.resume and result_path.exists()):
            return None
        try:
            previous = json.loads(result_path.read_text())
        except ValueError:
            return None
        return previous if previous.get("spec") == spec and "error" not in previous else None

    @staticmethod
    def _command(spec: dict, result_path: Path, nproc: int) -> list[str]:
        command = [sys.executable, str(WORKER), "--spec", json.dumps(spec), "--result", str(result_path)]
        if nproc:
            command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
                       f"--master_port={free_port()}", *command[1:]]
        return command

    def _environment(self, spec: dict, name: str, threads: int | None, compile_cache: str | None) -> dict:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if threads:
            env["OMP_NUM_THREADS"] = str(threads)
        if spec.get("compile"):  # a fresh cache: a cold compile, whatever ran on this machine before
            env["TORCHINDUCTOR_CACHE_DIR"] = str(self.scratch / f"inductor_{compile_cache or name}")
        return env

    def _execute(self, command: list[str], env: dict, log_path: Path) -> int | str:
        """The exit status of `command` (output to `log_path`), or "timeout"."""
        try:
            with open(log_path, "w") as log:
                return subprocess.run(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                      timeout=self.timeout_s).returncode
        except subprocess.TimeoutExpired:
            return "timeout"
