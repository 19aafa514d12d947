"""FID and KID of Inception features computed beforehand (util.evaluation.metrics runs the network once per
image for both): torchmetrics' KID, and an FID computed from the same features, with values that do not
depend on how the images were split over processes."""
from __future__ import annotations

import warnings

import numpy as np
import torch
from torch import nn
from torchmetrics.image.kid import KernelInceptionDistance
from torchmetrics.utilities import dim_zero_cat

from util.evaluation.inception import FEATURE_DIM

KID_SEED = 0


class _GivenFeatures(nn.Module):
    """The 'feature network' of KID when the features are what `update` receives."""

    num_features = FEATURE_DIM

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return features


class InceptionFeatureDistances(KernelInceptionDistance):
    """FID and KID of given Nx2048 features: `update(features, real)`, then `compute()` ->
    {"FID", "KID", "KID_std"}, with values that do not depend on how the images were split over processes.

    KID is torchmetrics'. The feature states are concatenated per process before gathering ("cat"), so
    uneven shares (or none) take one collective each; compute() sorts the gathered features into a
    canonical order, draws KID's random subsets from a fixed seed (subsets capped at the set sizes) and
    computes FID from the same ordered features (`frechet_distance`)."""

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

    def compute(self) -> dict[str, torch.Tensor]:
        real, fake = (_canonical_order(dim_zero_cat(state)) for state in (self.real_features, self.fake_features))
        self.real_features, self.fake_features = [real], [fake]
        self.subset_size = min(self.max_subset_size, len(real), len(fake))
        # when each subset is a whole set, all subsets are the same: compute it once
        self.subsets = 1 if self.subset_size == len(real) == len(fake) else self.max_subsets
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(KID_SEED)
            kid_mean, kid_std = super().compute()
        return {"FID": frechet_distance(real, fake), "KID": kid_mean, "KID_std": kid_std}


def frechet_distance(real: torch.Tensor, fake: torch.Tensor) -> torch.Tensor:
    """The Frechet distance of two sets of feature rows (FID for Inception features), in float64:
    |mu_r - mu_f|^2 + tr(S_r) + tr(S_f) - 2 tr sqrt(S_r S_f), S the unbiased covariances (as torchmetrics).

    torchmetrics takes tr sqrt(S_r S_f) from the eigenvalues of the 2048x2048 product: seconds on a CPU
    core, for every FID. With R, F the centred features (n_r and n_f rows), S_r S_f = R'R F'F / ((n_r-1)(n_f-1))
    has the nonzero eigenvalues of M M' with M = R F' (n_r x n_f), whose square roots are M's singular
    values: for sets smaller than the feature size the trace is their sum over sqrt((n_r-1)(n_f-1)),
    exact and milliseconds. Larger sets take the eigenvalue route."""
    real, fake = real.double(), fake.double()
    mean_real, mean_fake = real.mean(dim=0), fake.mean(dim=0)
    centred_real, centred_fake = real - mean_real, fake - mean_fake
    scale_real, scale_fake = len(real) - 1, len(fake) - 1
    traces = centred_real.square().sum() / scale_real + centred_fake.square().sum() / scale_fake
    if min(len(real), len(fake)) <= real.shape[1]:
        singular_values = torch.linalg.svdvals(centred_real @ centred_fake.T)
        trace_of_root = singular_values.sum() / (scale_real * scale_fake) ** 0.5
    else:
        product = (centred_real.T @ centred_real / scale_real) @ (centred_fake.T @ centred_fake / scale_fake)
        trace_of_root = torch.linalg.eigvals(product).sqrt().real.sum()
    return (mean_real - mean_fake).square().sum() + traces - 2 * trace_of_root


def _canonical_order(features: torch.Tensor) -> torch.Tensor:
    """The rows of `features` sorted lexicographically: the same rows in any order give the same tensor."""
    if len(features) < 2:
        return features
    order = np.lexsort(features.detach().cpu().numpy().T[::-1])
    return features[torch.from_numpy(order).to(features.device)]
