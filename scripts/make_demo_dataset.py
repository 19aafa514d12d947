"""Generate the built-in demo datasets (no downloads) for pix2pix and CycleGAN.

Layouts follow the reference repository:

* ``OUT/demo_pix2pix/{train,val,test}/NNNN.png`` -- aligned pairs, A | B side by side
  (width 2*S, height S). A is a flat-colour label map (like facades' labels), B a
  "rendered photo" of the same scene. B is a deterministic function of A alone, so a
  model can learn it, and A and B colours differ a lot, so copying A scores badly.
* ``OUT/demo_bicyclegan/{train,val,test}/NNNN.png`` -- aligned pairs as demo_pix2pix, but
  each photo's colours are turned by a random hue (the same label map has many right
  renderings): a task for a model with many answers per input (BicycleGAN).
* ``OUT/demo_cyclegan/{trainA,trainB,testA,testB}/*.png`` -- S x S, unpaired. Domain A
  has solid shapes, domain B striped shapes (like horse -> zebra; stripes every S/5 px, in a
  random direction and phase per shape), drawn from different random scenes.
* ``OUT/demo_scenes/{trainA,trainB,testA,testB,test}/NNNN.png`` -- the pix2pix demo's label maps (A)
  and rendered scenes (B) of different random scenes, unpaired, for CycleGAN; `test` holds the held-out
  scenes' aligned pairs A | B, to score an unpaired model against the true scene.
* ``OUT/demo_volumes/{trainA,trainB,valA,valB,testA,testB}/NNNN.nii.gz`` -- paired 3-D phantoms
  (48 x 48 x 32 voxels of 2 x 2 x 2.5 mm): A an MR-like scan (arbitrary units, dark bone *and*
  dark air, a smooth bias field), B the CT of the same body in Hounsfield units (air -1000, bone
  +1000): bone can only be told from air by where it lies, as in MR -> CT synthesis.

Output is byte-identical for a given seed. A dataset folder is reused when it already
holds the expected files for the same parameters; otherwise it is rebuilt in a hidden
temporary folder and renamed into place, so an interrupted run never leaves half a dataset.
A folder of that name that this script did not make (no .demo_params.json) is never replaced:
the script stops with exit status 2, naming it.

Usage: python scripts/make_demo_dataset.py [--out datasets] [--size 64] [--seed 0]
       [--n_train 200] [--n_test 20] [--task pix2pix|cyclegan|both|cut|scenes|bicyclegan|volumes]
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from util.console import setup_logging  # noqa: E402
from util.errors import UserError, exit_with_status, exits_on_user_error  # noqa: E402
from util.flag_types import Bounded, OneParagraphParser, seed_value  # noqa: E402
from util.paths import unwritable_folder_reason  # noqa: E402

PARAMS_FILE = ".demo_params.json"  # hidden, so image-folder loaders never see it
DEMO_FILES = (".png", ".nii.gz")  # what the demo datasets are made of

# pix2pix classes: 0 background, 1 circle, 2 rectangle, 3 triangle.
LABEL_COLORS = np.array([(0, 0, 200), (255, 0, 0), (0, 255, 0), (255, 255, 0)], np.float32)
# Rendered colours are far from the label colours so the identity baseline is poor.
SHAPE_COLORS = {1: (40, 150, 70), 2: (150, 85, 35), 3: (110, 70, 150)}
SKY_TOP, SKY_BOTTOM = np.array((185, 215, 250), np.float32), np.array((250, 205, 160), np.float32)

# CycleGAN palettes; both domains share them so only the stripes tell A from B.
CG_BACKGROUNDS = [(225, 225, 225), (235, 225, 200), (205, 225, 235)]
CG_SHAPE_COLORS = [(220, 50, 50), (50, 120, 220), (60, 170, 80), (230, 170, 30), (150, 70, 180)]
STRIPE_COLOR = np.array((25, 25, 25), np.float32)


def _grid(size: int) -> tuple[np.ndarray, np.ndarray]:
    """Pixel-centre coordinates (y, x), each of shape (size, size)."""
    c = np.arange(size, dtype=np.float32) + 0.5
    return np.meshgrid(c, c, indexing="ij")


def _shape_mask(rng: np.random.Generator, kind: int, size: int, scale: float = 1.0) -> np.ndarray:
    """Boolean mask of one random shape: kind 1 circle, 2 rectangle, 3 triangle."""
    yy, xx = _grid(size)
    cy, cx = rng.uniform(0.12 * size, 0.88 * size, 2)
    r = rng.uniform(size / 10, size / 4) * scale
    if kind == 1:
        return (yy - cy) ** 2 + (xx - cx) ** 2 <= r * r
    if kind == 2:
        hh, hw = rng.uniform(0.5 * r, 1.1 * r, 2)
        return (np.abs(yy - cy) <= hh) & (np.abs(xx - cx) <= hw)
    angles = rng.uniform(0, 2 * np.pi) + np.arange(3) * 2 * np.pi / 3 + rng.uniform(-0.4, 0.4, 3)
    vy, vx = cy + r * 1.2 * np.sin(angles), cx + r * 1.2 * np.cos(angles)
    # Inside a triangle = same side of all three edges (either winding order).
    sides = [(vx[(i + 1) % 3] - vx[i]) * (yy - vy[i]) - (vy[(i + 1) % 3] - vy[i]) * (xx - vx[i])
             for i in range(3)]
    return np.all([s >= 0 for s in sides], axis=0) | np.all([s <= 0 for s in sides], axis=0)


def _random_labels(rng: np.random.Generator, size: int) -> np.ndarray:
    """A label map (size x size, int) with 3-6 overlapping shapes; later shapes win."""
    labels = np.zeros((size, size), np.int64)
    for _ in range(int(rng.integers(3, 7))):
        kind = int(rng.integers(1, 4))
        labels[_shape_mask(rng, kind, size)] = kind
    return labels


def _boundary(labels: np.ndarray, width: int) -> np.ndarray:
    """Shape pixels within `width` px (4-neighbourhood steps) of a different label."""
    padded = np.pad(labels, width, mode="edge")  # image border is not an edge
    size = labels.shape[0]
    edge = np.zeros(labels.shape, bool)
    for d in range(1, width + 1):
        for dy, dx in ((d, 0), (-d, 0), (0, d), (0, -d)):
            edge |= padded[width + dy:width + dy + size, width + dx:width + dx + size] != labels
    return edge & (labels > 0)


def render_photo(labels: np.ndarray) -> np.ndarray:
    """The "photo" B for a label map: a pure function of the labels (no noise).

    Shading depends on the row only, never the column, so the horizontal flips that
    pix2pix applies to A and B together keep B predictable from A.
    """
    size = labels.shape[0]
    t = ((np.arange(size, dtype=np.float32) + 0.5) / size)[:, None, None]  # 0 top .. 1 bottom
    img = np.broadcast_to(SKY_TOP * (1 - t) + SKY_BOTTOM * t, (size, size, 3)).copy()
    light = 1.2 - 0.45 * t  # lit from above
    for cls, color in SHAPE_COLORS.items():
        mask = labels == cls
        img[mask] = (np.array(color, np.float32) * light)[np.nonzero(mask)[0], 0]
    img[_boundary(labels, 1 if size < 128 else 2)] *= 0.35  # dark outline
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def _pix2pix_pair(rng: np.random.Generator, size: int) -> np.ndarray:
    """One aligned A | B image, shape (size, 2*size, 3)."""
    labels = _random_labels(rng, size)
    label_img = LABEL_COLORS[labels].astype(np.uint8)
    return np.concatenate([label_img, render_photo(labels)], axis=1)


def turn_hue(image: np.ndarray, angle: float) -> np.ndarray:
    """`image` (uint8 RGB) with its colours turned by `angle` radians about the gray axis (greys stay)."""
    axis = np.full(3, 1 / np.sqrt(3), np.float32)
    cos, sin = np.cos(angle), np.sin(angle)
    cross = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]], np.float32)
    rotation = cos * np.eye(3, dtype=np.float32) + sin * cross + (1 - cos) * np.outer(axis, axis)  # Rodrigues
    return np.clip(np.rint(image.astype(np.float32) @ rotation.T), 0, 255).astype(np.uint8)


def _bicyclegan_pair(rng: np.random.Generator, size: int) -> np.ndarray:
    """One aligned A | B image whose B has the pix2pix demo's rendering turned by a random hue."""
    labels = _random_labels(rng, size)
    label_img = LABEL_COLORS[labels].astype(np.uint8)
    return np.concatenate([label_img, turn_hue(render_photo(labels), rng.uniform(0, 2 * np.pi))], axis=1)


def _cyclegan_scene(rng: np.random.Generator, size: int, striped: bool,
                    stripe_rng: np.random.Generator | None = None, period: float | None = None) -> np.ndarray:
    """One S x S scene of 1-3 shapes on a plain background; striped shapes for domain B. With
    `stripe_rng` the stripes are drawn from it, so `rng` makes the same scene as unstriped: the
    striped counterpart of a domain-A image."""
    yy, xx = _grid(size)
    img = np.empty((size, size, 3), np.float32)
    img[:] = CG_BACKGROUNDS[int(rng.integers(len(CG_BACKGROUNDS)))]
    period = period or stripe_period(size)
    for _ in range(int(rng.integers(1, 4))):
        # Bigger than pix2pix shapes so each one shows several stripes.
        mask = _shape_mask(rng, int(rng.integers(1, 4)), size, scale=1.4)
        img[mask] = CG_SHAPE_COLORS[int(rng.integers(len(CG_SHAPE_COLORS)))]
        if striped:
            # Random orientation (horizontal, vertical, two diagonals) and phase per shape.
            draw = stripe_rng or rng
            wy, wx = [(1, 0), (0, 1), (0.7, 0.7), (0.7, -0.7)][int(draw.integers(4))]
            phase = draw.uniform(0, period)
            dark = ((wy * yy + wx * xx + phase) % period) < period / 2
            img[mask & dark] = STRIPE_COLOR
    return img.astype(np.uint8)


def stripe_period(size: int) -> float:
    """The default stripe period (pixels) of the unpaired demo at image side `size`: wide enough (12.8 px at
    64 px) for a small generator to draw and a patch discriminator to see."""
    return max(4.0, size / 5)


def _rng(seed: int, *stream: int) -> np.random.Generator:
    """Independent, reproducible random stream per (seed, task, split)."""
    return np.random.default_rng([seed, *stream])


def _build(out_dir: Path, name: str, params: dict, splits: dict[str, int],
           make_split: Callable[[Path, str, int], None]) -> Path:
    """Reuse `out_dir/name` if complete for `params`, else build it atomically."""
    target = out_dir / name
    if _is_complete(target, params, splits):
        print(f"reusing {target} ({_summary(target)})")
        return target
    if target.exists() and not (target / PARAMS_FILE).is_file() and (not target.is_dir() or any(target.iterdir())):
        # not a demo dataset of ours (those hold PARAMS_FILE): the user's data, which is never replaced
        raise UserError(f"{target} exists and was not made by scripts/make_demo_dataset.py (it has no {PARAMS_FILE}), "
                        f"so it is left alone and nothing was written; move it away, or pass another --out, e.g. "
                        f"--out {out_dir / 'demo'}.")
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=out_dir))
    try:
        for split, count in splits.items():
            (tmp / split).mkdir()
            make_split(tmp / split, split, count)
        (tmp / PARAMS_FILE).write_text(json.dumps(params, sort_keys=True))
        if target.exists():  # stale or incomplete earlier dataset
            shutil.rmtree(target)
        tmp.rename(target)
    except BaseException:  # includes Ctrl-C: never leave the partial folder behind
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    print(f"wrote {target} ({_summary(target)})")
    return target


def _is_complete(target: Path, params: dict, splits: dict[str, int]) -> bool:
    """True if `target` was generated with `params` and has every expected image (or volume)."""
    try:
        if json.loads((target / PARAMS_FILE).read_text()) != params:
            return False
    except (OSError, ValueError):
        return False
    return all(len([f for f in (target / s).iterdir() if f.name.endswith(DEMO_FILES)]) == n
               for s, n in splits.items())


def _summary(target: Path) -> str:
    """'N files, X.XX MB' for a dataset folder."""
    files = [f for f in target.rglob("*") if f.name.endswith(DEMO_FILES)]
    return f"{len(files)} files, {sum(f.stat().st_size for f in files) / 1e6:.2f} MB"


def _save(img: np.ndarray, path: Path) -> None:
    Image.fromarray(np.ascontiguousarray(img)).save(path, format="PNG")  # Pillow PNGs carry no timestamp


def _make_aligned_demo(out_dir: Path, task: str, stream: int,
                       make_pair: Callable[[np.random.Generator, int], np.ndarray],
                       size: int, seed: int, splits: dict[str, int]) -> Path:
    """Write (or reuse) `out_dir/demo_<task>` with `splits` of aligned pairs from `make_pair`, each split
    from its own random stream (`stream` tells the tasks apart); return it."""
    params = {"task": task, "size": size, "seed": seed, **splits}

    def make_split(folder: Path, split: str, count: int) -> None:
        rng = _rng(seed, stream, list(splits).index(split))
        for i in range(count):
            _save(make_pair(rng, size), folder / f"{i:04d}.png")

    return _build(Path(out_dir), f"demo_{task}", params, splits, make_split)


def make_pix2pix_demo(out_dir: Path, size: int = 64, seed: int = 0, n_train: int = 200,
                      n_val: int = 20, n_test: int = 20) -> Path:
    """Write (or reuse) `out_dir/demo_pix2pix` with train/val/test aligned pairs; return it."""
    return _make_aligned_demo(out_dir, "pix2pix", 0, _pix2pix_pair, size, seed,
                              {"train": n_train, "val": n_val, "test": n_test})


def make_bicyclegan_demo(out_dir: Path, size: int = 128, seed: int = 0, n_train: int = 200,
                         n_val: int = 20, n_test: int = 20) -> Path:
    """Write (or reuse) `out_dir/demo_bicyclegan` with train/val/test aligned pairs; return it."""
    return _make_aligned_demo(out_dir, "bicyclegan", 3, _bicyclegan_pair, size, seed,
                              {"train": n_train, "val": n_val, "test": n_test})


VOLUME_SHAPE, VOXEL_MM = (48, 48, 32), (2.0, 2.0, 2.5)


def _phantom_pair(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(MR-like, CT in HU) volumes of one random body: an elliptic cylinder of soft tissue inside a bone
    shell, a few organs, air around. In MR bone is as dark as air; in CT it is the brightest tissue."""
    axes = [np.linspace(-1, 1, n, dtype=np.float32) for n in VOLUME_SHAPE]
    x, y, z = np.meshgrid(*axes, indexing="ij")
    rx, ry = rng.uniform(0.7, 0.9), rng.uniform(0.6, 0.85)
    radius = np.sqrt((x / rx) ** 2 + (y / ry) ** 2) * (1 + 0.1 * z * rng.uniform(-1, 1))
    body, bone = radius < 1.0, (radius > 0.82) & (radius < 0.93)
    mr = np.where(body, 500.0, 0.0).astype(np.float32)
    ct = np.where(body, 40.0, -1000.0).astype(np.float32)
    for _ in range(rng.integers(2, 5)):  # organs: ellipsoids well inside the body
        centre = rng.uniform(-0.4, 0.4, 3) * (rx, ry, 1)
        size = rng.uniform(0.12, 0.28, 3)
        organ = (((x - centre[0]) / size[0]) ** 2 + ((y - centre[1]) / size[1]) ** 2
                 + ((z - centre[2]) / (2 * size[2])) ** 2) < 1
        brightness = rng.uniform(650, 1000)
        mr[organ & body] = brightness
        ct[organ & body] = 40 + (brightness - 650) / 10  # little contrast between soft tissues in CT
    mr[bone] = 80.0
    ct[bone] = rng.uniform(700, 1000)
    mr *= 1 + 0.2 * x * rng.uniform(-1, 1)  # MR's smooth intensity bias
    mr += rng.normal(0, 20, VOLUME_SHAPE)
    ct += rng.normal(0, 10, VOLUME_SHAPE)
    return mr.astype(np.float32), ct.astype(np.float32)


def make_volume_demo(out_dir: Path, seed: int = 0, n_train: int = 6, n_test: int = 2) -> Path:
    """Write (or reuse) `out_dir/demo_volumes`: paired MR-like and CT phantoms in trainA/trainB,
    valA/valB and testA/testB (NIfTI, 2 x 2 x 2.5 mm voxels); return it."""
    import nibabel as nib

    counts = {"train": n_train, "val": n_test, "test": n_test}
    splits = {f"{split}{side}": count for split, count in counts.items() for side in "AB"}
    params = {"task": "volumes", "shape": list(VOLUME_SHAPE), "seed": seed, **splits}
    affine = np.diag([*VOXEL_MM, 1.0])

    def make_split(folder: Path, split: str, count: int) -> None:
        rng = _rng(seed, 4, list(counts).index(split[:-1]))  # A and B of a split from the same bodies
        for i in range(count):
            pair = _phantom_pair(rng)
            volume = pair[0] if split.endswith("A") else pair[1]
            nib.save(nib.Nifti1Image(volume, affine), str(folder / f"{i:04d}.nii.gz"))

    return _build(Path(out_dir), "demo_volumes", params, splits, make_split)


def make_cyclegan_demo(out_dir: Path, size: int = 64, seed: int = 0, n_train: int = 100,
                       n_test: int = 10, period: float | None = None) -> Path:
    """Write (or reuse) `out_dir/demo_cyclegan` (solid A vs striped B, unpaired); return it."""
    splits = {"trainA": n_train, "trainB": n_train, "testA": n_test, "testB": n_test}
    period = period or stripe_period(size)
    # the period is recorded, default or not: a folder made with another (S/10 before) is made anew
    params = {"task": "cyclegan", "size": size, "seed": seed, "n_train": n_train, "n_test": n_test, "period": period}

    def make_split(folder: Path, split: str, count: int) -> None:
        # Each domain/split has its own stream, so A and B scenes are unrelated (unpaired).
        rng = _rng(seed, 1, list(splits).index(split))
        domain = split[-1]
        for i in range(count):
            img = _cyclegan_scene(rng, size, striped=domain == "B", period=period)
            _save(img, folder / f"{domain.lower()}_{i:04d}.png")

    return _build(Path(out_dir), "demo_cyclegan", params, splits, make_split)


def make_cyclegan_pairs(out_dir: Path, size: int = 64, seed: int = 0, n_test: int = 10,
                        period: float | None = None) -> Path:
    """Write (or reuse) `out_dir/demo_cyclegan_pairs/test`: each test image of `demo_cyclegan/testA`
    (same seed and size) beside its true striped counterpart, A | B, so that an unpaired model's
    held-out outputs can be scored offline by L1/PSNR (scripts/demo_report.py)."""
    splits = {"test": n_test}
    period = period or stripe_period(size)
    params = {"task": "cyclegan_pairs", "size": size, "seed": seed, "n_test": n_test, "period": period}

    def make_split(folder: Path, split: str, count: int) -> None:
        rng = _rng(seed, 1, 2)  # demo_cyclegan's testA stream (see make_cyclegan_demo)
        for i in range(count):
            state = rng.bit_generator.state
            solid = _cyclegan_scene(rng, size, striped=False, period=period)
            rng.bit_generator.state = state  # the same scene again, striped
            striped = _cyclegan_scene(rng, size, striped=True, stripe_rng=_rng(seed, 2, i), period=period)
            _save(np.concatenate([solid, striped], axis=1), folder / f"a_{i:04d}.png")

    return _build(Path(out_dir), "demo_cyclegan_pairs", params, splits, make_split)


def make_scenes_demo(out_dir: Path, size: int = 64, seed: int = 0, n_train: int = 100, n_test: int = 20) -> Path:
    """Write (or reuse) `out_dir/demo_scenes`: the pix2pix demo's label maps (trainA) and rendered scenes
    (trainB) of *different* random scenes, unpaired (as cityscapes labels -> photos in CycleGAN's paper),
    and held-out scenes as testA / testB and as aligned pairs A | B in `test` (for scoring against the
    true scene, scripts/demo_report.py --dataset_mode aligned); return it."""
    splits = {"trainA": n_train, "trainB": n_train, "testA": n_test, "testB": n_test, "test": n_test}
    params = {"task": "scenes", "size": size, "seed": seed, "n_train": n_train, "n_test": n_test}

    def make_split(folder: Path, split: str, count: int) -> None:
        # trainA and trainB from streams of their own (unrelated scenes); the three test splits from one
        rng = _rng(seed, 5, {"trainA": 0, "trainB": 1}.get(split, 2))
        for i in range(count):
            pair = _pix2pix_pair(rng, size)
            image = {"A": pair[:, :size], "B": pair[:, size:]}.get(split[-1], pair)
            _save(image, folder / f"{i:04d}.png")

    return _build(Path(out_dir), "demo_scenes", params, splits, make_split)


MAX_SIZE = 4096  # --size: an image side (its pixels are allocated whole)
MAX_COUNT = 100_000  # --n_train, --n_test


@exits_on_user_error(memory_advice="lower --size")
def main(argv: list[str] | None = None) -> int:
    setup_logging()
    parser = OneParagraphParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("datasets"), help="parent folder")
    parser.add_argument("--size", type=Bounded(int, low=16, high=MAX_SIZE, name="size"), default=64,
                        help="image side S in pixels")
    parser.add_argument("--seed", type=seed_value, default=0)
    parser.add_argument("--n_train", type=Bounded(int, low=2, high=MAX_COUNT, name="n_train"), default=200,
                        help="pix2pix training pairs; CycleGAN gets n_train/2 per domain")
    parser.add_argument("--n_test", type=Bounded(int, low=2, high=MAX_COUNT, name="n_test"), default=20,
                        help="pix2pix val and test pairs each; CycleGAN gets n_test/2 per domain")
    parser.add_argument("--task", choices=["pix2pix", "cyclegan", "both", "cut", "scenes", "bicyclegan", "volumes"],
                        default="both", help="cut: the CycleGAN demo and demo_cyclegan_pairs (its test images beside "
                        "their true striped counterparts, for scoring); scenes: label maps and rendered scenes, "
                        "unpaired; bicyclegan: the hue-turned pix2pix demo")
    args = parser.parse_args(argv)
    reason = unwritable_folder_reason(str(args.out))
    if reason:
        parser.error(f"argument --out: cannot make the demo datasets in {args.out} ({reason}); choose another --out")
    if args.task in ("pix2pix", "both"):
        make_pix2pix_demo(args.out, args.size, args.seed, args.n_train, args.n_test, args.n_test)
    if args.task in ("cyclegan", "both", "cut"):
        make_cyclegan_demo(args.out, args.size, args.seed, args.n_train // 2, args.n_test // 2)
    if args.task == "scenes":
        make_scenes_demo(args.out, args.size, args.seed, args.n_train // 2, args.n_test)
    if args.task == "bicyclegan":
        make_bicyclegan_demo(args.out, args.size, args.seed, args.n_train, args.n_test, args.n_test)
    if args.task == "cut":
        make_cyclegan_pairs(args.out, args.size, args.seed, args.n_test // 2)
    if args.task == "volumes":
        make_volume_demo(args.out, args.seed)
    return 0


if __name__ == "__main__":
    exit_with_status(main())
