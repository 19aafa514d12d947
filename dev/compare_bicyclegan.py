"""BicycleGAN's checkpoints both ways, against its own code (junyanz/BicycleGAN), on the CPU.

Trains a tiny model with its train.py and one with ours (the same flags), then translates the
validation pairs four ways: its checkpoint in its test.py and in ours, our checkpoint in ours and in
its test.py, and compares the "encoded" images (G(A, E(B))) of each checkpoint pixel by pixel (the
acceptance: within 1/255). Its code is a yardstick to run, never code to copy: extract it file by
file to a folder and pass that folder (`fetch` junyanz/BicycleGAN, then `git show` each file).

    python dev/compare_bicyclegan.py --bicyclegan /tmp/bicycle --out /tmp/bicycle_cmp
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.make_demo_dataset import make_pix2pix_demo  # noqa: E402

# BicycleGAN's 128 px networks, narrow so that the CPU trains them in seconds
FLAGS = ["--netG", "unet_128", "--netE", "resnet_128", "--netD", "basic_128_multi", "--netD2", "basic_128_multi",
         "--ngf", "8", "--nef", "8", "--ndf", "8", "--nz", "8", "--load_size", "128", "--crop_size", "128",
         "--num_threads", "0", "--no_flip", "--direction", "AtoB"]


def run(command: list[str], cwd: Path) -> None:
    print("$", " ".join(command), f"(in {cwd})", flush=True)
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")


def their_encoded(results: Path) -> list[np.ndarray]:
    """Its test.py writes input_<i>_encoded.png per input (the first output, from E's code)."""
    return [np.asarray(Image.open(path)) for path in sorted(results.rglob("input_*_encoded.png"))]


def our_encoded(results: Path) -> list[np.ndarray]:
    return [np.asarray(Image.open(path)) for path in sorted(results.rglob("*_fake_B.png"))]


def largest_difference(a: list[np.ndarray], b: list[np.ndarray]) -> int:
    if len(a) != len(b) or not a:
        sys.exit(f"different numbers of encoded images: {len(a)} vs {len(b)}")
    return max(int(np.abs(x.astype(int) - y.astype(int)).max()) for x, y in zip(a, b))


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--bicyclegan", type=Path, required=True, help="a folder holding BicycleGAN's code")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    python, out = sys.executable, args.out.resolve()
    data = make_pix2pix_demo(out / "data", size=64, seed=0, n_train=8, n_val=4, n_test=4)
    train = ["--dataroot", str(data), "--model", "bicycle_gan", *FLAGS, "--niter", str(args.epochs),
             "--niter_decay", "0", "--display_id", "-1", "--no_html", "--save_epoch_freq", "1"]
    run([python, "train.py", *train, "--checkpoints_dir", str(out / "ckpt"), "--name", "theirs", "--gpu_ids", "-1"],
        args.bicyclegan)
    run([python, "train.py", *train, "--checkpoints_dir", str(out / "ckpt"), "--name", "ours", "--seed", "0"], ROOT)
    test = ["--dataroot", str(data), "--model", "bicycle_gan", *FLAGS, "--phase", "val", "--num_test", "4",
            "--n_samples", "2"]
    outputs = {}
    for run_name in ("theirs", "ours"):
        their_results, our_results = out / f"{run_name}_in_theirs", out / f"{run_name}_in_ours"
        run([python, "test.py", *test, "--checkpoints_dir", str(out / "ckpt"), "--name", run_name, "--gpu_ids", "-1",
             "--results_dir", str(their_results)], args.bicyclegan)
        run([python, "test.py", *test, "--checkpoints_dir", str(out / "ckpt"), "--name", run_name, "--eval",
             "--results_dir", str(our_results)], ROOT)
        outputs[run_name] = largest_difference(their_encoded(their_results), our_encoded(our_results))
    for run_name, difference in outputs.items():
        print(f"{run_name}' checkpoint: its test.py vs ours, encoded images differ by at most {difference}/255")
    return 0 if max(outputs.values()) <= 1 else 1


if __name__ == "__main__":
    sys.exit(main())
