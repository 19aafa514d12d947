"""Differentiable augmentation of everything a discriminator sees (--diff_augment, --ada_target).

With few training images a discriminator memorises them and its verdicts stop teaching the
generator anything. DiffAugment (Zhao et al. 2020) shows it real and generated images alike
through the same random, differentiable transforms, so it cannot tell them apart by what the
transforms hide, and the generator still gets gradients through them; ADA (Karras et al. 2020)
applies each transform with a probability p that rises while the discriminator is overconfident on
real images and falls otherwise.

    augment = DiscriminatorAugment.from_options(opt)       # BaseModel does this: self.diff_augment
    pred_real = netD(torch.cat(augment(real_A, real_B), 1)) # a pix2pix pair: one transform for both
    augment.observe_real(pred_real)                         # --ada_target: D's verdicts on reals

The transforms are ours, not kornia's: DiffAugment's three policies are a few lines of tensor
arithmetic, while kornia's colour transforms expect 1- or 3-channel images in [0, 1] (ours are in
[-1, 1], with any channel count, and pix2pix's discriminator sees 6-channel pairs), and its random
parameters come from the global generator per local batch, which would make an image's transform
depend on how a batch is split across processes (see `_draws`).
"""
from __future__ import annotations

import argparse

import torch

from util import distributed

POLICIES = ("color", "translation", "cutout")
TRANSLATION_RATIO = 1 / 8  # the largest shift, as a fraction of the side (DiffAugment's)
CUTOUT_RATIO = 1 / 2       # the side of the erased square, as a fraction of the image's side
ADA_INTERVAL = 4           # D verdicts on reals between updates of p (one host sync each), as ADA
_COLUMNS = 12              # uniform numbers drawn per image per call, whatever the policy (see _draws)


def augment_policy(text: str) -> str:
    """An argparse `type` for --diff_augment: comma-separated POLICIES, in any order, e.g.
    "color,translation,cutout"; returned in canonical order without spaces. Empty: off."""
    if not text.strip():
        return ""
    picked = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [part for part in picked if part not in POLICIES]
    if unknown or not picked:
        raise argparse.ArgumentTypeError(f"choose one or more of {', '.join(POLICIES)} separated by commas "
                                         f"(e.g. --diff_augment color,translation,cutout), got {text!r}")
    return ",".join(policy for policy in POLICIES if policy in picked)


def decision_threshold(gan_mode: str) -> float:
    """The discriminator output between its 'fake' and 'real' answers: lsgan regresses onto 0 and 1;
    the others' outputs are logits or scores whose sign is the answer."""
    return 0.5 if gan_mode == "lsgan" else 0.0


class DiscriminatorAugment:
    """The transforms every discriminator input goes through (the identity when `policy` is empty).

    Randomness: the run's own generator draws the parameters of every image of the *global*
    batch and each process takes those of its images (util.distributed.global_batch_positions),
    so an image's transform is the one a single process with the whole batch would give it; the
    generator and p are saved with the training state, so a continued run draws the same."""

    def __init__(self, policy: str = "", ada_target: float = 0.0, ada_kimg: float = 100.0,
                 gan_mode: str = "lsgan") -> None:
        self.policy = tuple(part for part in policy.split(",") if part)
        self.ada_target = ada_target
        self.ada_kimg = ada_kimg
        self.threshold = decision_threshold(gan_mode)
        self.p = 0.0 if ada_target > 0 else 1.0  # ADA starts unaugmented; plain DiffAugment always applies
        self.generator = torch.Generator()
        self._reset_observations()

    @classmethod
    def from_options(cls, opt) -> DiscriminatorAugment:
        """From the training flags --diff_augment, --ada_target, --ada_kimg and --gan_mode (at test time,
        `DiscriminatorAugment()`: off)."""
        return cls(opt.diff_augment, opt.ada_target, opt.ada_kimg, opt.gan_mode)

    @property
    def enabled(self) -> bool:
        return bool(self.policy)

    def seed(self, seed: int) -> None:
        """Start the draws from `seed` (the same on every rank)."""
        self.generator.manual_seed(seed)

    # ------------------------------------------------------------------ the transforms
    def __call__(self, *images: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """`images` (N x C_i x H x W each, the same N, H, W) through one random transform per sample,
        the same for every tensor given (e.g. a pix2pix pair's input and output halves); one tensor
        in, one out. Differentiable; the tensors themselves when augmentation is off."""
        if not self.enabled:
            return images[0] if len(images) == 1 else images
        first = images[0]
        draws = self._draws(first.shape[0]).to(first.device, first.dtype)
        apply = (draws[:, :5] < self.p).to(first.dtype)  # per sample and transform: with probability p
        out = list(images)
        if "color" in self.policy:
            out = [_color(x, draws[:, 5:8], apply[:, 0:3]) for x in out]
        if "translation" in self.policy:
            shift = _translation(first, draws[:, 8:10], apply[:, 3])
            out = [_shift(x, *shift) for x in out]
        if "cutout" in self.policy:
            keep = _cutout_mask(first, draws[:, 10:12], apply[:, 4])
            out = [x * keep for x in out]
        return out[0] if len(out) == 1 else tuple(out)

    def _draws(self, count: int) -> torch.Tensor:
        """count x _COLUMNS uniform numbers in [0, 1) for this process's images: the generator draws for
        the whole global batch (the same numbers on every rank) and each rank keeps its rows. Always
        _COLUMNS per image, whatever the policy and p, so the stream never depends on them."""
        world = distributed.world_size()
        every = torch.rand(count * world, _COLUMNS, generator=self.generator, dtype=torch.float64)
        return every[distributed.global_batch_positions(count)]

    # ------------------------------------------------------------------ the adaptive probability
    def observe_real(self, prediction: torch.Tensor | list | tuple) -> None:
        """With --ada_target: note D's verdicts on real (augmented) images; every ADA_INTERVAL calls,
        move p towards keeping the fraction of confident verdicts, E[sign(D(real) - threshold)], at
        the target: up by (images seen) / (ada_kimg * 1000) when above, down when below. The sums
        are taken over all ranks, so p is the same everywhere and equal to one process's. A
        discriminator judging at several scales may give a list of verdict maps: all of them count."""
        if not self.enabled or self.ada_target <= 0:
            return
        maps = prediction if isinstance(prediction, (list, tuple)) else [prediction]
        batch = maps[0].shape[0]
        flat = torch.cat([m.detach().reshape(batch, -1).to(torch.float64) for m in maps], dim=1)
        verdicts = torch.sign(flat - self.threshold)
        self._sign_sum = self._sign_sum.to(verdicts.device) + verdicts.sum()
        self._counts += torch.tensor([verdicts.numel(), batch], dtype=torch.float64)
        self._calls += 1
        if self._calls % ADA_INTERVAL:
            return
        totals = torch.cat([self._sign_sum.reshape(1), self._counts.to(verdicts.device)])
        sign_sum, verdict_count, images = distributed.all_reduce_sum_(totals).tolist()  # one host sync
        overfitting = sign_sum / verdict_count
        step = images / (self.ada_kimg * 1000)
        self.p = min(1.0, max(0.0, self.p + (step if overfitting > self.ada_target else -step)))
        self.last_overfitting = overfitting
        self._reset_observations()

    def _reset_observations(self) -> None:
        self._sign_sum = torch.zeros((), dtype=torch.float64)
        self._counts = torch.zeros(2, dtype=torch.float64)  # verdicts, images (this rank's)
        self._calls = 0
        self.last_overfitting = getattr(self, "last_overfitting", 0.0)

    # ------------------------------------------------------------------ exact resume
    def state_dict(self) -> dict:
        """What every rank shares: the generator and p (plain tensors and numbers)."""
        return {"generator": self.generator.get_state(), "p": self.p, "last_overfitting": self.last_overfitting}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])
        self.p = float(state["p"])
        self.last_overfitting = float(state.get("last_overfitting", 0.0))

    def rank_state_dict(self) -> dict:
        """This rank's verdicts since the last update of p."""
        return {"sign_sum": self._sign_sum.cpu(), "counts": self._counts.clone(), "calls": self._calls}

    def load_rank_state_dict(self, state: dict) -> None:
        self._sign_sum = state["sign_sum"].clone()
        self._counts = state["counts"].clone()
        self._calls = int(state["calls"])


def _color(x: torch.Tensor, r: torch.Tensor, apply: torch.Tensor) -> torch.Tensor:
    """DiffAugment's colour transform for images in [-1, 1]: brightness + U(-0.5, 0.5), saturation
    x U(0, 2) around the per-pixel channel mean, contrast x U(0.5, 1.5) around the image mean; each
    with its own `apply` (0 or 1) per sample, so an unapplied one is exactly the identity."""
    def per_sample(values: torch.Tensor) -> torch.Tensor:
        return values.view(-1, 1, 1, 1)
    x = x + per_sample(apply[:, 0] * (r[:, 0] - 0.5))
    mean = x.mean(dim=1, keepdim=True)
    x = (x - mean) * per_sample(1 + apply[:, 1] * (2 * r[:, 1] - 1)) + mean
    mean = x.mean(dim=(1, 2, 3), keepdim=True)
    return (x - mean) * per_sample(1 + apply[:, 2] * (r[:, 2] - 0.5)) + mean


def _translation(x: torch.Tensor, r: torch.Tensor, apply: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Whole-pixel shifts (rows, columns) of up to TRANSLATION_RATIO of each side, 0 where not applied."""
    height, width = x.shape[-2:]
    limits = torch.tensor([int(height * TRANSLATION_RATIO + 0.5), int(width * TRANSLATION_RATIO + 0.5)],
                          device=x.device)
    shifts = (r * (2 * limits + 1)).floor().long() - limits  # uniform over -limit..limit
    shifts = shifts * apply.long().unsqueeze(1)
    return shifts[:, 0], shifts[:, 1]


def _shift(x: torch.Tensor, rows: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    """Each sample moved by its (rows, columns), zeros (mid-grey) shifted in: a gather, whose gradient
    goes back to the pixel each output came from."""
    n, c, height, width = x.shape
    source_y = torch.arange(height, device=x.device).view(1, -1, 1) - rows.view(-1, 1, 1)
    source_x = torch.arange(width, device=x.device).view(1, 1, -1) - columns.view(-1, 1, 1)
    inside = (source_y >= 0) & (source_y < height) & (source_x >= 0) & (source_x < width)
    index = (source_y.clamp(0, height - 1) * width + source_x.clamp(0, width - 1)).view(n, 1, -1)
    moved = x.reshape(n, c, -1).gather(2, index.expand(n, c, -1)).view(n, c, height, width)
    return moved * inside.unsqueeze(1).to(x.dtype)


def _cutout_mask(x: torch.Tensor, r: torch.Tensor, apply: torch.Tensor) -> torch.Tensor:
    """N x 1 x H x W: 0 inside a square of CUTOUT_RATIO of the sides at a random centre (which may
    sit on the border, as DiffAugment's), 1 elsewhere and wherever not applied."""
    height, width = x.shape[-2:]
    size_y, size_x = int(height * CUTOUT_RATIO + 0.5), int(width * CUTOUT_RATIO + 0.5)
    top = (r[:, 0] * (height + 1 - size_y % 2)).floor().long() - size_y // 2
    left = (r[:, 1] * (width + 1 - size_x % 2)).floor().long() - size_x // 2
    y = torch.arange(height, device=x.device).view(1, -1, 1)
    xs = torch.arange(width, device=x.device).view(1, 1, -1)
    inside = ((y >= top.view(-1, 1, 1)) & (y < (top + size_y).view(-1, 1, 1))
              & (xs >= left.view(-1, 1, 1)) & (xs < (left + size_x).view(-1, 1, 1)))
    return (1 - inside.to(x.dtype) * apply.view(-1, 1, 1)).unsqueeze(1)
