"""Does discriminator augmentation help on a small dataset? Train pix2pix and CycleGAN on a few dozen
demo images with and without --diff_augment (and with --ada_target), several seeds each, and score
the generators on held-out images whose right answer is known.

    python dev/small_data_experiment.py --out /tmp/small_data            # the table in docs/training_tips.md
    python dev/small_data_experiment.py --out /tmp/small_data --seeds 5 --size 64 --epochs 60

pix2pix: label maps -> rendered scenes (scripts/make_demo_dataset.py), scored on the test split's
targets. CycleGAN: solid <-> striped shapes, trained unpaired; held-out striped scenes are rendered
together with their solid counterparts (the same shapes and colours, without stripes), and G_B
(striped -> solid) is scored against them: removing stripes has one right answer, adding them does
not (their phase and direction are random). Scores: L1 (lower is better), PSNR and SSIM (higher is
better) of 8-bit outputs, as mean +- standard deviation over the seeds. Runs go `--jobs` at a time
(one thread each); finished runs are reused, so an interrupted experiment continues.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
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

import make_demo_dataset as demo  # noqa: E402
from models.inference.translator import Translator  # noqa: E402
from util.evaluation.metrics import TranslationMetrics  # noqa: E402
from util.flag_types import OneParagraphParser, positive_int  # noqa: E402

POLICY = "color,translation,cutout"
VARIANTS = {
    "no augmentation": [],
    f"--diff_augment {POLICY}": ["--diff_augment", POLICY],
    "+ --ada_target 0.6": ["--diff_augment", POLICY, "--ada_target", "0.6", "--ada_kimg", "0.5"],
}
MODELS = {
    "pix2pix": ["--model", "pix2pix", "--netG", "resnet_6blocks", "--norm", "instance"],
    "cycle_gan": ["--model", "cycle_gan", "--netG", "resnet_6blocks", "--pool_size", "10"],
}


def paired_cyclegan_scene(rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
    """One held-out CycleGAN scene drawn as the demo draws domain B, as (solid, striped): the same
    shapes and colours, with and without the stripes."""
    yy, xx = demo._grid(size)
    solid = np.empty((size, size, 3), np.float32)
    solid[:] = demo.CG_BACKGROUNDS[int(rng.integers(len(demo.CG_BACKGROUNDS)))]
    striped = solid.copy()
    period = max(4.0, size / 10)
    for _ in range(int(rng.integers(1, 4))):
        mask = demo._shape_mask(rng, int(rng.integers(1, 4)), size, scale=1.4)
        colour = demo.CG_SHAPE_COLORS[int(rng.integers(len(demo.CG_SHAPE_COLORS)))]
        solid[mask], striped[mask] = colour, colour
        wy, wx = [(1, 0), (0, 1), (0.7, 0.7), (0.7, -0.7)][int(rng.integers(4))]
        dark = ((wy * yy + wx * xx + rng.uniform(0, period)) % period) < period / 2
        striped[mask & dark] = demo.STRIPE_COLOR
    return solid.astype(np.uint8), striped.astype(np.uint8)


def make_data(out: Path, size: int, n_train: int, n_test: int) -> dict[str, Path]:
    """The two small training sets and the held-out (input, target) pairs of each model."""
    pix = demo.make_pix2pix_demo(out / "data", size, 0, n_train, 1, n_test)
    cyc = demo.make_cyclegan_demo(out / "data", size, 0, n_train, 1)
    rng = np.random.default_rng(2021)
    held_out = [paired_cyclegan_scene(rng, size) for _ in range(n_test)]
    aligned = [np.asarray(Image.open(path).convert("RGB")) for path in sorted((pix / "test").glob("*.png"))]
    pairs = {"pix2pix": [(image[:, :size], image[:, size:]) for image in aligned],
             "cycle_gan": [(striped, solid) for solid, striped in held_out]}
    return {"pix2pix": pix, "cycle_gan": cyc, "pairs": pairs}


def train_args(data: Path, out: Path, model: str, variant: str, seed: int, args: argparse.Namespace) -> list[str]:
    name = f"{model}-{list(VARIANTS).index(variant)}-seed{seed}"
    return ["--dataroot", str(data), "--checkpoints_dir", str(out / "runs"), "--name", name, *MODELS[model],
            *VARIANTS[variant], "--ngf", str(args.ngf), "--ndf", str(args.ndf), "--load_size", str(args.size),
            "--crop_size", str(args.size), "--n_epochs", str(args.epochs // 2), "--n_epochs_decay",
            str(args.epochs - args.epochs // 2), "--seed", str(seed), "--display_id", "0", "--num_threads", "0",
            "--no_html", "--no_progress", "--print_freq", "0", "--save_latest_freq", "0",
            "--save_epoch_freq", str(args.epochs)]


def train(command_args: list[str], run_dir: Path) -> float:
    """Train one run (skipped if it finished before: `<name>.done` beside it, which records its seconds); its wall
    time in seconds. dev/batch_recipe.py trains its runs with it too."""
    done = run_dir.parent / f"{run_dir.name}.done"
    if done.exists():
        return float(done.read_text().split()[0])
    start = time.time()
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    result = subprocess.run([sys.executable, str(ROOT / "train.py"), *command_args], cwd=ROOT, capture_output=True,
                            text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    (run_dir.parent / f"{run_dir.name}.log").write_text(result.stdout + result.stderr)
    if result.returncode != 0:
        raise RuntimeError(f"{run_dir.name} failed:\n{result.stderr[-3000:]}")
    seconds = time.time() - start
    done.write_text(f"{seconds:.0f} s\n")
    return seconds


def score(run_dir: Path | None, model: str, pairs: list[tuple[np.ndarray, np.ndarray]]) -> dict[str, float]:
    """L1, PSNR, SSIM of the run's generator (CycleGAN: G_B, striped -> solid) on the held-out pairs;
    with no run, of the inputs themselves (the do-nothing baseline)."""
    if run_dir is None:
        translator = argparse.Namespace(translate=lambda image: image)
    else:
        translator = Translator.load(run_dir, direction="BtoA" if model == "cycle_gan" else None, device="cpu")
    metrics = TranslationMetrics({"": ("output", "target")})

    def tensor(image: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(image.astype(np.float32)).permute(2, 0, 1)[None] / 127.5 - 1

    for source, target in pairs:
        metrics.update({"output": tensor(translator.translate(source)), "target": tensor(target)})
    return {key: value for key, value in metrics.compute().items() if key in ("L1", "PSNR", "SSIM")}


def table(results: dict[tuple[str, str], list[dict[str, float]]]) -> str:
    """The markdown table: model, variant, each metric as mean +- standard deviation over the seeds."""
    lines = ["| model | discriminator sees | L1 (lower better) | PSNR dB | SSIM | seeds |", "|---|---|---|---|---|---|"]
    models = list(dict.fromkeys(model for model, _ in results))
    for (model, variant), runs in sorted(results.items(), key=lambda item: models.index(item[0][0])):
        cells = []
        for key, digits in (("L1", 4), ("PSNR", 2), ("SSIM", 4)):
            values = [run[key] for run in runs]
            spread = f" ± {statistics.stdev(values):.{digits}f}" if len(values) > 1 else ""
            cells.append(f"{statistics.mean(values):.{digits}f}{spread}")
        lines.append(f"| {model} | {variant} | {' | '.join(cells)} | {len(runs) if len(runs) > 1 else ''} |")
    return "\n".join(lines)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = OneParagraphParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="folder for the data, the runs and results.md")
    parser.add_argument("--seeds", type=positive_int, default=3)
    parser.add_argument("--size", type=positive_int, default=32, help="image side in pixels (a multiple of 4, >= 32)")
    parser.add_argument("--n_train", type=positive_int, default=40, help="training images (per domain for CycleGAN)")
    parser.add_argument("--n_test", type=positive_int, default=20)
    parser.add_argument("--epochs", type=positive_int, default=30, help="half at the full rate, half decaying")
    parser.add_argument("--ngf", type=positive_int, default=8)
    parser.add_argument("--ndf", type=positive_int, default=16)
    parser.add_argument("--models", default="pix2pix,cycle_gan")
    parser.add_argument("--jobs", type=positive_int, default=2, help="runs trained at once (one thread each)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    out = Path(args.out)
    data = make_data(out, args.size, args.n_train, args.n_test)
    jobs = [(model, variant, seed) for model in args.models.split(",") for variant in VARIANTS
            for seed in range(args.seeds)]
    started = time.time()
    with ThreadPoolExecutor(args.jobs) as pool:
        commands = {job: train_args(data[job[0]], out, *job, args) for job in jobs}
        list(pool.map(lambda job: train(commands[job], out / "runs" / commands[job][5]), jobs))
    torch.set_num_threads(1)
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    for model in args.models.split(","):
        results[(model, "(do nothing: the input as output)")] = [score(None, model, data["pairs"][model])]
    for model, variant, seed in jobs:
        run_dir = out / "runs" / commands[(model, variant, seed)][5]
        results.setdefault((model, variant), []).append(score(run_dir, model, data["pairs"][model]))
    per_domain = "per domain, " if "cycle_gan" in args.models else ""
    report = (f"{table(results)}\n\n{args.n_train} training images ({per_domain}"
              f"{args.size} px), {args.epochs} epochs, --ngf {args.ngf} --ndf {args.ndf}, {args.n_test} held-out "
              f"images, seeds 0-{args.seeds - 1}; {time.time() - started:.0f} s wall (runs trained before are "
              f"reused).\n")
    (out / "results.md").write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
