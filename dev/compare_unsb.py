"""UNSB's checkpoints both ways, against its own code (cyclomon/UNSB), on the CPU, with the same noise.

Trains a tiny model with its train.py and one with ours (the same flags, one epoch), then translates the
test images with each checkpoint under both test.py's: its test.py records every normal draw it makes
(torch.randn, torch.randn_like); the last 2T-1 of each image are its walk's codes and noises in the
order both walks use them (z_0, eps_1, z_1, ..., z_{T-1}); our test.py is then fed those same draws for
that image (models/bridge.SeededNoise replaced by a replay), and each step's output is compared pixel
by pixel (the acceptance: within 1/255), for 1 and 3 steps.

Its code is a yardstick to run, never code to copy: extract it file by file to a folder (`fetch`
cyclomon/UNSB, then `git show` each file), and patch only what keeps it off the CPU: `.cuda()` in
models/sb_model.py to `.to(self.device)`.

    python dev/compare_unsb.py --unsb /tmp/unsb --out /tmp/unsb_cmp
"""
from __future__ import annotations

import argparse
import os
import runpy
import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# UNSB's networks, narrow so that the CPU trains them in seconds
FLAGS = ["--ngf", "8", "--ndf", "8", "--netF_nc", "32", "--num_patches", "64", "--load_size", "64", "--crop_size", "64",
         "--num_threads", "0", "--no_flip", "--lambda_SB", "1.0", "--lambda_NCE", "1.0"]


def run(command: list[str], cwd: Path) -> str:
    print("$", " ".join(command), f"(in {cwd})", flush=True)
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result.stdout


def recording(draws_file: Path, script: Path, argv: list[str]) -> None:
    """Run UNSB's `script` (its test.py) recording every normal draw, an image boundary at each save."""
    import torch
    draws: list = []
    randn, randn_like = torch.randn, torch.randn_like

    def recorded(function):
        def draw(*args, **kwargs):
            value = function(*args, **kwargs)
            draws.append(value.detach().clone())
            return value
        return draw

    torch.randn, torch.randn_like = recorded(randn), recorded(randn_like)
    sys.path.insert(0, str(script.parent))
    import util.visualizer as visualizer  # UNSB's, from its folder
    save = visualizer.save_images

    def save_and_mark(*args, **kwargs):
        draws.append("image")
        return save(*args, **kwargs)

    visualizer.save_images = save_and_mark
    sys.argv = [str(script), *argv]
    try:
        runpy.run_path(str(script), run_name="__main__")
    finally:
        torch.save(draws, draws_file)


def replaying(draws_file: Path, steps: int, argv: list[str]) -> None:
    """Run our test.py with each image's walk fed the last 2T-1 draws UNSB's test.py made for it."""
    import torch

    from models.losses import bridge
    recorded = torch.load(draws_file, weights_only=False)
    per_image, current = [], []
    for item in recorded:
        if isinstance(item, str):
            per_image.append(current[-(2 * steps - 1):])
            current = []
        else:
            current.append(item)
    queue = iter(per_image)

    class Replay:
        def __init__(self, seed: int):
            self.draws = iter(next(queue))

        def noise(self, like, step):
            return next(self.draws).to(like.device, like.dtype)

        def codes(self, count, width, step):
            return next(self.draws).to(torch.float64)

    bridge.SeededNoise = Replay
    sys.argv = [str(ROOT / "test.py"), *argv]
    runpy.run_path(str(ROOT / "test.py"), run_name="__main__")


def their_outputs(results: Path, step: int) -> dict[str, np.ndarray]:
    return {p.stem: np.asarray(Image.open(p).convert("RGB"), dtype=int)
            for p in sorted(results.rglob(f"fake_{step}/*.png"))}


def our_outputs(results: Path, step: int) -> dict[str, np.ndarray]:
    return {p.name[:-len(f"_fake_{step}.png")]: np.asarray(Image.open(p).convert("RGB"), dtype=int)
            for p in sorted(results.rglob(f"*_fake_{step}.png"))}


def compare(unsb: Path, out: Path, data: Path, name: str, ckpt: Path, steps: int, images: int) -> int:
    """Both test.py's on checkpoint folder `ckpt/name` with the same noise: the largest difference."""
    common = ["--dataroot", str(data), "--name", name, "--checkpoints_dir", str(ckpt), "--num_timesteps", str(steps),
              "--num_test", str(images), *FLAGS[:2], "--load_size", "64", "--crop_size", "64", "--no_flip"]
    tag = f"{name}_T{steps}"
    draws = out / f"{tag}_draws.pt"
    # Its test.py loads G before wrapping it in DataParallel, so it cannot read the `module.` keys its own
    # train.py saves on the CPU: it reads a copy without them (ours reads either).
    plain = out / "plain"
    (plain / name).mkdir(parents=True, exist_ok=True)
    import torch
    state = torch.load(ckpt / name / "latest_net_G.pth", weights_only=True)
    torch.save({key.removeprefix("module."): value for key, value in state.items()}, plain / name / "latest_net_G.pth")
    theirs_common = [*common[:common.index("--checkpoints_dir")], "--checkpoints_dir", str(plain),
                     *common[common.index("--checkpoints_dir") + 2:]]
    run([sys.executable, __file__, "--record", str(draws), "--", str(unsb / "test.py"), *theirs_common, "--mode", "sb",
         "--gpu_ids", "-1", "--results_dir", str(out / f"theirs_{tag}"), "--eval"], unsb)
    run([sys.executable, __file__, "--replay", str(draws), "--steps", str(steps), "--", *common, "--model", "sb",
         "--device", "cpu", "--results_dir", str(out / f"ours_{tag}")], ROOT)
    worst = 0
    for step in range(1, steps + 1):
        theirs, ours = their_outputs(out / f"theirs_{tag}", step), our_outputs(out / f"ours_{tag}", step)
        assert theirs and theirs.keys() == ours.keys(), (sorted(theirs), sorted(ours))
        differences = [int(np.abs(theirs[k] - ours[k]).max()) for k in theirs]
        print(f"{name}, {steps} step(s), step {step}: {len(theirs)} images, largest difference "
              f"{max(differences)}/255", flush=True)
        worst = max(worst, *differences)
    return worst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--unsb", type=Path, help="UNSB's code, extracted (and .cuda() patched to the device)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/unsb_cmp"))
    parser.add_argument("--images", type=int, default=4)
    # the two halves of one comparison, each in a process of its own (this script runs them itself)
    parser.add_argument("--record", type=Path, metavar="FILE",
                        help="run UNSB's test.py (the path and arguments after --) recording every normal draw into "
                             "FILE")
    parser.add_argument("--replay", type=Path, metavar="FILE",
                        help="run our test.py (the arguments after --), each image's walk fed the draws FILE recorded")
    parser.add_argument("--steps", type=int, default=3, help="with --replay: the steps of the bridge (T)")
    args, rest = parser.parse_known_args(argv)
    rest = rest[1:] if rest[:1] == ["--"] else rest
    if args.record:
        recording(args.record, Path(rest[0]), rest[1:])
        return 0
    if args.replay:
        replaying(args.replay, args.steps, rest)
        return 0
    from scripts.make_demo_dataset import make_cyclegan_demo
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    data = make_cyclegan_demo(out / "data", n_train=20, n_test=args.images)
    train = ["--dataroot", str(data), "--checkpoints_dir", str(out / "ckpt"), *FLAGS, "--n_epochs", "1",
             "--n_epochs_decay", "0", "--num_timesteps", "3", "--display_id", "0", "--print_freq", "1000000",
             "--save_epoch_freq", "1"]
    run([sys.executable, "train.py", *train, "--name", "theirs", "--mode", "sb", "--gpu_ids", "-1"], args.unsb)
    run([sys.executable, "train.py", *train, "--name", "ours", "--model", "sb", "--device", "cpu", "--seed", "0",
         "--no_html"], ROOT)
    worst = max(compare(args.unsb, out, data, name, out / "ckpt", steps, args.images)
                for name in ("theirs", "ours") for steps in (1, 3))
    print(f"largest difference over both checkpoints, 1 and 3 steps: {worst}/255 "
          f"({'within' if worst <= 1 else 'NOT within'} 1/255)")
    return 0 if worst <= 1 else 1


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    sys.exit(main())
