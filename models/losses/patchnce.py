"""CUT's networks besides its generator and discriminator (Park et al., ECCV 2020): netF
(`PatchSampleF`) and PatchNCE (`patch_nce_loss`), and what PatchNCE needs of a run's flags (`layer_refusal`,
`channel_refusal`: CUT's and UNSB's options refuse the rest when parsed).

CUT's antialiased resnet generator is the resnet family's (models/networks/resnet.py, with its blur
layers: CUT's `--no_antialias` / `--no_antialias_up` turn them off), and its antialiased
discriminator the PatchGAN family's (models/networks/patchgan.py: each stride-2 convolution at
stride 1 followed by a blur-downsample, unless `--no_antialias`), both in CUT's key layout, so that
its checkpoints load here with `strict=True` and ours load in its test.py.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from models import networks

NETF_KINDS = ("sample", "reshape", "mlp_sample")


# ---------------------------------------------------------------------------------- what PatchNCE needs of a run
def layer_refusal(opt, nce_layers: tuple[int, ...]) -> str | None:
    """Why training cannot read `nce_layers` from the --netG family's layers (it has fewer), or None. (A
    family that gives no layers at all is refused by its model's `network_calls`.)"""
    count = networks.family_of(opt.netG).feature_layers(opt)
    if not opt.isTrain or count == 0 or max(nce_layers) < count:
        return None
    return (f"--nce_layers {','.join(map(str, nce_layers))}: --netG {opt.netG} "
            f"{'without' if opt.no_antialias else 'with'} antialiasing has layers 0 to {count - 1} only; "
            f"choose layers below {count} (CUT's default 0,4,8,12,16 reads the input, both "
            f"downsamplings and two residual blocks).")


def channel_refusal(opt) -> str | None:
    """Why training cannot pass images of --output_nc channels through G, which takes --input_nc, or None:
    PatchNCE encodes G's outputs with G (--lambda_NCE above 0), and --nce_idt translates B images."""
    if not opt.isTrain or opt.input_nc == opt.output_nc or not (opt.nce_idt or opt.lambda_NCE > 0):
        return None
    passes = ("--nce_idt translates B images with G" if opt.nce_idt else
              f"PatchNCE (--lambda_NCE {opt.lambda_NCE:g}) passes G's outputs through G again to compare features")
    return (f"{passes}, so --model {opt.model} needs --input_nc == --output_nc (got {opt.input_nc} and "
            f"{opt.output_nc}); pass --output_nc {opt.input_nc} (images of 1 and 3 channels load converted to the "
            f"count asked for), or use --model cycle_gan --lambda_identity 0, which translates between them")


class _ContiguousGradient(torch.autograd.Function):
    """Identity; its backward hands on the gradient in contiguous layout.

    Picking positions out of a (B, C, H, W) map through a (B, H*W, C) view sends back a gradient
    with channels-last strides, and on the CPU (torch 2.14) instance norm's backward computes a wrong
    input gradient from such a one (see ChannelsLastSafeInstanceNorm2d in models/networks/layers.py):
    the generator's gradients came out wrong, and depending on how the batch was split across processes."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad.contiguous()


class PatchSampleF(nn.Module):
    """CUT's netF: picks the given positions of each feature map (`sample`, `mlp_sample`) or pools it
    to 4x4 (`reshape`), projects them with a 2-layer MLP per layer (`mlp_sample`) and L2-normalises.
    The MLPs (`mlp_0`, `mlp_1`, ... as in CUT's checkpoints) are sized by `create_mlp` from the first
    batch's features, before the networks are DDP-wrapped."""

    def __init__(self, kind: str = "mlp_sample", nc: int = 256):
        super().__init__()
        self.kind, self.nc = kind, nc

    def create_mlp(self, channels: list[int]) -> None:
        if self.kind == "mlp_sample":
            for index, width in enumerate(channels):
                mlp = nn.Sequential(nn.Linear(width, self.nc), nn.ReLU(), nn.Linear(self.nc, self.nc))
                setattr(self, f"mlp_{index}", mlp)

    def forward(self, feats: list[torch.Tensor], patch_ids: list[torch.Tensor]) -> list[torch.Tensor]:
        """Per layer, (images * patches, channels) unit vectors; `patch_ids[i]` is (images, patches)."""
        out = []
        for index, (feat, ids) in enumerate(zip(feats, patch_ids)):
            feat = _ContiguousGradient.apply(feat)
            if self.kind == "reshape":
                pool = F.adaptive_avg_pool3d if feat.ndim == 5 else F.adaptive_avg_pool2d  # volumes: 4x4x4
                flat = pool(feat, 4).flatten(2).transpose(1, 2)
            else:
                flat = feat.flatten(2).transpose(1, 2)  # (B, H*W, C); (B, D*H*W, C) for volumes
                flat = torch.gather(flat, 1, ids[:, :, None].expand(-1, -1, flat.shape[2]))
            flat = flat.flatten(0, 1)
            if self.kind == "mlp_sample":
                flat = getattr(self, f"mlp_{index}")(flat)
            # CUT's x / (|x| + 1e-7), with a norm whose gradient at a zero vector (e.g. every unit of a
            # narrow MLP switched off by its ReLU) is 0 rather than the NaN of sqrt's
            out.append(flat / (torch.linalg.vector_norm(flat, dim=1, keepdim=True) + 1e-7))
        return out


def patch_nce_loss(query: torch.Tensor, key: torch.Tensor, images: int, temperature: float,
                   all_keys: torch.Tensor | None = None, own_offset: int = 0) -> torch.Tensor:
    """PatchNCE, per query patch: cross-entropy of picking its own key among the negatives.

    `query`, `key`: (images * patches, C) unit vectors from the output and the input, patch i of
    each matching. The negatives of a query are the other patches of its own image or, given
    `all_keys` (every key of the global batch, `key` at rows `own_offset`...), every other patch
    of the batch (CUT's --nce_includes_all_negatives_from_minibatch). A query's own key in the
    negatives is masked with -10 as in CUT, so values match its code. Keys get no gradient.
    """
    key = key.detach()
    positive = (query * key).sum(1, keepdim=True)
    if all_keys is None:
        q, k = query.reshape(images, -1, query.shape[1]), key.reshape(images, -1, key.shape[1])
        negative = torch.bmm(q, k.transpose(1, 2))
        own = torch.eye(q.shape[1], dtype=torch.bool, device=query.device).expand_as(negative)
        negative = negative.masked_fill(own, -10.0).flatten(0, 1)
    else:
        negative = query @ all_keys.detach().t()
        rows = torch.arange(query.shape[0], device=query.device)
        own = torch.zeros_like(negative, dtype=torch.bool)
        own[rows, rows + own_offset] = True
        negative = negative.masked_fill(own, -10.0)
    logits = torch.cat((positive, negative), 1) / temperature
    target = torch.zeros(logits.shape[0], dtype=torch.long, device=query.device)
    return F.cross_entropy(logits, target, reduction="none")
