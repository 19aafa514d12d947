"""The losses of pix2pixHD's multi-scale discriminator (`--netD multiscale --num_D N`,
models/networks/patchgan_multiscale.py) and its discriminator feature-matching loss (`--lambda_feat F`,
paired models).

A 70x70 PatchGAN sees local texture only; at 512 px and above results get blurry or collapse.
pix2pixHD judges the image with N PatchGANs of the same design, the coarsest seeing the whole
layout. Its prediction is a list (one logit grid per scale); `MultiscaleGANLoss`
gives the GAN loss the mean of the per-scale losses (pix2pixHD sums them; the mean keeps the
weights of the other losses, --lambda_L1 and the cycle weights, as tuned for one PatchGAN, and makes
--num_D 1 the plain `n_layers` discriminator). State-dict keys: `scale<k>.model.<i>.<param>`.
"""
from __future__ import annotations

import torch
from torch import nn

from models.networks.patchgan import NLayerDiscriminator
from models.networks.patchgan_multiscale import MultiscaleDiscriminator
from util.errors import UserError


class MultiscaleGANLoss(nn.Module):
    """A GAN criterion (GANLoss) that also takes a list of predictions, one per scale:
    the mean of its loss on each. A single tensor passes through unchanged."""

    def __init__(self, criterion: nn.Module) -> None:
        super().__init__()
        self.criterion = criterion

    def forward(self, prediction: torch.Tensor | list[torch.Tensor], target_is_real: bool,
                for_discriminator: bool = True) -> torch.Tensor:
        if isinstance(prediction, (list, tuple)):
            return sum(self.criterion(p, target_is_real, for_discriminator) for p in prediction) / len(prediction)
        return self.criterion(prediction, target_is_real, for_discriminator)


def _plain(net: nn.Module) -> nn.Module:
    # the module whose layers we walk: not the compiled wrapper (the frozen D is never DDP-wrapped)
    return getattr(net, "_orig_mod", net)


def discriminator_features(netD: nn.Module, x: torch.Tensor) -> list[list[torch.Tensor]]:
    """Per scale, the output of each layer group of the PatchGAN (conv, norm, LeakyReLU), then its
    prediction last: pix2pixHD's `getIntermFeat`. Works for `basic`, `n_layers` and `multiscale`."""
    net = _plain(netD)
    if isinstance(net, MultiscaleDiscriminator):
        pairs = list(zip(net.scales(), net.inputs(x)))
    elif isinstance(net, NLayerDiscriminator):
        pairs = [(net, x)]
    else:
        raise UserError(f"--lambda_feat needs a PatchGAN discriminator (--netD basic, n_layers or multiscale); "
                        f"{type(net).__name__} has no intermediate features to match; pass --lambda_feat 0.")
    features = []
    for patchgan, image in pairs:
        outputs, h = [], image
        for layer in patchgan.model:
            h = layer(h)
            if isinstance(layer, nn.LeakyReLU):  # the end of a layer group
                outputs.append(h)
        outputs.append(h)  # the last conv's prediction
        features.append(outputs)
    return features


def feature_matching_loss(netD: nn.Module, fake: torch.Tensor, real: torch.Tensor,
                          ) -> tuple[torch.Tensor | list[torch.Tensor], torch.Tensor]:
    """(D's prediction on `fake`, as `netD(fake)` gives it; the feature-matching loss): the L1
    distance between D's intermediate features on `fake` and on `real`, pix2pixHD's weighting (each
    of a scale's n feature maps weighs 4/n, the scales are averaged). `real`'s features carry no
    gradient. Computing both from one pass over `fake` saves a second D forward."""
    fake_features = discriminator_features(netD, fake)
    with torch.no_grad():
        real_features = discriminator_features(netD, real)
    l1 = nn.functional.l1_loss
    per_scale = []
    for fake_scale, real_scale in zip(fake_features, real_features):
        layers = len(fake_scale) - 1
        per_scale.append(sum(l1(f, r) for f, r in zip(fake_scale[:-1], real_scale[:-1])) * (4.0 / layers))
    predictions = [scale[-1] for scale in fake_features]
    prediction = predictions if isinstance(_plain(netD), MultiscaleDiscriminator) else predictions[0]
    return prediction, sum(per_scale) / len(per_scale)
