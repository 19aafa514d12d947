"""torchmetrics' FID and KID fed with Inception features computed beforehand (util.evaluation.metrics runs the
network once per image for both), with a KID whose value does not depend on how the images were split
over processes."""
from __future__ import annotations

import warnings

import numpy as np
import torch
from torch import nn
from torchmetrics.image.fid import FrechetInceptionDistance
from torchmetrics.image.kid import KernelInceptionDistance
from torchmetrics.utilities import dim_zero_cat

from util.evaluation.inception import FEATURE_DIM

KID_SEED = 0


class _GivenFeatures(nn.Module):
    """The 'feature network' of FID/KID when the features are what `update` receives."""

    num_features = FEATURE_DIM

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return features


class GivenFeaturesFID(FrechetInceptionDistance):
    """torchmetrics' FID whose `update(features, real)` takes Nx2048 Inception features."""

    def __init__(self) -> None:
        super().__init__(feature=_GivenFeatures())


class SplitInvariantKID(KernelInceptionDistance):
    """torchmetrics' KID on given Nx2048 features, whose value does not depend on how the images were
    split over processes.

    The feature states are concatenated per process before gathering ("cat"), so uneven shares (or
    none) take one collective each; compute() sorts the gathered features into a canonical order and
    draws its random subsets from a fixed seed; subsets are capped at the set sizes."""

    def __init__(self, subsets: int, subset_size: int) -> None:
        with warnings.catch_warnings():  # "will save all extracted features in buffer": that is the point
            warnings.simplefilter("ignore", UserWarning)
            super().__init__(feature=_GivenFeatures(), subsets=subsets, subset_size=subset_size)
        self.add_state("real_features", [], dist_reduce_fx="cat")
        self.add_state("fake_features", [], dist_reduce_fx="cat")
        self.max_subsets, self.max_subset_size = subsets, subset_size
        self.reset()

    def reset(self) -> None:
        super().reset()
        # every process holds at least one (maybe empty) tensor per state, so all gather the same way
        for state in (self.real_features, self.fake_features):
            state.append(torch.zeros(0, FEATURE_DIM, dtype=torch.float64, device=self.device))

    def compute(self) -> tuple[torch.Tensor, torch.Tensor]:
        real, fake = (_canonical_order(dim_zero_cat(state)) for state in (self.real_features, self.fake_features))
        self.real_features, self.fake_features = [real], [fake]
        self.subset_size = min(self.max_subset_size, len(real), len(fake))
        # when each subset is a whole set, all subsets are the same: compute it once
        self.subsets = 1 if self.subset_size == len(real) == len(fake) else self.max_subsets
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(KID_SEED)
            return super().compute()


def _canonical_order(features: torch.Tensor) -> torch.Tensor:
    """The rows of `features` sorted lexicographically: the same rows in any order give the same tensor."""
    if len(features) < 2:
        return features
    order = np.lexsort(features.detach().cpu().numpy().T[::-1])
    return features[torch.from_numpy(order).to(features.device)]
