"""Inception weights with seeded random values, for cost runs and tests on machines without internet
access: the real FID/KID loading and feature code runs, deterministically and at the real cost, but the
values mean nothing."""
from __future__ import annotations

import os

import torch
from torch import nn

from util.evaluation.inception import FEATURE_DIM


def write_seeded_inception_weights(path: str | os.PathLike, seed: int = 0) -> str:
    """Write a state dict for torch-fidelity's Inception-v3 with exactly the keys of the real weights
    file but seeded random values (He-normal convolutions, so features are not vanishingly small).
    For tests and cost measurements without internet access: the real loading and feature code runs,
    deterministically and at the real cost, but the FID/KID values mean nothing."""
    from torch_fidelity.feature_extractor_inceptionv3 import FeatureExtractorInceptionV3

    class Unloaded(FeatureExtractorInceptionV3):
        def load_state_dict(self, *args, **kwargs):  # keep the fresh initialisation
            return None

    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    torch.save({}, path)  # read by the constructor, then ignored
    network = Unloaded("inception-v3-compat", [str(FEATURE_DIM)], feature_extractor_weights_path=path)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in network.modules():
            if isinstance(module, nn.Conv2d):
                fan_in = module.weight[0].numel()
                module.weight.copy_(torch.randn(module.weight.shape, generator=generator) * (2.0 / fan_in) ** 0.5)
    torch.save(network.state_dict(), path)
    return path
