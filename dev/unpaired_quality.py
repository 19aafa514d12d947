"""Unpaired models side by side on the built-in unpaired demo task, over seeds: does each learn the
translation, and which learns it best for the same epochs?

    python dev/unpaired_quality.py --out /tmp/uq --models fastcut6,cycle_gan6,cut,fastcut,sb --seeds 0 1 2 \
        --size 64 --period 12.8 --epochs 8 8 --nfe 1 2 3 4 5 --jobs 1

Makes the demo's solid -> striped shapes (scripts/make_demo_dataset.py) at --size with stripes of
--period pixels, trains every recipe (RECIPES) with every seed by train.py (--jobs of them at a time: on a
GPU several share it; on a 2-core CPU keep 1), then scores each trained generator with
scripts/demo_report.py --texture_window (the stripes' period, rounded up): coarse_L1 and texture_L1 on the
held-out images against their true striped counterparts (util/evaluation/texture.py), beside the identity
and the untrained generator. --model sb is scored once per NFE (--num_timesteps at test time). Prints a
table of mean +- standard deviation over the seeds (and each seed's values) and writes OUT/quality.json.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import make_demo_dataset  # noqa: E402

# name -> train.py/test.py flags. The demo's recipes (6 residual blocks) and, at UNSB's depth (9 blocks),
# CUT, FastCUT and UNSB with its README's horse2zebra weights.
RECIPES = {
    "fastcut6": ["--model", "cut", "--CUT_mode", "FastCUT", "--netG", "resnet_6blocks", "--ngf", "32", "--ndf", "32"],
    "cut6": ["--model", "cut", "--CUT_mode", "CUT", "--netG", "resnet_6blocks", "--ngf", "32", "--ndf", "32"],
    "cycle_gan6": ["--model", "cycle_gan", "--netG", "resnet_6blocks", "--ngf", "32", "--ndf", "32"],
    "cut": ["--model", "cut", "--CUT_mode", "CUT", "--netG", "resnet_9blocks", "--ngf", "32", "--ndf", "32"],
    "fastcut": ["--model", "cut", "--CUT_mode", "FastCUT", "--netG", "resnet_9blocks", "--ngf", "32", "--ndf", "32"],
    "sb": ["--model", "sb", "--mode", "sb", "--lambda_SB", "1.0", "--lambda_NCE", "1.0", "--ngf", "32", "--ndf", "32"],
}
KEYS = ("coarse_L1", "texture_L1", "L1")


def run(command: list[str], log: Path, env: dict[str, str], timeout: float | None = None) -> tuple[int, float]:
    """Exit status (124 when stopped at `timeout` seconds) and wall seconds of `command`, its output in `log`."""
    start = time.perf_counter()
    with open(log, "w") as out:
        try:
            code = subprocess.call(command, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            code = 124
    return code, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--models", default="fastcut6,cycle_gan6")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--period", type=float, default=0.0, help="stripe period in px (0: the demo's)")
    parser.add_argument("--n_train", type=int, default=100, help="images per domain")
    parser.add_argument("--n_test", type=int, default=20)
    parser.add_argument("--epochs", type=int, nargs=2, default=[8, 8], help="--n_epochs --n_epochs_decay")
    parser.add_argument("--batch_size", type=int, default=2)
    parser.add_argument("--nfe", type=int, nargs="+", default=[1, 2, 3, 4, 5], help="sb: steps at test time")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--threads", type=int, default=0, help="OMP threads per job (0: as set)")
    parser.add_argument("--extra", default="", help="more train.py flags for every run")
    parser.add_argument("--train_timeout", type=float, default=None,
                        help="stop a training after this many seconds and score its latest checkpoint")
    args = parser.parse_args()
    period = args.period or make_demo_dataset.stripe_period(args.size)
    data = make_demo_dataset.make_cyclegan_demo(args.out / "data", args.size, 0, args.n_train, args.n_test, period)
    pairs = make_demo_dataset.make_cyclegan_pairs(args.out / "data", args.size, 0, args.n_test, period)
    window = math.ceil(period)
    env = dict(os.environ)
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    (args.out / "logs").mkdir(parents=True, exist_ok=True)
    runs = [(model, seed) for model in args.models.split(",") for seed in args.seeds]
    size = ["--load_size", str(args.size), "--crop_size", str(args.size)]

    def train(model: str, seed: int) -> dict:
        name = f"{model}_s{seed}"
        command = [sys.executable, "train.py", "--dataroot", str(data), "--name", name, "--checkpoints_dir",
                   str(args.out / "checkpoints"), *RECIPES[model], *size, "--seed", str(seed),
                   "--n_epochs", str(args.epochs[0]), "--n_epochs_decay", str(args.epochs[1]),
                   "--batch_size", str(args.batch_size), "--display_id", "0", "--print_freq", "100000",
                   "--num_threads", "0", *args.extra.split()]
        code, seconds = run(command, args.out / "logs" / f"train_{name}.log", env, args.train_timeout)
        return {"model": model, "seed": seed, "train_rc": code, "train_s": round(seconds, 1)}

    def score(result: dict, nfe: int | None) -> dict:
        name = f"{result['model']}_s{result['seed']}"
        tag = f"{name}_nfe{nfe}" if nfe else name
        results_dir = args.out / "results" / tag
        command = [sys.executable, "scripts/demo_report.py", "--texture_window", str(window), "--dataroot", str(pairs),
                   "--dataset_mode", "aligned", "--num_test", str(args.n_test), "--name", name, "--checkpoints_dir",
                   str(args.out / "checkpoints"), "--results_dir", str(results_dir), *RECIPES[result["model"]], *size,
                   "--seed", str(result["seed"]), "--device", "cpu", *(["--num_timesteps", str(nfe)] if nfe else [])]
        code, _ = run(command, args.out / "logs" / f"score_{tag}.log", {**env, "CUDA_VISIBLE_DEVICES": ""})
        report = results_dir / name / "test_latest" / "demo_report.json"
        table = json.loads(report.read_text()) if report.exists() else {}
        return {**result, "nfe": nfe, "score_rc": code, "table": table}

    with ThreadPoolExecutor(args.jobs) as pool:
        trained = list(pool.map(lambda r: train(*r), runs))
        scoring = [(r, nfe) for r in trained for nfe in (args.nfe if r["model"] == "sb" else [None])]
        scored = list(pool.map(lambda s: score(*s), scoring))
    (args.out / "quality.json").write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                                         "window": window, "period": period, "runs": scored}, indent=1))
    print_table(args, scored, period, window)
    return 0


def print_table(args: argparse.Namespace, scored: list[dict], period: float, window: int) -> None:
    """Mean +- standard deviation over the seeds of each model (each NFE for sb), its seeds below it."""
    print(f"unpaired demo, {args.size} px, stripes every {period:g} px, window {window}; "
          f"{args.epochs[0]}+{args.epochs[1]} epochs, batch {args.batch_size}; {len(args.seeds)} seeds, mean +- sd")
    print(f"{'model':<22}" + "".join(f"{k:>22}" for k in KEYS) + f"{'train s':>10}  beats both (seeds)")
    rows: dict[str, list[dict]] = {}
    for result in scored:
        label = result["model"] + (f" NFE {result['nfe']}" if result["nfe"] else "")
        rows.setdefault(label, []).append(result)
    for baseline in ("identity", "untrained"):
        first = next(iter(rows.values()))
        values = {k: [r["table"][baseline][k] for r in first if r["table"]] for k in KEYS}
        print(f"{baseline + ' (' + first[0]['model'] + ')':<22}" + "".join(_cell(values[k]) for k in KEYS))
    for label, results in rows.items():
        ok = [r for r in results if r["table"]]
        values = {k: [r["table"]["trained"][k] for r in ok] for k in KEYS}
        beats = sum(all(r["table"]["trained"][k] < min(r["table"]["identity"][k], r["table"]["untrained"][k])
                        for k in KEYS[:2]) for r in ok)
        seconds = statistics.mean(r["train_s"] for r in results)
        print(f"{label:<22}" + "".join(_cell(values[k]) for k in KEYS) + f"{seconds:>10.0f}  {beats}/{len(results)}"
              + ("" if len(ok) == len(results) else f" ({len(results) - len(ok)} failed: see {args.out}/logs)")
              + "".join(f" (seed {r['seed']} stopped at the timeout)" for r in results if r["train_rc"] == 124))
        for r in ok:
            print(f"{'  seed ' + str(r['seed']):<22}" + "".join(f"{r['table']['trained'][k]:>22.4f}" for k in KEYS))


def _cell(values: list[float]) -> str:
    if not values:
        return f"{'-':>22}"
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):>13.4f} +- {spread:.4f}"


if __name__ == "__main__":
    sys.exit(main())
