"""Score fixed images with util.evaluation.metrics and write the results as JSON: run it as one process or under
torchrun (tests/test_metrics_distributed.py compares the two).

    python tests/metrics_ddp_script.py OUT.json
    torchrun --nproc_per_node=2 tests/metrics_ddp_script.py OUT.json

Each process takes its share of the images as test.py and validation do (data.samplers
InferenceShardSampler: rank r gets r, r + world, ...; 5 images -> 3 and 2) in batches of 2, so the
split and the batches differ from one process. FID/KID need Inception weights in $TORCH_HOME.
"""
from __future__ import annotations

import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from data.samplers import InferenceShardSampler  # noqa: E402
from util import distributed  # noqa: E402
from util.evaluation.fid_kid import InceptionFeatureDistances  # noqa: E402
from util.evaluation.metrics import TranslationMetrics  # noqa: E402

IMAGES, BATCH = 5, 2


def images(seed: int, channels: int = 3, size: int = 32) -> torch.Tensor:
    """Smooth random images in [-1, 1] (not noise, so that SSIM and FID have something to see)."""
    generator = torch.Generator().manual_seed(seed)
    coarse = torch.rand(IMAGES, channels, size // 4, size // 4, generator=generator)
    return torch.nn.functional.interpolate(coarse, size=(size, size), mode="bilinear") * 2 - 1


def main(out_path: str) -> None:
    ctx = distributed.init_distributed("cpu")
    torch.set_num_threads(1)
    real_B = images(1)
    visuals = {"fake_B": (real_B + 0.3 * images(2)).clamp(-1, 1), "real_B": real_B,
               "fake_A": images(3, channels=1), "real_A": images(4, channels=1)}
    mine = InferenceShardSampler(IMAGES, ctx.rank, ctx.world_size).indices
    # paired metrics and FID/KID (random KID subsets: 3 of 5 images) of the B images; paired metrics of
    # the 1-channel A images (their FID would only cost Inception time)
    metrics_B = TranslationMetrics({"B": ("fake_B", "real_B")}, paired=True, distribution=True, kid_subsets=20,
                                   kid_subset_size=3)
    metrics_A = TranslationMetrics({"A": ("fake_A", "real_A")}, paired=True)
    for start in range(0, len(mine), BATCH):
        batch = mine[start:start + BATCH]
        for metrics in (metrics_B, metrics_A):
            metrics.update({name: image[batch] for name, image in visuals.items()})
    result = {"metrics": {**metrics_B.compute(), **metrics_A.compute()}, "counts": metrics_B.image_counts,
              "skipped": metrics_B.skipped}
    # a process with no images at all: only rank 0 has the single image (and all the FID/KID features)
    lonely = TranslationMetrics({"": ("fake_B", "real_B")}, paired=True)
    distances = InceptionFeatureDistances(subsets=10, subset_size=3)
    if ctx.rank == 0:
        lonely.update({name: image[:1] for name, image in visuals.items()})
        features = torch.randn(8, 2048, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
        distances.update(features[:4], real=True)
        distances.update(features[4:], real=False)
    result["lonely"] = lonely.compute()
    result["distances_on_one_rank"] = {key: float(value) for key, value in distances.compute().items()}
    if ctx.is_main:
        with open(out_path, "w") as f:
            json.dump(result, f, indent=1)
    distributed.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
