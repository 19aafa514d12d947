"""What the volume tests share (tests/test_volumes.py, tests/test_gpu.py): NIfTI files written, a real scan
cut into pairs to train and test on, tiny unpaired volumes, and the small 3-D networks' flags. Needs nibabel
(imported without it, this module skips the test module that imports it)."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

nib = pytest.importorskip("nibabel")

REAL_SCAN = Path(os.path.dirname(nib.__file__)) / "tests" / "data" / "anatomical.nii"
GENERATOR = ["--netG", "resnet_6blocks_3d", "--ngf", "4", "--input_nc", "1", "--output_nc", "1", "--num_threads", "0",
             "--seed", "0"]
SMALL_NETS = [*GENERATOR, "--netD", "n_layers_3d", "--n_layers_D", "1", "--ndf", "4", "--display_id", "0"]


def save_nifti(path: Path, values: np.ndarray, affine: np.ndarray) -> None:
    """`values` as a float32 NIfTI file at `path` (its folders made), placed by `affine`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    nib.save(nib.Nifti1Image(values.astype(np.float32), affine), str(path))


def blurred(volume: np.ndarray) -> np.ndarray:
    """A 3x3x3 box blur (edges replicated)."""
    padded = torch.nn.functional.pad(torch.from_numpy(volume)[None, None], [1] * 6, mode="replicate")
    return torch.nn.functional.avg_pool3d(padded, 3, stride=1)[0, 0].numpy()


def real_scan_pairs_in(root: Path) -> Path:
    """`root`, holding the real MRI scan cut in two halves across its second axis: the first half to train
    on, the second to test on. B is the scan, A a copy in another contrast, blurred and noisy (conftest's
    `real_scan_pairs` fixture)."""
    image = nib.load(str(REAL_SCAN))
    scan = np.asarray(image.dataobj, dtype=np.float32)  # 33 x 41 x 25, 2 mm voxels
    noise = np.random.default_rng(0)
    for phase, part in (("train", slice(0, 20)), ("test", slice(21, 41))):
        target = scan[:, part, :]
        affine = image.affine.copy()  # the half's own place in the scanner
        affine[:3, 3] += image.affine[:3, :3] @ np.array([0, part.start, 0])
        degraded = 16000 - 0.8 * blurred(target) + noise.normal(0, 400, target.shape)
        save_nifti(root / f"{phase}A" / "scan.nii", degraded, affine)
        save_nifti(root / f"{phase}B" / "scan.nii", target, affine)
    return root


def pix2pix_args(root: Path, ckpt: Path, name: str, *extra: str, networks: list[str] = SMALL_NETS) -> list[str]:
    """pix2pix on the aligned volumes in `root` (16-voxel patches, values 0..20000) with `networks`' flags."""
    return ["--dataroot", str(root), "--name", name, "--checkpoints_dir", str(ckpt), "--model", "pix2pix",
            "--dataset_mode", "aligned_volume", "--data_range", "0", "20000", "--patch_size", "16", *networks, *extra]


def synthetic_volumes(root: Path, count: int = 2, shape: tuple[int, int, int] = (12, 12, 12)) -> Path:
    """Unpaired volumes: smooth random fields in A, their squares in B."""
    rng = np.random.default_rng(1)
    for side in "AB":
        for i in range(count):
            field = blurred(rng.normal(size=shape).astype(np.float32))
            values = field if side == "A" else field ** 2
            save_nifti(root / f"train{side}" / f"v{i}.nii", values, np.diag([1.5, 1.5, 3, 1]))
    return root
