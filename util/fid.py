"""FID and KID between two sets of images, from features of a fixed network.

FID (Heusel et al. 2017): ||mu1 - mu2||^2 + Tr(S1 + S2 - 2 (S1 S2)^(1/2)) of the features' means
and covariances; the matrix square root is scipy.linalg.sqrtm. KID (Binkowski et al. 2018): the
unbiased MMD^2 with the kernel k(x, y) = (x.y / d + 1)^3, averaged over random subsets (mean and
standard deviation). Both follow pytorch-fid / torch-fidelity conventions, so with the FID
Inception weights the numbers are comparable with published ones at equal image counts. FID is
biased upwards for small sets: compare values computed on the same number of images.

Feature extractors take Nx3xHxW images in [0, 1] and return NxD features:
  inception   Inception-v3 pool3 (2048-d); weights from a local file, never downloaded
              (`find_inception_weights` says where they are looked for);
  random_cnn  a small CNN with fixed, seeded random weights (64-d): deterministic and quick,
              for tests and smoke runs only - its values mean nothing outside them.
"""
from __future__ import annotations

import os
import warnings
from typing import Callable, Iterable, Sequence

import numpy as np
import scipy.linalg
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from util.errors import UserError
from util.fid_inception import FID_WEIGHTS_NAME, TORCHVISION_WEIGHTS_NAME, load_inception

WEIGHTS_ENV = "IMG2IMG_INCEPTION_WEIGHTS"
FEATURE_CHOICES = ("inception", "random_cnn")
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".ppm", ".tif", ".tiff", ".webp")


# ---------------------------------------------------------------------------- the formulas
def feature_statistics(features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and (unbiased, N-1) covariance of NxD features, in float64."""
    f = np.asarray(features, dtype=np.float64)
    if f.ndim != 2 or f.shape[0] < 2:
        raise ValueError(f"need at least 2 feature vectors (NxD), got shape {f.shape}")
    return f.mean(axis=0), np.cov(f, rowvar=False)


def frechet_distance(mu1: np.ndarray, sigma1: np.ndarray, mu2: np.ndarray, sigma2: np.ndarray,
                     eps: float = 1e-6) -> float:
    """Frechet distance between the Gaussians N(mu1, sigma1) and N(mu2, sigma2)."""
    diff = mu1 - mu2
    covmean = _sqrtm(sigma1 @ sigma2)
    if covmean is None:
        # A singular product (fewer images than feature dimensions) can defeat sqrtm; a tiny
        # ridge on both covariances makes it well defined, as pytorch-fid does.
        offset = np.eye(sigma1.shape[0]) * eps
        covmean = _sqrtm((sigma1 + offset) @ (sigma2 + offset), check=False)
    # Rounding can leave a negligible imaginary part; a large one means the input was not PSD.
    if np.iscomplexobj(covmean):
        covmean = covmean.real
    return float(diff @ diff + np.trace(sigma1) + np.trace(sigma2) - 2.0 * np.trace(covmean))


def _sqrtm(matrix: np.ndarray, check: bool = True) -> np.ndarray | None:
    """scipy's matrix square root; None (with `check`) when it is not finite or inaccurate."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", scipy.linalg.LinAlgWarning)  # judged by the residual below
        root = scipy.linalg.sqrtm(matrix)
    if not check:
        return root
    if not np.isfinite(root).all():
        return None
    scale = max(np.linalg.norm(matrix), 1e-300)
    return root if np.linalg.norm(root @ root - matrix) / scale < 1e-6 else None


def fid_from_features(features1: np.ndarray, features2: np.ndarray) -> float:
    """FID between two NxD feature sets (N may differ between the sets)."""
    return frechet_distance(*feature_statistics(features1), *feature_statistics(features2))


def polynomial_mmd2(x: np.ndarray, y: np.ndarray) -> float:
    """Unbiased MMD^2 of feature sets x (m x d) and y (n x d), kernel (x.y / d + 1)^3."""
    d = x.shape[1]
    kxx = (x @ x.T / d + 1.0) ** 3
    kyy = (y @ y.T / d + 1.0) ** 3
    kxy = (x @ y.T / d + 1.0) ** 3
    m, n = x.shape[0], y.shape[0]
    return float((kxx.sum() - np.trace(kxx)) / (m * (m - 1)) + (kyy.sum() - np.trace(kyy)) / (n * (n - 1))
                 - 2.0 * kxy.mean())


def kid_from_features(features1: np.ndarray, features2: np.ndarray, subsets: int = 100,
                      subset_size: int = 1000, seed: int = 0) -> tuple[float, float]:
    """KID (mean, std) over `subsets` random subsets of min(subset_size, N1, N2) images of each
    set, drawn without replacement with a seeded generator (the same inputs give the same value)."""
    x = np.asarray(features1, dtype=np.float64)
    y = np.asarray(features2, dtype=np.float64)
    size = min(subset_size, x.shape[0], y.shape[0])
    if size < 2:
        raise ValueError("KID needs at least 2 images in each set")
    rng = np.random.default_rng(seed)
    values = [polynomial_mmd2(x[rng.choice(x.shape[0], size, replace=False)],
                              y[rng.choice(y.shape[0], size, replace=False)]) for _ in range(subsets)]
    return float(np.mean(values)), float(np.std(values))


# ---------------------------------------------------------------------------- feature extractors
class RandomCNNFeatures(nn.Module):
    """A fixed random CNN (3 strided convs, mean and std pooling -> 64-d) whose weights depend only
    on `seed`, not on the global RNG. For tests and smoke runs: not a perceptual metric."""

    input_size = 64

    def __init__(self, seed: int = 0):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        channels = [3, 16, 32, 32]
        self.weights = nn.ParameterList()
        for cin, cout in zip(channels[:-1], channels[1:]):
            w = torch.randn(cout, cin, 3, 3, generator=gen) * (2.0 / (cin * 9)) ** 0.5
            self.weights.append(nn.Parameter(w, requires_grad=False))
        self.dim = 2 * channels[-1]
        self.name = f"random_cnn-seed{seed}"

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = F.interpolate(images, size=(self.input_size, self.input_size), mode="bilinear", align_corners=False)
        x = 2.0 * x - 1.0
        for w in self.weights:
            x = F.relu(F.conv2d(x, w, stride=2, padding=1))
        return torch.cat([x.mean(dim=(2, 3)), x.std(dim=(2, 3))], dim=1)


def find_inception_weights(explicit: str | None = None) -> str | None:
    """The Inception weights file to use: `explicit` (must exist), else $IMG2IMG_INCEPTION_WEIGHTS,
    else pytorch-fid's file in torch's hub cache ($TORCH_HOME/hub/checkpoints/); None if none."""
    for path, origin in ((explicit, "--inception_weights"), (os.environ.get(WEIGHTS_ENV), f"${WEIGHTS_ENV}")):
        if path:
            if not os.path.isfile(path):
                raise UserError(f"{origin} {path} is not a file; {weights_help()}")
            return path
    cached = os.path.join(torch.hub.get_dir(), "checkpoints", FID_WEIGHTS_NAME)
    return cached if os.path.isfile(cached) else None


def weights_help() -> str:
    """Where to put the Inception weights (they are never downloaded at run time)."""
    cache = os.path.join(torch.hub.get_dir(), "checkpoints")
    return (f"FID/KID need Inception weights, which are not downloaded at run time. On a machine with "
            f"internet access get {FID_WEIGHTS_NAME} (pytorch-fid's release: https://github.com/mseitzer/"
            f"pytorch-fid/releases/download/fid_weights/{FID_WEIGHTS_NAME}) and put it in {cache}/ "
            f"(or pass --inception_weights PATH, or set ${WEIGHTS_ENV}); torchvision's {TORCHVISION_WEIGHTS_NAME} "
            f"also works via --inception_weights but its FID is not comparable with published values. "
            f"See docs/evaluation.md.")


def make_extractor(kind: str = "inception", weights: str | None = None,
                   device: str | torch.device = "cpu") -> nn.Module:
    """The feature network named `kind` (FEATURE_CHOICES) in eval mode on `device`. For
    'inception' the weights come from `find_inception_weights(weights)`; UserError if none."""
    if kind == "random_cnn":
        return RandomCNNFeatures().eval().to(device)
    if kind != "inception":
        raise UserError(f"--fid_features {kind} is unknown; choose one of {', '.join(FEATURE_CHOICES)}.")
    path = find_inception_weights(weights)
    if path is None:
        raise UserError(weights_help())
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        if isinstance(state, dict) and "state_dict" in state:
            state = state["state_dict"]
        model = load_inception(state)
    except Exception as err:  # not a file of Inception-v3 weights: say which file and why
        raise UserError(f"{path} is not a file of Inception-v3 weights ({type(err).__name__}: "
                        f"{str(err).splitlines()[0][:300]}); {weights_help()}") from None
    return model.to(device)


# ---------------------------------------------------------------------------- images to features
def list_images(folder: str, suffix: str = "") -> list[str]:
    """Image files directly in `folder` whose name (without extension) ends with `suffix`, sorted."""
    if not os.path.isdir(folder):
        raise UserError(f"image folder {folder} does not exist; pass a folder of images.")
    names = sorted(n for n in os.listdir(folder)
                   if n.lower().endswith(IMAGE_EXTENSIONS) and os.path.splitext(n)[0].endswith(suffix))
    return [os.path.join(folder, n) for n in names]


def load_rgb(path: str) -> torch.Tensor:
    """An image file as a 3xHxW float tensor in [0, 1]."""
    try:
        with Image.open(path) as img:
            array = np.asarray(img.convert("RGB"), dtype=np.uint8)
    except (OSError, ValueError) as err:
        raise UserError(f"cannot read image {path} ({err}); remove or replace the file.") from None
    return torch.from_numpy(array.copy()).permute(2, 0, 1).float() / 255.0


@torch.no_grad()
def extract_features(paths: Sequence[str], extractor: nn.Module, batch_size: int = 32,
                     device: str | torch.device = "cpu",
                     progress: Callable[[int, int], None] | None = None) -> np.ndarray:
    """NxD float64 features of the images at `paths` (any sizes: each is resized to the
    extractor's input size first, which is what the extractor would do itself)."""
    size = extractor.input_size
    chunks = []
    for start in range(0, len(paths), batch_size):
        batch = [F.interpolate(load_rgb(p)[None], size=(size, size), mode="bilinear", align_corners=False)
                 for p in paths[start:start + batch_size]]
        chunks.append(extractor(torch.cat(batch).to(device)).double().cpu().numpy())
        if progress:
            progress(min(start + batch_size, len(paths)), len(paths))
    return np.concatenate(chunks) if chunks else np.zeros((0, getattr(extractor, "dim", 0)))


def fid_kid(generated: Iterable[str], reference: Iterable[str], extractor: nn.Module,
            batch_size: int = 32, device: str | torch.device = "cpu", kid_subsets: int = 100,
            kid_subset_size: int = 1000) -> dict[str, float | int | str]:
    """FID and KID between two lists of image files; a UserError if a set has < 2 images."""
    generated, reference = list(generated), list(reference)
    for label, paths in (("generated", generated), ("reference", reference)):
        if len(paths) < 2:
            raise UserError(f"FID/KID need at least 2 {label} images, found {len(paths)}; translate more "
                            f"images (--num_test) or point the reference folder at more images.")
    f1 = extract_features(generated, extractor, batch_size, device)
    f2 = extract_features(reference, extractor, batch_size, device)
    kid_mean, kid_std = kid_from_features(f1, f2, kid_subsets, kid_subset_size)
    return {"FID": fid_from_features(f1, f2), "KID_mean": kid_mean, "KID_std": kid_std,
            "fid_generated_images": len(generated), "fid_reference_images": len(reference),
            "fid_features": getattr(extractor, "name", type(extractor).__name__)}
