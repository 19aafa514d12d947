"""Does pix2pix on volumes restore a realistically degraded real scan better than doing nothing and a
classical filter? (issue 45, class 10; the table in docs/volumes.md)

    python dev/volume_restoration.py --out /tmp/restore                       # every row of the table, 3 seeds
    python dev/volume_restoration.py --out /tmp/restore --seeds 1 --recipe issue_45 --recipe recipe

The task: nibabel's example4d EPI scan (128 x 96 x 24 voxels of 2 x 2 x 2.2 mm, its first time point),
cut across its first axis into two slabs of 64 x 96 x 24: the first to train on, the second (never seen in
training) to test on. B is the scan; A the scan blurred by a Gaussian of sigma 1.2 voxels plus Gaussian
noise of 3% of the scan's 99th percentile: what a lower-resolution, noisier acquisition gives. The
degradation's noise is drawn from the seed, so each seed is a new draw of the task as well as of training.

Scores on the test slab, in the window --data_range 0 WINDOW_HIGH (the scan's units, values clipped to it
as test.py clips them): MAE (lower is better) and PSNR in dB over the window's width (higher is better), for
  identity   the degraded input itself;
  gaussian   a Gaussian filter of the input, sigma chosen on the training slab (0.25 to 2 voxels);
  median     a 3x3x3 or 5x5x5 median filter, the size chosen on the training slab;
  <recipe>   pix2pix trained on the training slab (train.py) and applied by test.py in sliding windows.
Each as mean +- standard deviation over the seeds. Runs go one at a time (two trainings on 2 cores
oversubscribe them); finished runs are reused, so an interrupted experiment continues.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from util.flag_types import OneParagraphParser, positive_int  # noqa: E402

BLUR_SIGMA = 1.2  # voxels
NOISE_FRACTION = 0.03  # of the scan's 99th percentile
WINDOW_HIGH = 1200  # the scan's largest value is 1162
GAUSSIAN_SIGMAS = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0)
MEDIAN_SIZES = (3, 5)

# What each recipe adds to the shared flags (paired volumes, one channel, the window 0..WINDOW_HIGH).
PATCHES = ["--patch_size", "32,32,24", "--patches_per_volume", "32", "--batch_size", "4"]
# docs/volumes.md's restoration recipe: a shallow U-Net, whose full-resolution skip carries the input's
# detail past the bottleneck, no discriminator (its judgement trades MAE and PSNR for texture), and a
# learning rate that gets there in 100 epochs.
RECIPE = ["--netG", "unet_8_3d", "--ngf", "16", "--lambda_GAN", "0", "--lr", "0.001", *PATCHES,
          "--n_epochs", "50", "--n_epochs_decay", "50"]
RECIPES = {
    "recipe": RECIPE,
    # one change each: the discriminator back (pix2pix's default weight), pix2pix's learning rate, and the
    # ResNet generator of issue 45's run (its detail passes through a bottleneck 4x smaller a side)
    "recipe_with_gan": [*RECIPE, "--lambda_GAN", "1", "--netD", "n_layers_3d", "--ndf", "8"],
    "recipe_at_default_lr": [*RECIPE, "--lr", "0.0002"],
    "recipe_with_resnet": [*RECIPE, "--netG", "resnet_6blocks_3d", "--ngf", "8"],
    # issue 45's run: pix2pix's defaults on volumes with a small ResNet (GAN + 100 x L1, batch norm, dropout)
    "issue_45": ["--netG", "resnet_6blocks_3d", "--ngf", "8", "--netD", "n_layers_3d", "--ndf", "8", *PATCHES,
                 "--n_epochs", "100", "--n_epochs_decay", "100"],
}


def example_scan():
    """nibabel's example4d EPI scan (from the installed package's test data)."""
    import nibabel as nib
    return nib.load(os.path.join(os.path.dirname(nib.__file__), "tests", "data", "example4d.nii.gz"))


def gaussian_filter(volume: np.ndarray, sigma: float) -> np.ndarray:
    """`volume` smoothed by a separable Gaussian of `sigma` voxels (truncated at 4 sigma, edges mirrored)."""
    radius = max(1, int(math.ceil(4 * sigma)))
    offsets = torch.arange(-radius, radius + 1, dtype=torch.float64)
    kernel = torch.exp(-0.5 * (offsets / sigma) ** 2)
    kernel /= kernel.sum()
    x = torch.from_numpy(volume.astype(np.float64))[None, None]
    for axis in range(3):
        shape = [1, 1, 1, 1, 1]
        shape[2 + axis] = kernel.numel()
        padding = [0, 0] * 3
        padding[2 * (2 - axis)] = padding[2 * (2 - axis) + 1] = radius
        x = torch.nn.functional.conv3d(torch.nn.functional.pad(x, padding, mode="reflect"), kernel.view(shape))
    return x[0, 0].numpy()


def median_filter(volume: np.ndarray, size: int) -> np.ndarray:
    """`volume` with each voxel replaced by the median of the size^3 voxels around it (edges mirrored)."""
    r = size // 2
    x = torch.nn.functional.pad(torch.from_numpy(volume.astype(np.float64))[None, None], [r] * 6, mode="reflect")[0, 0]
    windows = x.unfold(0, size, 1).unfold(1, size, 1).unfold(2, size, 1)
    return windows.reshape(*volume.shape, -1).median(dim=-1).values.numpy()


def degrade(scan: np.ndarray, rng: np.random.Generator, noise_level: float) -> np.ndarray:
    return (gaussian_filter(scan, BLUR_SIGMA) + rng.normal(0, noise_level, scan.shape)).astype(np.float32)


def make_task(root: Path, seed: int) -> None:
    """trainA/B and testA/B of the task under `root` (the docstring at the top)."""
    import nibabel as nib
    image = example_scan()
    scan = np.asarray(image.dataobj, dtype=np.float32)[..., 0]
    rng = np.random.default_rng(seed)
    noise_level = NOISE_FRACTION * float(np.percentile(scan, 99))
    half = scan.shape[0] // 2
    for phase, part in (("train", slice(0, half)), ("test", slice(half, scan.shape[0]))):
        target = scan[part]
        affine = image.affine.copy()  # the slab's own place in the scanner
        affine[:3, 3] += image.affine[:3, :3] @ np.array([part.start, 0, 0])
        for side, values in (("A", degrade(target, rng, noise_level)), ("B", target)):
            (root / f"{phase}{side}").mkdir(parents=True, exist_ok=True)
            nib.save(nib.Nifti1Image(values.astype(np.float32), affine), str(root / f"{phase}{side}" / "scan.nii.gz"))


def load(path: Path) -> np.ndarray:
    import nibabel as nib
    return np.asarray(nib.load(str(path)).dataobj, dtype=np.float64)


def scores(output: np.ndarray, target: np.ndarray) -> dict[str, float]:
    """MAE and PSNR in the window 0..WINDOW_HIGH, both clipped to it (as test.py scores volumes)."""
    output, target = np.clip(output, 0, WINDOW_HIGH), np.clip(target, 0, WINDOW_HIGH)
    mse = float(((output - target) ** 2).mean())
    return {"MAE": float(np.abs(output - target).mean()), "PSNR": 10 * math.log10(WINDOW_HIGH ** 2 / mse)}


def classical_baselines(task: Path) -> dict[str, dict[str, float]]:
    """identity, and the Gaussian and median filters with their size chosen by MAE on the training slab."""
    train_A, train_B = load(task / "trainA" / "scan.nii.gz"), load(task / "trainB" / "scan.nii.gz")
    test_A, test_B = load(task / "testA" / "scan.nii.gz"), load(task / "testB" / "scan.nii.gz")
    sigma = min(GAUSSIAN_SIGMAS, key=lambda s: scores(gaussian_filter(train_A, s), train_B)["MAE"])
    size = min(MEDIAN_SIZES, key=lambda k: scores(median_filter(train_A, k), train_B)["MAE"])
    return {"identity": scores(test_A, test_B),
            "gaussian": {**scores(gaussian_filter(test_A, sigma), test_B), "sigma": sigma},
            "median": {**scores(median_filter(test_A, size), test_B), "size": size}}


def shared_flags(task: Path, run_dir: Path, seed: int) -> list[str]:
    return ["--dataroot", str(task), "--name", "restore", "--checkpoints_dir", str(run_dir / "checkpoints"),
            "--model", "pix2pix", "--dataset_mode", "aligned_volume", "--input_nc", "1", "--output_nc", "1",
            "--data_range", "0", str(WINDOW_HIGH), "--seed", str(seed)]


# the flags of a recipe that test.py does not take (the rest describe the network and the window)
TRAINING_ONLY = {"--patches_per_volume", "--batch_size", "--n_epochs", "--n_epochs_decay", "--lr", "--lambda_GAN",
                 "--netD", "--ndf"}


def train_args(task: Path, run_dir: Path, flags: list[str], seed: int) -> list[str]:
    return [*shared_flags(task, run_dir, seed), *flags, "--display_id", "0", "--no_html", "--no_progress"]


def test_args(task: Path, run_dir: Path, flags: list[str], seed: int) -> list[str]:
    """test.py translating the whole test slab in windows with the trained generator."""
    network = [f for i, f in enumerate(flags) if f not in TRAINING_ONLY and not (i and flags[i - 1] in TRAINING_ONLY)]
    return [*shared_flags(task, run_dir, seed), *network, "--eval", "--results_dir", str(run_dir / "results")]


def translated(run_dir: Path) -> Path:
    """The test slab as test.py translated it (in the scan's units, with the input's affine)."""
    return run_dir / "results" / "restore" / "test_latest" / "volumes" / "scan_fake_B.nii.gz"


def train_and_test(task: Path, run_dir: Path, recipe: str, seed: int) -> dict[str, float]:
    """The recipe trained on the training slab and scored on the test slab (reused when already done)."""
    result = run_dir / "result.json"
    if result.is_file():
        return json.loads(result.read_text())
    flags = RECIPES[recipe]
    started = time.perf_counter()
    subprocess.run([sys.executable, str(ROOT / "train.py"), *train_args(task, run_dir, flags, seed)], cwd=ROOT,
                   check=True, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - started
    subprocess.run([sys.executable, str(ROOT / "test.py"), *test_args(task, run_dir, flags, seed)], cwd=ROOT,
                   check=True, stdout=subprocess.DEVNULL)
    found = {**scores(load(translated(run_dir)), load(task / "testB" / "scan.nii.gz")), "train_seconds": seconds}
    result.write_text(json.dumps(found))
    return found


def mean_spread(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} +- {statistics.stdev(values):.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = OneParagraphParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder for the tasks, runs and table")
    parser.add_argument("--seeds", type=positive_int, default=3, help="seeds 0..N-1 (task noise and training)")
    parser.add_argument("--recipe", action="append", choices=sorted(RECIPES),
                        help="recipes to run (default: all)")
    args = parser.parse_args(argv)
    recipes = args.recipe or list(RECIPES)
    out = Path(args.out)
    rows: dict[str, list[dict[str, float]]] = {}
    for seed in range(args.seeds):
        task = out / f"task_seed{seed}"
        if not (task / "testB" / "scan.nii.gz").is_file():
            make_task(task, seed)
        for name, found in classical_baselines(task).items():
            rows.setdefault(name, []).append(found)
        for recipe in recipes:
            found = train_and_test(task, out / f"{recipe}_seed{seed}", recipe, seed)
            rows.setdefault(recipe, []).append(found)
            print(f"seed {seed} {recipe}: {found}", flush=True)
    print(f"\n| method | MAE (0..{WINDOW_HIGH}) | PSNR (dB) |\n|---|---|---|")
    for name, found in rows.items():
        print(f"| {name} | {mean_spread([f['MAE'] for f in found])} | {mean_spread([f['PSNR'] for f in found])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
