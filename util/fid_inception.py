"""The Inception-v3 network that FID is defined with, built on torchvision's Inception3.

Published FID numbers use the TensorFlow Inception graph of 2015-12-05; pytorch-fid ported its
weights to `pt_inception-2015-12-05-6726825d.pth` (1008 classes). That graph differs from
torchvision's Inception3 in the pooling branches, which this module reproduces:
  - the average pools of the A, C and first E blocks leave padding out of the average
    (`count_include_pad=False`);
  - the last E block (Mixed_7c) pools its pool branch with a max pool instead.
The parameter names are torchvision's, so the pytorch-fid file loads with `strict=True`.

torchvision's own ImageNet weights (`inception_v3_google-0cc3c7bd.pth`, 1000 classes) load into
the unmodified architecture; they give FID values that are self-consistent but not comparable with
published ones.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torchvision.models import inception as tv

FID_WEIGHTS_NAME = "pt_inception-2015-12-05-6726825d.pth"
TORCHVISION_WEIGHTS_NAME = "inception_v3_google-0cc3c7bd.pth"
FEATURE_DIM = 2048
INPUT_SIZE = 299


def _avg_pool_no_pad(x: torch.Tensor) -> torch.Tensor:
    return F.avg_pool2d(x, kernel_size=3, stride=1, padding=1, count_include_pad=False)


class _FIDInceptionA(tv.InceptionA):
    def _forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        b1 = self.branch1x1(x)
        b5 = self.branch5x5_2(self.branch5x5_1(x))
        b3 = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        return [b1, b5, b3, self.branch_pool(_avg_pool_no_pad(x))]


class _FIDInceptionC(tv.InceptionC):
    def _forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        b1 = self.branch1x1(x)
        b7 = self.branch7x7_3(self.branch7x7_2(self.branch7x7_1(x)))
        d = self.branch7x7dbl_1(x)
        for layer in (self.branch7x7dbl_2, self.branch7x7dbl_3, self.branch7x7dbl_4, self.branch7x7dbl_5):
            d = layer(d)
        return [b1, b7, d, self.branch_pool(_avg_pool_no_pad(x))]


class _FIDInceptionE(tv.InceptionE):
    """`max_pool` selects the pool of the last block (Mixed_7c) of the TensorFlow graph."""

    def __init__(self, in_channels: int, max_pool: bool = False):
        super().__init__(in_channels)
        self.max_pool = max_pool

    def _forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        b1 = self.branch1x1(x)
        b3 = self.branch3x3_1(x)
        b3 = torch.cat([self.branch3x3_2a(b3), self.branch3x3_2b(b3)], 1)
        d = self.branch3x3dbl_2(self.branch3x3dbl_1(x))
        d = torch.cat([self.branch3x3dbl_3a(d), self.branch3x3dbl_3b(d)], 1)
        if self.max_pool:
            pooled = F.max_pool2d(x, kernel_size=3, stride=1, padding=1)
        else:
            pooled = _avg_pool_no_pad(x)
        return [b1, b3, d, self.branch_pool(pooled)]


class InceptionFeatures(nn.Module):
    """Images in [0, 1] (Nx3xHxW, any size) -> 2048-d pool3 features, as FID uses them.

    Images are resized to 299x299 (bilinear, as pytorch-fid does) and mapped to [-1, 1].
    `fid_variant=True` builds the TensorFlow-FID graph (1008 classes), False torchvision's.
    """

    input_size = INPUT_SIZE
    dim = FEATURE_DIM

    def __init__(self, fid_variant: bool = True):
        super().__init__()
        if fid_variant:
            blocks = [tv.BasicConv2d, _FIDInceptionA, tv.InceptionB, _FIDInceptionC, tv.InceptionD,
                      _FIDInceptionE, tv.InceptionAux]
            net = tv.Inception3(num_classes=1008, aux_logits=False, transform_input=False,
                                inception_blocks=blocks, init_weights=False)
            net.Mixed_7c = _FIDInceptionE(2048, max_pool=True)
        else:
            net = tv.Inception3(num_classes=1000, aux_logits=False, transform_input=False, init_weights=False)
        self.net = net
        self.name = "inception-v3-fid" if fid_variant else "inception-v3-torchvision"

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = images
        if x.shape[-2:] != (INPUT_SIZE, INPUT_SIZE):
            x = F.interpolate(x, size=(INPUT_SIZE, INPUT_SIZE), mode="bilinear", align_corners=False)
        x = 2.0 * x - 1.0
        n = self.net
        for layer in (n.Conv2d_1a_3x3, n.Conv2d_2a_3x3, n.Conv2d_2b_3x3, n.maxpool1, n.Conv2d_3b_1x1,
                      n.Conv2d_4a_3x3, n.maxpool2, n.Mixed_5b, n.Mixed_5c, n.Mixed_5d, n.Mixed_6a,
                      n.Mixed_6b, n.Mixed_6c, n.Mixed_6d, n.Mixed_6e, n.Mixed_7a, n.Mixed_7b, n.Mixed_7c):
            x = layer(x)
        return torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)


def load_inception(state: dict) -> InceptionFeatures:
    """An InceptionFeatures in eval mode with `state` loaded; the variant is read from the
    classifier size (1008: FID graph, 1000: torchvision). Raises KeyError/RuntimeError on a
    state dict of another network (the caller names the file)."""
    state = {k: v for k, v in state.items() if not k.startswith("AuxLogits.")}
    classes = state["fc.weight"].shape[0]
    model = InceptionFeatures(fid_variant=classes == 1008)
    model.net.load_state_dict(state, strict=True)
    return model.eval()
