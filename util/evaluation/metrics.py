"""Image-translation metrics: one implementation for validation, `test.py` and `scripts/evaluate.py`.

`TranslationMetrics` accumulates torchmetrics metrics over batches of network images (NxCxHxW in
[-1, 1], any C >= 1) and computes them over all processes: torchmetrics gathers its states through
torch.distributed when a process group is initialised, so `compute()` gives every rank the value of
the whole set, equal (within 1e-6) to one process scoring the same images, however unevenly they were
split. The metrics (docs/evaluation.md):

  L1     mean over images of the mean absolute difference, in [-1, 1] units (0 identical, 2 maximal);
  PSNR   mean over images of each image's PSNR in dB (the convention of image-translation papers),
         data range 2 (the full [-1, 1] range); inf for an exactly reproduced image;
  SSIM   mean over images of SSIM (Wang et al. 2004: 11x11 Gaussian window, sigma 1.5, K1 0.01,
         K2 0.03, each channel separately, then averaged) of the images mapped to [0, 1], data
         range 1 (as 8-bit images are 0..255: SSIM, unlike PSNR, depends on the offset); images under
         11 px have none;
  FID    Frechet distance of Inception-v3 pool3 features (torch-fidelity's network, util/evaluation/inception.py)
         of the outputs and of the real images of the target domain, torchmetrics' FID computed exactly
         in milliseconds (util/evaluation/fid_kid.frechet_distance); the images
         are the 8-bit values the saved files hold; 1-channel images are tiled to RGB, other
         channel counts than 1 and 3 have no FID/KID;
  KID    torchmetrics' KID (mean; KID..._std the standard deviation) over `kid_subsets` subsets of
         min(kid_subset_size, images) images each, drawn with a fixed seed from the features put in
         a canonical order, so the value depends on the images only, not on how they were split.

Volumes (N x C x D x H x W, docs/volumes.md) get L1, PSNR and SSIM too, SSIM with an 11x11x11 Gaussian
window (torchmetrics computes it in 3-D), and MAE: L1 in the target's original units (e.g. Hounsfield
units), from the half-width of its --data_range window. With a mask (`--eval_mask foreground`: the target's
voxels above the low end of its window by more than 5% of it, the body rather than the air around it) each
is taken inside the mask: torchmetrics has no masks, so the per-volume values are computed here (SSIM as
the mean of torchmetrics' SSIM map inside the mask) and averaged over volumes. FID/KID have no 3-D
version: volumes have none.

Keys: `pairs` maps a name to (output visual, target visual), as the model declares them
(models/base_model.BaseModel.scored_pairs); its metrics are keyed `<metric>` for the
name "" and `<metric>_<name>` otherwise: {"": ("fake_B", "real_B")} gives L1, PSNR, SSIM (and FID,
KID, KID_std); CycleGAN's {"B": ("fake_B", "real_B"), "A": ("fake_A", "real_A")} gives FID_B (the
A->B generator's outputs vs real B images), KID_B, FID_A (B->A), KID_A. `higher_is_better` says which
way each key improves.
"""
from __future__ import annotations

import hashlib
import math
import warnings
from typing import Collection, Mapping

import torch
from torch import nn

from util import distributed
from util.errors import UserError
from util.evaluation.inception import (
    ensure_inception_weights,
    load_inception,
    missing_inception_weights_message,
    to_uint8,
)
from util.evaluation.ssim import ssim_map_3d

# Which way each metric improves (the best-checkpoint code reads it through `higher_is_better`).
HIGHER_IS_BETTER = {"L1": False, "PSNR": True, "SSIM": True, "MAE": False, "FID": False, "KID": False}
PAIRED_METRICS = ("L1", "PSNR", "SSIM")
DISTRIBUTION_METRICS = ("FID", "KID")
SSIM_MIN_SIDE = 11  # the Gaussian window is 11x11 (11x11x11 for volumes)
FOREGROUND_LEVEL = 0.05  # of the window above its low end: --eval_mask foreground (and patch sampling's)
EVAL_MASKS = ("none", "foreground")
KID_SUBSETS, KID_SUBSET_SIZE = 100, 1000  # torch-fidelity's and torchmetrics' defaults


def metric_key(metric: str, name: str) -> str:
    return metric if not name else f"{metric}_{name}"


def higher_is_better(key: str) -> bool:
    """Whether a larger value of the metric `key` (e.g. "PSNR", "FID_B", "KID_A") is better.
    A UserError listing the known metrics for any other key."""
    metric = key.split("_", 1)[0]
    if metric not in HIGHER_IS_BETTER or key.endswith("_std"):
        better = ", ".join(f"{m} ({'higher' if up else 'lower'} is better)" for m, up in HIGHER_IS_BETTER.items())
        raise UserError(f"{key} is not a metric that can be compared; use one of {better}, with the direction "
                        f"suffix for CycleGAN (e.g. FID_B: fake B images vs real B images).")
    return HIGHER_IS_BETTER[metric]


def needs_inception(key: str) -> bool:
    """Whether the metric `key` needs the Inception weights (FID and KID do)."""
    return key.split("_", 1)[0] in DISTRIBUTION_METRICS


def expected_keys(pairs: Mapping[str, tuple[str, str | None]], paired: bool, distribution: bool,
                  volume_units: Mapping[str, float] | None = None) -> list[str]:
    """The keys `TranslationMetrics(pairs, paired, distribution, volume_units=...).compute()` returns when
    nothing is skipped."""
    keys = []
    for name, (_, target) in pairs.items():
        if paired and target is not None:
            keys += [metric_key(m, name) for m in PAIRED_METRICS]
            if volume_units is not None and name in volume_units:
                keys.append(metric_key("MAE", name))
        if distribution and volume_units is None:
            keys += [metric_key("FID", name), metric_key("KID", name), metric_key("KID", name) + "_std"]
    return keys


class TranslationMetrics:
    """Accumulate metrics over batches; `compute()` them over all processes (see the module docstring).

    pairs         name -> (output visual, target visual or None); see the module docstring for keys.
    paired        L1, PSNR, SSIM of each output against its target (pairs with a target).
    distribution  FID and KID of each pair's outputs against its targets, or against the images given
                  to `add_reference` for the pairs named in `external_reference`.
    Without Inception weights (util/evaluation/inception.py), FID/KID are left out and `skipped` says why; the
    weights are looked up (and, online, downloaded) once here: build one object and `reset()` it.
    reference_cache  features of real images seen before (validation scores the same held-out images
                  every time; they may be shared with the EMA's metrics): only new ones go through Inception.
    volume_units  for volumes: pair name -> the half-width of its target's window in original units (MAE);
                  None for pictures. `mask`: one of EVAL_MASKS (volumes only).
    `compute()` is collective under torch.distributed: every process must call it.
    """

    def __init__(self, pairs: Mapping[str, tuple[str, str | None]], paired: bool = True, distribution: bool = False,
                 device: torch.device | str = "cpu", inception_weights: str | None = None,
                 external_reference: Collection[str] = (), kid_subsets: int = KID_SUBSETS,
                 kid_subset_size: int = KID_SUBSET_SIZE, reference_cache: "ReferenceFeatures | None" = None,
                 volume_units: Mapping[str, float] | None = None, mask: str = "none") -> None:
        self.pairs = dict(pairs)
        self.volume_units = None if volume_units is None else dict(volume_units)
        self.mask = mask
        self.device = torch.device(device)
        self.external_reference = set(external_reference)
        self.skipped: dict[str, str] = {}  # key -> why compute() leaves it out
        self.image_counts: dict[str, dict[str, int]] = {}  # after compute(): name -> images over all processes
        self._counts = {name: {"paired": 0, "outputs": 0, "reference": 0} for name in self.pairs}
        per_pair = _paired_metrics if volume_units is None else _volume_metrics
        self.paired = {name: per_pair(self.device) for name, (_, target) in self.pairs.items()
                       if paired and target is not None}
        if distribution and volume_units is not None:
            self.skipped.update({key: "FID/KID compare 2-D pictures (Inception-v3 features); volumes have none"
                                 for key in expected_keys(self.pairs, False, True)})
            distribution = False
        self.inception: nn.Module | None = None
        self.reference_cache = reference_cache
        self.distribution: dict[str, nn.Module] = {}  # name -> its InceptionFeatureDistances
        if distribution:
            weights = ensure_inception_weights(inception_weights)
            # every process must make the same choice, or their collectives would not match
            if distributed.any_rank(weights is None):
                self.skipped.update({key: missing_inception_weights_message()
                                     for key in expected_keys(self.pairs, False, True)})
            else:
                from util.evaluation.fid_kid import InceptionFeatureDistances  # torchmetrics: seconds to import

                self.inception = load_inception(weights, self.device)
                self.distribution = {name: InceptionFeatureDistances(kid_subsets, kid_subset_size).to(self.device)
                                     for name in self.pairs}

    @torch.no_grad()
    def update(self, visuals: Mapping[str, torch.Tensor]) -> None:
        """Add a batch: `visuals` maps visual names to NxCxHxW tensors in [-1, 1] (the model's
        get_current_visuals()); every output and target named in `pairs` must be there."""
        for name, (output_name, target_name) in self.pairs.items():
            output = visuals[output_name].detach().to(self.device)
            target = visuals[target_name].detach().to(self.device) if target_name is not None else None
            if name in self.paired:
                self._update_paired(name, output, target)
            if name in self.distribution:
                self._update_distribution(name, output, real=False)
                if target is not None and name not in self.external_reference:
                    self._update_distribution(name, target, real=True)

    @torch.no_grad()
    def add_reference(self, name: str, images: torch.Tensor) -> None:
        """Add real images (NxCxHxW in [-1, 1]) that FID/KID of pair `name` compare its outputs with."""
        if name in self.distribution:
            self._update_distribution(name, images.detach().to(self.device), real=True)

    def _update_paired(self, name: str, output: torch.Tensor, target: torch.Tensor) -> None:
        if output.shape != target.shape:
            raise UserError(f"{self.pairs[name][0]} is {tuple(output.shape)} but its target {self.pairs[name][1]} is "
                            f"{tuple(target.shape)}; paired metrics need images of the same size.")
        output, target = output.double(), target.double()
        metrics = self.paired[name]
        if self.volume_units is not None:
            self._update_volumes(name, output, target)
            return
        metrics["L1"].update((output - target).abs().mean(dim=(1, 2, 3)))
        metrics["PSNR"].update(output, target)
        if min(output.shape[-2:]) >= SSIM_MIN_SIDE:
            # SSIM's luminance term needs non-negative intensities: [0, 1], as 8-bit images are 0..255
            metrics["SSIM"].update((output + 1) / 2, (target + 1) / 2)
        else:
            self.skipped[metric_key("SSIM", name)] = f"images under {SSIM_MIN_SIDE} px have no SSIM"
        self._counts[name]["paired"] += len(output)

    def _update_volumes(self, name: str, output: torch.Tensor, target: torch.Tensor) -> None:
        """Each volume's L1, PSNR, SSIM and MAE (inside the mask, see the module docstring)."""
        if output.ndim != 5:
            raise UserError(f"{self.pairs[name][0]} is {tuple(output.shape)}, not a batch of volumes "
                            f"(N x C x D x H x W); volume metrics need volumes.")
        metrics = self.paired[name]
        mask = foreground_mask(target) if self.mask == "foreground" else torch.ones_like(target, dtype=torch.bool)
        weight = mask.to(output.dtype)
        voxels = weight.sum(dim=(1, 2, 3, 4)).clamp(min=1)
        l1 = ((output - target).abs() * weight).sum(dim=(1, 2, 3, 4)) / voxels
        mse = ((output - target) ** 2 * weight).sum(dim=(1, 2, 3, 4)) / voxels
        metrics["L1"].update(l1)
        metrics["PSNR"].update(10 * torch.log10(4.0 / mse))  # data range 2: [-1, 1]
        if "MAE" in metrics and name in self.volume_units:
            metrics["MAE"].update(l1 * self.volume_units[name])
        if min(output.shape[2:]) >= SSIM_MIN_SIDE:
            ssim_map = ssim_map_3d((output + 1) / 2, (target + 1) / 2, data_range=1.0)  # torchmetrics' SSIM, faster
            metrics["SSIM"].update((ssim_map * weight).sum(dim=(1, 2, 3, 4)) / voxels)
        else:
            self.skipped[metric_key("SSIM", name)] = f"volumes under {SSIM_MIN_SIDE} voxels a side have no SSIM"
        self._counts[name]["paired"] += len(output)

    def _update_distribution(self, name: str, images: torch.Tensor, real: bool) -> None:
        channels = images.shape[1]
        if channels not in (1, 3):
            why = f"FID/KID need 1- or 3-channel images; {self.pairs[name][0]} has {channels} channels"
            self.skipped.update({metric_key("FID", name): why, metric_key("KID", name): why})
            return
        uint8 = to_uint8(images.expand(-1, 3, -1, -1))
        if real and self.reference_cache is not None:
            features = self.reference_cache.features(uint8, self.inception).double()
        else:
            features = self.inception(uint8).double()
        self.distribution[name].update(features, real=real)
        self._counts[name]["reference" if real else "outputs"] += len(images)

    def compute(self) -> dict[str, float]:
        """The metrics over every image given to every process (collective: all processes call it)."""
        with warnings.catch_warnings():
            # a process may have had no images (or none for SSIM) and still takes part in the gathering
            warnings.filterwarnings("ignore", message=".*was called before the ``update`` method")
            return self._compute()

    def _compute(self) -> dict[str, float]:
        self.image_counts = _global_counts(self._counts, self.device)
        result: dict[str, float] = {}
        for name in self.pairs:
            for metric, module in self.paired.get(name, {}).items():
                value = float(module.compute())
                if math.isnan(value):  # no images, or (SSIM) none of its minimum size
                    self.skipped.setdefault(metric_key(metric, name), "no images were scored")
                else:
                    result[metric_key(metric, name)] = value
            if name not in self.distribution:
                continue
            fake, real = self.image_counts[name]["outputs"], self.image_counts[name]["reference"]
            if min(fake, real) < 2:
                why = f"FID/KID need at least 2 output and 2 reference images, got {fake} and {real}"
                for key in (metric_key("FID", name), metric_key("KID", name)):
                    self.skipped.setdefault(key, why)  # keep a reason given while updating
                continue
            distances = self.distribution[name].compute()
            result[metric_key("FID", name)] = float(distances["FID"])
            result[metric_key("KID", name)] = float(distances["KID"])
            result[metric_key("KID", name) + "_std"] = float(distances["KID_std"])
        for key in result:
            self.skipped.pop(key, None)
        return result

    def reset(self) -> None:
        """Forget the images seen so far (keep the networks and the settings)."""
        for metrics in self.paired.values():
            for module in metrics.values():
                module.reset()
        for module in self.distribution.values():
            module.reset()
        self._counts = {name: dict.fromkeys(counts, 0) for name, counts in self._counts.items()}
        self.image_counts = {}


class ReferenceFeatures:
    """Inception features of real images by content: an image already seen (the same 8-bit values) is
    not run through the network again. A batch of new images is computed whole, as without the cache,
    so a validation scores bit for bit as it would without it (and a resumed run as an uninterrupted one).
    Costs 8 KiB (2048 float32) per distinct image, kept for the cache's lifetime."""

    def __init__(self) -> None:
        self._rows: dict[bytes, torch.Tensor] = {}

    def __len__(self) -> int:
        return len(self._rows)

    def features(self, images: torch.Tensor, inception: nn.Module) -> torch.Tensor:
        """Nx2048 float32 features of Nx3xHxW uint8 `images`."""
        keys = [_content_key(image) for image in images]
        missing = [i for i, key in enumerate(keys) if key not in self._rows]
        if missing:
            computed = inception(images if len(missing) == len(keys) else images[missing])
            for i, row in zip(missing, computed):
                self._rows[keys[i]] = row
        return torch.stack([self._rows[key] for key in keys])


def _content_key(image: torch.Tensor) -> bytes:
    pixels = image.contiguous().cpu().numpy()
    return hashlib.blake2b(repr(pixels.shape).encode() + pixels.tobytes(), digest_size=20).digest()


def _paired_metrics(device: torch.device) -> dict[str, nn.Module]:
    from torchmetrics import MeanMetric  # imported here: torchmetrics takes seconds to import
    from torchmetrics.image import PeakSignalNoiseRatio, StructuralSimilarityIndexMeasure

    metrics = {
        "L1": MeanMetric(),
        "PSNR": PeakSignalNoiseRatio(data_range=(-1.0, 1.0), dim=(1, 2, 3), reduction="elementwise_mean"),
        "SSIM": StructuralSimilarityIndexMeasure(data_range=(0.0, 1.0), gaussian_kernel=True, sigma=1.5,
                                                 kernel_size=11, k1=0.01, k2=0.03),
    }
    # float64 states and inputs: sums taken in another order (other process counts) agree to ~1e-15.
    # set_dtype after .to(): torchmetrics' .to() resets the dtype that inputs are cast to.
    return {key: metric.to(device).set_dtype(torch.float64) for key, metric in metrics.items()}


def _volume_metrics(device: torch.device) -> dict[str, nn.Module]:
    """Means over volumes of each volume's L1, PSNR, SSIM and MAE (computed in `_update_volumes`)."""
    from torchmetrics import MeanMetric

    return {key: MeanMetric().to(device).set_dtype(torch.float64) for key in (*PAIRED_METRICS, "MAE")}


def foreground_mask(target: torch.Tensor) -> torch.Tensor:
    """The voxels of `target` (in [-1, 1]) above the low end of its window by more than FOREGROUND_LEVEL
    of it, in every channel's maximum: --eval_mask foreground."""
    return (target.amax(dim=1, keepdim=True) > -1.0 + 2.0 * FOREGROUND_LEVEL).expand_as(target)


def _global_counts(local: dict[str, dict[str, int]], device: torch.device) -> dict[str, dict[str, int]]:
    """The per-process image counts summed over all processes (one collective)."""
    flat = [(name, kind) for name, counts in local.items() for kind in counts]
    totals = torch.tensor([local[name][kind] for name, kind in flat], dtype=torch.int64, device=device)
    totals = distributed.all_reduce_sum_(totals).tolist()
    result: dict[str, dict[str, int]] = {name: {} for name in local}
    for (name, kind), total in zip(flat, totals):
        result[name][kind] = int(total)
    return result
