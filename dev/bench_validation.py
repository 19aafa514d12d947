"""What validation during training costs: train on the demo data with `--val_freq 1` and report the
median validation time against the median epoch time, measured in the same runs.

    python dev/bench_validation.py --out bench_val                 # pix2pix and CycleGAN, ~10 min on 2 cores
    python dev/bench_validation.py --models pix2pix --epochs 6 --out bench_val

pix2pix uses the README demo's settings (unet_128, 128 px, batch 4) and scores L1, PSNR and SSIM on the
demo's 20 validation images. CycleGAN (resnet_6blocks, ngf 32, 128 px) scores FID and KID in both
directions on the 20 test images of each domain; without internet access there are no Inception
weights, so the run uses a seeded random weights file (`--seeded_inception`, the default when none is
found): the cost is the real one, the FID values mean nothing. Each epoch's time includes its
validation. Writes `OUT/validation_cost.json` and prints a table.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.seeded_inception import write_seeded_inception_weights  # noqa: E402
from util.display.validation_log import read_metrics  # noqa: E402
from util.evaluation.inception import find_inception_weights  # noqa: E402

RUNS = {
    "pix2pix": ["--dataroot", "{data}/demo_pix2pix", "--model", "pix2pix", "--netG", "unet_128",
                "--load_size", "128", "--crop_size", "128", "--batch_size", "4"],
    "cycle_gan": ["--dataroot", "{data}/demo_cyclegan", "--model", "cycle_gan", "--netG", "resnet_6blocks",
                  "--ngf", "32", "--ndf", "32", "--load_size", "128", "--crop_size", "128", "--batch_size", "2",
                  "--max_dataset_size", "60"],
}


def train_with_validation(model: str, epochs: int, out: Path, data: Path, inception: str | None) -> list[dict]:
    """Train `model` for `epochs` epochs validating after each; the records of its metrics.jsonl."""
    flags = [flag.format(data=data) for flag in RUNS[model]]
    extra = ["--inception_weights", inception] if inception and model == "cycle_gan" else []
    command = [sys.executable, str(ROOT / "train.py"), *flags, *extra, "--name", model,
               "--checkpoints_dir", str(out / "checkpoints"), "--n_epochs", str(epochs), "--n_epochs_decay", "0",
               "--val_freq", "1", "--display_id", "0", "--no_html", "--print_freq", "100000", "--seed", "0"]
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True, cwd=ROOT)
    return list(read_metrics(str(out / "checkpoints" / model)).values())


def summarise(records: list[dict]) -> dict:
    """Medians of the validation and epoch times and of their ratio over the records (metrics.jsonl rows).
    The first epoch carries one-off costs (loading the metric networks, warming allocators); the
    medians are over all epochs, and the first validation is reported on its own."""
    seconds = [r["seconds"] for r in records]
    epoch_seconds = [r["epoch_seconds"] for r in records]
    return {"epochs": len(records), "images": records[0]["images"],
            "validation_s_median": statistics.median(seconds), "validation_s_first": seconds[0],
            "epoch_s_median": statistics.median(epoch_seconds),
            "share_median": statistics.median(s / e for s, e in zip(seconds, epoch_seconds)),
            "metrics": sorted(records[-1]["metrics"])}


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("bench_val"))
    parser.add_argument("--models", default="pix2pix,cycle_gan", help="comma-separated: pix2pix, cycle_gan")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--seeded_inception", action="store_true",
                        help="use a seeded random Inception weights file even if the real one is there")
    args = parser.parse_args()
    models = args.models.split(",")
    unknown = sorted(set(models) - set(RUNS))
    if unknown:
        parser.error(f"--models: unknown {', '.join(unknown)}; choose from {', '.join(RUNS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    data = args.out / "datasets"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "make_demo_dataset.py"), "--out", str(data),
                    "--size", "128"], check=True)
    inception = None if args.seeded_inception else find_inception_weights()
    seeded = inception is None and "cycle_gan" in models
    if seeded:
        inception = write_seeded_inception_weights(args.out / "seeded_inception.pth")
        print(f"FID/KID with seeded random Inception weights ({inception}): real cost, meaningless values")

    results = {model: summarise(train_with_validation(model, args.epochs, args.out / model, data, inception))
               for model in models}
    header = ("| model | metrics | images | validation (median) | first validation "
              "| epoch incl. validation (median) | share |")
    print("\n" + header + "\n|" + " --- |" * 7)
    for model, r in results.items():
        print(f"| {model} | {', '.join(r['metrics'])} | {r['images']} | {r['validation_s_median']:.2f} s | "
              f"{r['validation_s_first']:.2f} s | {r['epoch_s_median']:.1f} s | {100 * r['share_median']:.1f}% |")
    (args.out / "validation_cost.json").write_text(json.dumps(
        {"results": results, "inception": "seeded random" if seeded else inception, "epochs": args.epochs},
        indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
