"""Fixed-seed CycleGAN, pix2pix and CUT runs, and a fingerprint of every file they save.

A refactoring that claims "behaviour unchanged" runs this at the commit before and after it and
compares the two outputs: every network file, EMA file and training state must hash the same.

    python dev/fixed_seed_checkpoints.py --out /tmp/fp_after > after.json
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
COMMON = ["--load_size", "36", "--crop_size", "32", "--n_epochs", "1", "--n_epochs_decay", "1",
          "--ngf", "8", "--ndf", "8", "--display_id", "0", "--num_threads", "0", "--seed", "11",
          "--no_html", "--no_progress", "--max_dataset_size", "6", "--batch_size", "2", "--ema_decay", "0.5"]
# name -> (demo dataset, flags); the later flags win over COMMON's
RUNS = {
    "cycle_gan": ("cyclegan", ["--model", "cycle_gan", "--pool_size", "4"]),
    "pix2pix": ("pix2pix", ["--model", "pix2pix", "--netG", "resnet_6blocks"]),
    "pix2pix_unet": ("pix2pix", ["--model", "pix2pix", "--netG", "unet_128", "--load_size", "128", "--crop_size", "128",
                                 "--netD", "multiscale", "--num_D", "2"]),
    "cut": ("cyclegan", ["--model", "cut", "--CUT_mode", "CUT"]),
    "fastcut": ("cyclegan", ["--model", "cut", "--CUT_mode", "FastCUT", "--netG", "resnet_6blocks"]),
}


def tensor_digest(value) -> str:
    """A hash of the tensors in a (nested) checkpoint object, in key order."""
    digest = hashlib.sha256()

    def visit(obj, path: str) -> None:
        if isinstance(obj, torch.Tensor):
            digest.update(path.encode())
            digest.update(str(obj.dtype).encode())
            digest.update(obj.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
        elif isinstance(obj, dict):
            for key in sorted(obj, key=str):
                visit(obj[key], f"{path}.{key}")
        elif isinstance(obj, (list, tuple)):
            for index, item in enumerate(obj):
                visit(item, f"{path}[{index}]")
        else:
            digest.update(f"{path}={obj!r}".encode())
    visit(value, "")
    return digest.hexdigest()[:16]


def without_paths(checkpoint):
    """The training state's recorded options name the dataset folder, which is under --out: leave it
    out, so that runs in two folders compare."""
    if isinstance(checkpoint, dict) and isinstance(checkpoint.get("options"), dict):
        checkpoint["options"] = {k: v for k, v in checkpoint["options"].items() if k != "dataroot"}
    return checkpoint


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the datasets and runs")
    args = parser.parse_args()
    data = args.out / "data"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "make_demo_dataset.py"), "--out", str(data), "--size", "36",
                    "--n_train", "6", "--n_test", "2", "--task", "both"], check=True, capture_output=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = {}
    for name, (dataset, flags) in RUNS.items():
        command = [sys.executable, str(ROOT / "train.py"), "--dataroot", str(data / f"demo_{dataset}"),
                   "--checkpoints_dir", str(args.out / "runs"), "--name", name, *COMMON, *flags]
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"{name} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
        run_dir = args.out / "runs" / name
        result[name] = {}
        for path in sorted(run_dir.glob("*.pth")):  # one checkpoint in memory at a time
            state = torch.load(path, map_location="cpu", weights_only=False)
            result[name][path.name] = tensor_digest(without_paths(state))
    json.dump(result, sys.stdout, indent=1, sort_keys=True)
    print()


if __name__ == "__main__":
    main()
