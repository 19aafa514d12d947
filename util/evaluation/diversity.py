"""How different the answers of a model with many answers per input are (BicycleGAN's samples).

The diversity of one input's N samples is the mean distance over its N(N-1)/2 pairs; the score is the
mean over inputs (Zhu et al. 2017, sec. 5: "average LPIPS distance between pairs of random samples").
  diversity_L1     mean absolute difference in [-1, 1] units: always computed, needs no weights;
  diversity_LPIPS  LPIPS (Zhang et al. 2018, AlexNet features with its linear calibration: the paper's
                   measure) through torchmetrics; 1-channel images are tiled to RGB, other channel counts
                   have none.
LPIPS needs torchvision's ImageNet AlexNet weights (`alexnet-owt-7be5be79.pth` in torch's hub cache,
where torchvision downloads it on first use); torchmetrics ships LPIPS's own linear layers. As for FID's
Inception weights (util/evaluation/inception.py), a missing file is downloaded once, giving up within
seconds when the network is unreachable and never trying with $IMG2IMG_OFFLINE=1; without it
diversity_LPIPS is left out with a message saying where to put the file.
Scores are gathered over all processes by torchmetrics (as the other metrics are).
"""
from __future__ import annotations

import math
import os
import warnings
from itertools import combinations
from typing import Sequence

import torch
from torch import nn

from util import distributed
from util.evaluation.inception import download_weights, downloads_allowed, inception_weights_dir, refuse_stored_code

ALEXNET_WEIGHTS_URL = "https://download.pytorch.org/models/alexnet-owt-7be5be79.pth"  # torchvision's AlexNet_Weights
ALEXNET_WEIGHTS_NAME = ALEXNET_WEIGHTS_URL.rsplit("/", 1)[1]


def lpips_weights_path() -> str:
    """Where torchvision looks for (and downloads) AlexNet's weights: $TORCH_HOME/hub/checkpoints."""
    return os.path.join(inception_weights_dir(), ALEXNET_WEIGHTS_NAME)


def ensure_lpips_weights() -> bool:
    """Whether LPIPS can run: AlexNet's weights are in the hub cache, or were just downloaded there."""
    target = lpips_weights_path()
    if os.path.isfile(target):
        return True
    return downloads_allowed() and download_weights(ALEXNET_WEIGHTS_URL, target)


def missing_lpips_weights_message() -> str:
    why = ("$IMG2IMG_OFFLINE=1 forbids downloading it" if not downloads_allowed()
           else "it could not be downloaded (no internet access?)")
    return (f"LPIPS needs torchvision's AlexNet weights {ALEXNET_WEIGHTS_NAME}, which is not in "
            f"{os.path.dirname(lpips_weights_path())}/ and {why}. On a machine with internet access download "
            f"{ALEXNET_WEIGHTS_URL} and put it there (that is $TORCH_HOME/hub/checkpoints). See docs/evaluation.md.")


def load_lpips(device: torch.device | str = "cpu") -> nn.Module:
    """torchmetrics' LPIPS (AlexNet) on `device`, taking images in [-1, 1]; ensure_lpips_weights() first.
    A UserError naming AlexNet's file if it holds anything but tensors (code stored in it is never run)."""
    from torchmetrics.image.lpip import LearnedPerceptualImagePatchSimilarity  # heavy import: only when scored

    refuse_stored_code(lpips_weights_path(), "AlexNet (LPIPS)",
                       f"Delete it and put the official {ALEXNET_WEIGHTS_URL} there (see docs/evaluation.md).")
    return LearnedPerceptualImagePatchSimilarity(net_type="alex", reduction="mean", normalize=False).to(device)


class SampleDiversity:
    """Accumulate the diversity of each input's samples; `compute()` over all processes (collective)."""

    def __init__(self, device: torch.device | str = "cpu", lpips: bool = False) -> None:
        """`lpips`: also LPIPS, when its weights can be had (`skipped` says why not otherwise)."""
        from torchmetrics import MeanMetric

        self.device = torch.device(device)
        self.skipped: dict[str, str] = {}
        self.means: dict[str, nn.Module] = {"diversity_L1": MeanMetric().to(self.device)}  # over all pairs
        self.lpips: nn.Module | None = None
        # every process must make the same choice, or their gatherings in compute() would not match
        if lpips and distributed.any_rank(not ensure_lpips_weights()):
            self.skipped["diversity_LPIPS"] = missing_lpips_weights_message()
        elif lpips:
            self.lpips = load_lpips(self.device)
            self.means["diversity_LPIPS"] = self.lpips

    @torch.no_grad()
    def update(self, samples: Sequence[torch.Tensor]) -> None:
        """The N samples (each 1xCxHxW in [-1, 1]) of one input; fewer than 2 have no diversity."""
        if len(samples) < 2:
            self.skipped["diversity_L1"] = "diversity needs at least 2 samples per input (--n_samples 2 or more)"
            return
        pairs = list(combinations([s.detach().to(self.device, torch.float32) for s in samples], 2))
        self.means["diversity_L1"].update(torch.stack([(a - b).abs().mean() for a, b in pairs]))
        if self.lpips is None:
            return
        channels = samples[0].shape[1]
        if channels not in (1, 3):
            self.skipped["diversity_LPIPS"] = f"LPIPS needs 1- or 3-channel images; the samples have {channels}"
            return
        first = torch.cat([a for a, _ in pairs]).expand(-1, 3, -1, -1).clamp(-1, 1)
        second = torch.cat([b for _, b in pairs]).expand(-1, 3, -1, -1).clamp(-1, 1)
        # Every input has N samples: the pairs' mean is the inputs' mean.
        self.means["diversity_LPIPS"].update(first, second)

    def compute(self) -> dict[str, float]:
        """The mean over inputs of each score, over every process (every process must call it)."""
        result = {}
        with warnings.catch_warnings():
            # a process may have had no inputs and still takes part in the gathering
            warnings.filterwarnings("ignore", message=".*was called before the ``update`` method")
            for key, mean in self.means.items():
                value = float(mean.compute())
                if math.isnan(value):  # no input was scored on any process
                    self.skipped.setdefault(key, "no input had 2 or more samples")
                else:
                    result[key] = value
                    self.skipped.pop(key, None)
        return result
