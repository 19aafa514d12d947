"""CUT's networks (Park et al., ECCV 2020): antialiased resnet generator and PatchGAN, and PatchNCE.

Layer order and parameter names follow taesungp/contrastive-unpaired-translation, so that its
`latest_net_G.pth` loads here with `strict=True` and ours load in its test.py: the antialiased
resnet_9blocks generator is `model.0` .. `model.31` with blur buffers `model.7.filt`,
`model.11.filt` (downsampling) and `model.21.filt`, `model.25.filt` (upsampling). The blur layers
keep their fixed filter as a persistent buffer because CUT's checkpoints hold it.

- `Downsample`, `Upsample`: blur then subsample / transposed blur (Zhang, "Making convolutional
  networks shift-invariant again"), CUT's `--no_antialias` / `--no_antialias_up` turn them off.
- `AntialiasedResnetGenerator`: a plain image-to-image network (what the Translator, test.py and
  scripts/export.py run); `CUTGenerator` adds the feature read-out PatchNCE needs.
- `antialias_discriminator`: CUT's discriminator is ours with each stride-2 convolution made
  stride 1 and followed by a blur-downsample; done to the network `networks.define_D` built, so
  whatever that builds (norms, other options) stays as it is.
- `PatchSampleF` (CUT's netF) and `patch_nce_loss`.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from models import networks

NETF_KINDS = ("sample", "reshape", "mlp_sample")
_DOWN_TAPS = (1.0, 2.0, 1.0)       # CUT's 3-tap binomial blur before subsampling
_UP_TAPS = (1.0, 3.0, 3.0, 1.0)    # and its 4-tap one for upsampling


def _binomial_filter(taps: tuple[float, ...], channels: int, gain: float) -> torch.Tensor:
    """The separable blur `taps` x `taps`, normalised to sum `gain`, one copy per channel (depthwise)."""
    row = torch.tensor(taps, dtype=torch.float32)
    filt = row[:, None] * row[None, :]
    return (filt / filt.sum() * gain)[None, None].repeat(channels, 1, 1, 1)


class Downsample(nn.Module):
    """Blur with a 3x3 binomial filter (reflection-padded), then keep every second pixel: even sizes halve."""

    def __init__(self, channels: int):
        super().__init__()
        self.register_buffer("filt", _binomial_filter(_DOWN_TAPS, channels, 1.0))
        self.pad = nn.ReflectionPad2d(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(self.pad(x), self.filt, stride=2, groups=x.shape[1])


class Upsample(nn.Module):
    """Double the size by a transposed 4x4 binomial blur (replicate-padded): no learned upconvolution,
    so no checkerboard."""

    def __init__(self, channels: int):
        super().__init__()
        self.register_buffer("filt", _binomial_filter(_UP_TAPS, channels, 4.0))  # 4: stride squared
        self.pad = nn.ReplicationPad2d(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Pad by one, spread with stride 2, then trim to exactly twice the input size.
        out = F.conv_transpose2d(self.pad(x), self.filt, stride=2, padding=2, groups=x.shape[1])
        return out[:, :, 1:-1, 1:-1]


class AntialiasedResnetGenerator(nn.Module):
    """networks.ResnetGenerator with CUT's optional blur: downsampling as conv (stride 1), norm,
    ReLU, Downsample; upsampling as Upsample, 3x3 conv, norm, ReLU. Without either it has exactly
    networks.ResnetGenerator's layers and keys."""

    def __init__(self, input_nc: int, output_nc: int, ngf: int = 64, norm: str = "instance",
                 use_dropout: bool = False, n_blocks: int = 9, antialias: bool = True, antialias_up: bool = True):
        super().__init__()
        norm_layer = networks.get_norm_layer(norm)
        bias = networks._uses_bias(norm_layer)
        model = [nn.ReflectionPad2d(3), nn.Conv2d(input_nc, ngf, kernel_size=7, padding=0, bias=bias),
                 norm_layer(ngf), nn.ReLU(True)]
        for mult in (1, 2):
            width = ngf * mult * 2
            if antialias:
                model += [nn.Conv2d(ngf * mult, width, kernel_size=3, stride=1, padding=1, bias=bias),
                          norm_layer(width), nn.ReLU(True), Downsample(width)]
            else:
                model += [nn.Conv2d(ngf * mult, width, kernel_size=3, stride=2, padding=1, bias=bias),
                          norm_layer(width), nn.ReLU(True)]
        model += [networks.ResnetBlock(ngf * 4, padding_type="reflect", norm_layer=norm_layer,
                                       use_dropout=use_dropout, use_bias=bias) for _ in range(n_blocks)]
        for mult in (4, 2):
            width = ngf * mult // 2
            if antialias_up:
                model += [Upsample(ngf * mult), nn.Conv2d(ngf * mult, width, kernel_size=3, stride=1, padding=1, bias=bias),
                          norm_layer(width), nn.ReLU(True)]
            else:
                model += [nn.ConvTranspose2d(ngf * mult, width, kernel_size=3, stride=2, padding=1,
                                             output_padding=1, bias=bias), norm_layer(width), nn.ReLU(True)]
        model += [nn.ReflectionPad2d(3), nn.Conv2d(ngf, output_nc, kernel_size=7, padding=0), nn.Tanh()]
        self.model = nn.Sequential(*model)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.model(input)


class CUTGenerator(AntialiasedResnetGenerator):
    """The generator as the CUT model trains it: `forward(x, layers, encode_only=True)` returns the
    outputs of the `model` layers numbered in `layers` (CUT's --nce_layers) and stops after the last,
    which is how PatchNCE reads features through a DDP-wrapped generator (DDP hooks `forward` only)."""

    def forward(self, input: torch.Tensor, layers: tuple[int, ...] = (), encode_only: bool = False):
        if not encode_only:
            return self.model(input)
        feats, last = [], max(layers)
        for index, layer in enumerate(self.model):
            input = layer(input)
            if index in layers:
                feats.append(input)
            if index == last:
                break
        return feats


def define_G(input_nc: int, output_nc: int, ngf: int, netG: str, norm: str = "instance", use_dropout: bool = False,
             init_type: str = "xavier", init_gain: float = 0.02, no_antialias: bool = False,
             no_antialias_up: bool = False, features: bool = False) -> nn.Module:
    """A generator with CUT's flags: a resnet with blur unless `no_antialias`/`no_antialias_up`
    (`features`: the CUTGenerator that can return intermediate layers), else networks.define_G."""
    if not netG.startswith("resnet_"):
        return networks.define_G(input_nc, output_nc, ngf, netG, norm, use_dropout, init_type, init_gain)
    n_blocks = int(netG.removeprefix("resnet_").removesuffix("blocks"))
    cls = CUTGenerator if features else AntialiasedResnetGenerator
    net = cls(input_nc, output_nc, ngf, norm, use_dropout, n_blocks, not no_antialias, not no_antialias_up)
    networks.init_weights(net, init_type, init_gain)
    return net


def blur_flags(state: dict) -> dict[str, bool]:
    """CUT's --no_antialias / --no_antialias_up as a resnet generator's state_dict shows them: its blur
    layers' `filt` buffers are 3x3 when downsampling, 4x4 when upsampling."""
    sizes = {tuple(value.shape[-2:]) for key, value in state.items() if key.endswith(".filt")}
    return {"no_antialias": (3, 3) not in sizes, "no_antialias_up": (4, 4) not in sizes}


def generator_for_state(state: dict, input_nc: int, output_nc: int, ngf: int, netG: str, norm: str,
                        use_dropout: bool, init_type: str = "normal", init_gain: float = 0.02,
                        upsample: str = "transpose") -> nn.Module:
    """The generator the flags describe, with the blur layers the weights `state` hold: a CUT
    checkpoint's (antialiased) loads where any generator does (test.py --model test, the Translator,
    scripts/export.py); anything else is networks.define_G's, as before."""
    blur = blur_flags(state)
    if not netG.startswith("resnet_") or all(blur.values()):
        return networks.define_G(input_nc, output_nc, ngf, netG, norm, use_dropout, init_type, init_gain, upsample)
    return define_G(input_nc, output_nc, ngf, netG, norm, use_dropout, init_type, init_gain, **blur)


def antialias_discriminator(net: nn.Module) -> nn.Module:
    """CUT's antialiased PatchGAN from ours, in place: in every NLayerDiscriminator of `net`, each
    stride-2 convolution runs at stride 1 and a Downsample follows its activation. The modules
    themselves are kept (their weights, and anything attached to them), only moved in the sequence."""
    for module in net.modules():
        if not isinstance(module, networks.NLayerDiscriminator):
            continue
        layers, pending = [], None
        for layer in module.model:
            layers.append(layer)
            if isinstance(layer, nn.Conv2d) and layer.stride == (2, 2):
                layer.stride, pending = (1, 1), layer.out_channels
            elif pending is not None and isinstance(layer, nn.LeakyReLU):
                layers.append(Downsample(pending))
                pending = None
        module.model = nn.Sequential(*layers)
    return net


class _ContiguousGradient(torch.autograd.Function):
    """Identity; its backward hands on the gradient in contiguous layout.

    Picking positions out of a (B, C, H, W) map through a (B, H*W, C) view sends back a gradient
    with channels-last strides, and on the CPU (torch 2.14) instance norm's backward computes a wrong
    input gradient from such a one (see networks.ChannelsLastSafeInstanceNorm2d): the generator's
    gradients came out wrong, and depending on how the batch was split across processes."""

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
                setattr(self, f"mlp_{index}", nn.Sequential(nn.Linear(width, self.nc), nn.ReLU(), nn.Linear(self.nc, self.nc)))

    def forward(self, feats: list[torch.Tensor], patch_ids: list[torch.Tensor]) -> list[torch.Tensor]:
        """Per layer, (images * patches, channels) unit vectors; `patch_ids[i]` is (images, patches)."""
        out = []
        for index, (feat, ids) in enumerate(zip(feats, patch_ids)):
            feat = _ContiguousGradient.apply(feat)
            if self.kind == "reshape":
                flat = F.adaptive_avg_pool2d(feat, 4).flatten(2).transpose(1, 2)
            else:
                flat = feat.flatten(2).transpose(1, 2)  # (B, H*W, C)
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
