"""Does a larger global batch train as well per image? Each model on a demo task with held-out ground truth,
at global batch 1, 4 and 8 for the same number of images, under each learning-rate rule, over seeds.

    python dev/batch_recipe.py --out /tmp/batch_recipe                    # the table in docs/distributed.md
    python dev/batch_recipe.py --out /tmp/batch_recipe --tasks pix2pix --batches 8 --rules sqrt --seeds 1

Tasks: pix2pix on the paired demo (label maps -> rendered scenes, scripts/make_demo_dataset.py), CycleGAN and
CUT on the unpaired scenes demo (label maps and renders of different scenes; the held-out scenes are scored
against their true renders). Rules (train.py's flags, docs/distributed.md "More GPUs, the same quality
sooner"): none (the reference's rate at every batch), linear and sqrt (--scale_lr), each optionally with
--warmup_epochs (`+warmup`). Every run trains --epochs epochs (half at the full rate, half decaying, the
reference's schedule) of the same images, so each batch sees the same images; batch 1 runs once per seed (every
rule is the same there). The global batch is one process's --batch_size: N processes with batch b train what
one process with batch N x b trains (tests/test_distributed.py), so this measures their recipe too.

Scores: L1 (in the networks' [-1, 1] units, lower is better) and PSNR of 8-bit outputs on the held-out pairs,
as mean +- standard deviation over the seeds; a cell is "within" when its mean lies within batch 1's mean +- 1
sd. Runs go --jobs at a time (one thread each); finished runs are reused (`<run>.done`), so an interrupted
experiment continues, and one cell is one command (`--tasks T --batches B --rules R`). Writes OUT/results.md
and OUT/results.json (every run's scores and seconds).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))  # make_demo_dataset
sys.path.insert(0, str(ROOT / "dev"))  # small_data_experiment

import make_demo_dataset as demo  # noqa: E402
from models.inference.translator import Translator  # noqa: E402
from small_data_experiment import train  # noqa: E402  (one trainer of experiment runs, finished ones reused)
from util.evaluation.metrics import TranslationMetrics  # noqa: E402
from util.flag_types import OneParagraphParser, positive_int  # noqa: E402

MODELS = {  # task -> (dataset, train.py flags): the demos' (scripts/demo.sh), narrower (--ngf, --ndf)
    "pix2pix": ("pix2pix", ["--model", "pix2pix", "--netG", "unet_128"]),
    "cycle_gan": ("scenes", ["--model", "cycle_gan", "--netG", "resnet_6blocks"]),
    "cut": ("scenes", ["--model", "cut", "--CUT_mode", "CUT", "--netG", "resnet_6blocks"]),
}
SIZES = {"pix2pix": 128, "scenes": 64}  # the demos' image sides (unet_128 takes 128 px)
RULES = ("none", "sqrt", "linear", "sqrt+warmup", "linear+warmup")


def rule_flags(rule: str, warmup_epochs: float) -> list[str]:
    scaling, _, warm = rule.partition("+")
    flags = [] if scaling == "none" else ["--scale_lr", scaling]
    return flags + (["--warmup_epochs", f"{warmup_epochs:g}"] if warm else [])


def make_data(out: Path, n_train: int, n_test: int) -> dict[str, Path]:
    """The paired demo (train and test pairs) and the unpaired scenes demo (trainA/trainB, test pairs)."""
    return {"pix2pix": demo.make_pix2pix_demo(out / "data", SIZES["pix2pix"], 0, n_train, 2, n_test),
            "scenes": demo.make_scenes_demo(out / "data", SIZES["scenes"], 0, n_train, n_test)}


def run_name(task: str, batch: int, rule: str, seed: int) -> str:
    return f"{task}-b{batch}-{rule}-seed{seed}"


def train_args(data: Path, out: Path, task: str, batch: int, rule: str, seed: int, args: argparse.Namespace
               ) -> list[str]:
    half, size = args.epochs // 2, SIZES[MODELS[task][0]]
    return ["--dataroot", str(data), "--checkpoints_dir", str(out / "runs"),
            "--name", run_name(task, batch, rule, seed), *MODELS[task][1], *rule_flags(rule, args.warmup_epochs),
            "--batch_size", str(batch),
            "--ngf", str(args.ngf), "--ndf", str(args.ndf), "--load_size", str(size), "--crop_size", str(size),
            "--n_epochs", str(half), "--n_epochs_decay", str(args.epochs - half), "--seed", str(seed),
            "--display_id", "0", "--num_threads", "0", "--no_html", "--no_progress", "--print_freq", "0",
            "--save_latest_freq", "0", "--save_epoch_freq", str(args.epochs)]


def held_out_pairs(data: Path) -> list[tuple[np.ndarray, np.ndarray]]:
    """(input, true target) of each aligned image A | B in `data`/test."""
    pairs = []
    for path in sorted((data / "test").glob("*.png")):
        image = np.asarray(Image.open(path).convert("RGB"))
        half = image.shape[1] // 2
        pairs.append((image[:, :half], image[:, half:]))
    return pairs


def score(run_dir: Path, pairs: list[tuple[np.ndarray, np.ndarray]]) -> dict[str, float]:
    """L1 and PSNR of the run's generator (A -> B) on the held-out pairs, as test.py translates by default (the
    networks in training mode: batch norm by each image's statistics, dropout drawn from seed 0), and as
    `test.py --eval` does (`_eval`; the same for instance-norm networks without dropout)."""
    scores = {}
    for eval_mode, suffix in ((False, ""), (True, "_eval")):
        translator = Translator.load(run_dir, device="cpu", eval_mode=eval_mode, seed=0)
        metrics = TranslationMetrics({"": ("output", "target")})
        for source, target in pairs:
            metrics.update({"output": tensor(translator.translate(source)), "target": tensor(target)})
        scores.update({key + suffix: value for key, value in metrics.compute().items() if key in ("L1", "PSNR")})
    return scores


def tensor(image: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(image.astype(np.float32)).permute(2, 0, 1)[None] / 127.5 - 1


def summary(values: list[float], digits: int) -> str:
    spread = f" ± {statistics.stdev(values):.{digits}f}" if len(values) > 1 else ""
    return f"{statistics.mean(values):.{digits}f}{spread}"


def table(results: dict[tuple[str, int, str], list[dict[str, float]]]) -> str:
    """Markdown: task, batch, rule, L1 and PSNR (mean +- sd over seeds), whether L1 is within batch 1's spread."""
    lines = ["| task | global batch | rule | L1 (lower better) | PSNR dB | within batch 1's L1 ± 1 sd | L1 with --eval "
             "| seeds |", "|---|---|---|---|---|---|---|---|"]
    for (task, batch, rule), runs in results.items():
        l1 = [run["L1"] for run in runs]
        base = results.get((task, 1, "none"), [])
        within = ""
        if batch != 1 and len(base) > 1:
            mean, sd = statistics.mean(run["L1"] for run in base), statistics.stdev(run["L1"] for run in base)
            within = "yes" if statistics.mean(l1) <= mean + sd else "no"
        lines.append(f"| {task} | {batch} | {rule} | {summary(l1, 4)} | {summary([run['PSNR'] for run in runs], 2)} | "
                     f"{within} | {summary([run['L1_eval'] for run in runs], 4)} | {len(runs)} |")
    return "\n".join(lines)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = OneParagraphParser(description=__doc__.split("\n\n")[0], allow_abbrev=False,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="folder for the data, the runs and results.md")
    parser.add_argument("--tasks", default="pix2pix,cycle_gan,cut", help="comma-separated: " + ", ".join(MODELS))
    parser.add_argument("--batches", type=positive_int, nargs="+", default=[1, 4, 8], help="global batches")
    parser.add_argument("--rules", default=",".join(RULES), help="comma-separated: " + ", ".join(RULES))
    parser.add_argument("--seeds", type=positive_int, default=3, help="seeds 0 to N - 1 per cell")
    parser.add_argument("--n_train", type=positive_int, default=100, help="training images (per domain unpaired)")
    parser.add_argument("--n_test", type=positive_int, default=20, help="held-out pairs scored")
    parser.add_argument("--epochs", type=positive_int, default=8, help="half at the full rate, half decaying")
    parser.add_argument("--warmup_epochs", type=float, default=1.0, help="the warm-up of the +warmup rules")
    parser.add_argument("--ngf", type=positive_int, default=16)
    parser.add_argument("--ndf", type=positive_int, default=16)
    parser.add_argument("--jobs", type=positive_int, default=2, help="runs trained at once (one thread each)")
    args = parser.parse_args(argv)
    for task in args.tasks.split(","):
        if task not in MODELS:
            parser.error(f"argument --tasks: {task} is not a task; choose from {', '.join(MODELS)}")
    for rule in args.rules.split(","):
        if rule not in RULES:
            parser.error(f"argument --rules: {rule} is not a rule; choose from {', '.join(RULES)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    out = Path(args.out).resolve()
    data = make_data(out, args.n_train, args.n_test)
    cells = [(task, batch, rule) for task in args.tasks.split(",") for batch in args.batches
             for rule in (["none"] if batch == 1 else args.rules.split(","))]
    jobs = [(*cell, seed) for cell in cells for seed in range(args.seeds)]
    commands = {job: train_args(data[MODELS[job[0]][0]], out, *job, args) for job in jobs}
    started = time.time()
    with ThreadPoolExecutor(args.jobs) as pool:
        seconds = dict(zip(jobs, pool.map(lambda job: train(commands[job], out / "runs" / run_name(*job)), jobs)))
    torch.set_num_threads(1)
    results: dict[tuple[str, int, str], list[dict[str, float]]] = {}
    record = []
    for job in jobs:
        scores = score(out / "runs" / run_name(*job), held_out_pairs(data[MODELS[job[0]][0]]))
        results.setdefault(job[:3], []).append(scores)
        record.append({"task": job[0], "batch": job[1], "rule": job[2], "seed": job[3], **scores,
                       "train_seconds": round(seconds[job], 1)})
    report = (f"{table(results)}\n\n{args.n_train} training images (pix2pix {SIZES['pix2pix']} px; unpaired "
              f"{SIZES['scenes']} px, per domain), {args.epochs} epochs ({args.epochs * args.n_train} images seen "
              f"per run), --ngf {args.ngf} --ndf {args.ndf}, warm-up {args.warmup_epochs:g} epoch(s), "
              f"{args.n_test} held-out pairs, seeds 0-{args.seeds - 1}; {time.time() - started:.0f} s wall "
              f"({args.jobs} runs at once, one thread each; runs trained before are reused).\n")
    (out / "results.md").write_text(report)
    (out / "results.json").write_text(json.dumps(record, indent=1))
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
