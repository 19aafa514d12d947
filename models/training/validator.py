"""Validation during training (`--val_freq N`): how good is the model on held-out images?

Every N epochs and at the last one, every process translates its share of the held-out split
(`--val_phase`, default `val`, else `test`; at most `--val_max_images` images) exactly as test.py
would (no augmentation, `--load_size` = `--crop_size`, the generators in eval mode unless
`--val_mode train`), and util.evaluation.metrics.TranslationMetrics combines the shares exactly: the numbers
equal one process's on the same images. What is scored is the model's to say (its `scored_pairs`):
paired data get L1, PSNR and SSIM of each output against its target, unpaired data FID and KID of each
output against the real images of its domain (CycleGAN: both directions, FID_B: fake B vs real B). With
--ema_decay the moving averages are scored too, under `ema_<metric>`.

The scores feed `--save_best` (models/training/best_checkpoint.py), the plateau learning-rate policy and the
logs (util/display/validation_log.py, the visualizer).
"""
from __future__ import annotations

import argparse
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager

from models.base_model import BaseModel
from models.network_views import NetworkViews
from models.training.best_checkpoint import ema_key
from util.distributed import DistContext
from util.errors import UserError
from util.evaluation.metrics import (
    ReferenceFeatures,
    TranslationMetrics,
    expected_keys,
    higher_is_better,
    needs_inception,
)
from util.evaluation.metrics_report import volume_units
from util.evaluation.validation_result import ValidationResult

logger = logging.getLogger(__name__)

Pairs = Mapping[str, tuple[str, str | None]]  # metric suffix -> (output visual, target visual or None)
# (eval_mode, ema=...) -> the networks as test.py calls them, within a block (TrainingEngine.inference_networks)
InferenceNetworks = Callable[..., AbstractContextManager[NetworkViews]]



def make_validator(opt: argparse.Namespace, ctx: DistContext, model, held_out) -> "Validator | None":
    """The validator of a training run scoring the loader `held_out` (data.held_out), or None without
    --val_freq (then --save_best is refused)."""
    if opt.val_freq > 0:
        return Validator(opt, ctx, model.scored_pairs(held_out.dataset.paired), opt.ema_decay > 0,
                         held_out, model.visual_domains(opt))
    if save_best_refusal(opt):  # the options refuse it first: here for a run set up from Python
        raise UserError(f"{save_best_refusal(opt)}.")
    return None


def save_best_refusal(opt: argparse.Namespace) -> str | None:
    """Why --save_best cannot work in a run of `opt` (no validation picks the best epoch), or None."""
    if opt.save_best and opt.val_freq <= 0:
        return (f"--save_best {opt.save_best} picks the best epoch by validation, which is off; add --val_freq 1 "
                f"(validate after every epoch) or drop --save_best")
    return None


class Validator:
    """Scores the model on the held-out split (see the module docstring); `run` is collective."""

    def __init__(self, opt: argparse.Namespace, ctx: DistContext, pairs: Pairs, ema: bool, held_out,
                 domains: dict[str, str] | None = None) -> None:
        """`pairs`: the (output, target) visuals to score, by metric suffix (the model's
        `scored_pairs` for the held-out data); `ema`: score the moving averages too; `domains`: the
        dataset domain of each visual (the model's `visual_domains`: volumes' MAE is in its units)."""
        self.freq = opt.val_freq
        self.last_epoch = opt.n_epochs + opt.n_epochs_decay
        self.eval_mode = opt.val_mode == "eval"
        self.ema = ema
        if not self.eval_mode and ctx.is_distributed and opt.norm == "syncbatch":
            raise UserError("--val_mode train with --norm syncbatch under torchrun would synchronise batch "
                            "statistics between processes that validate different numbers of images; use "
                            "--val_mode eval (the default).")
        self.dataset = held_out
        paired = held_out.dataset.paired
        # the held-out real images are the same at every validation: their Inception features are kept
        reference = ReferenceFeatures() if not paired else None
        units = volume_units(held_out.dataset, pairs, domains)
        volumes = {"volume_units": units, "mask": opt.eval_mask} if units is not None else {}
        make = lambda: TranslationMetrics(pairs, paired=paired, distribution=not paired,  # noqa: E731
                                          device=ctx.device, inception_weights=opt.inception_weights or None,
                                          reference_cache=reference, **volumes)
        self.metrics = make()
        self.ema_metrics = make() if ema else None
        self.keys = expected_keys(pairs, paired, not paired, units)
        for why in dict.fromkeys(self.metrics.skipped.values()):  # one warning per reason
            keys = [key for key, reason in self.metrics.skipped.items() if reason == why and not key.endswith("_std")]
            logger.warning(f"validation will not report {', '.join(keys)}: {why}")
        self.plateau_key = self._check_save_best(opt) or (self.keys[0] if self.keys else None)

    def _check_save_best(self, opt: argparse.Namespace) -> str | None:
        metric = opt.save_best
        if not metric:
            return None
        try:
            higher_is_better(metric)
        except UserError as err:  # a name that is no metric: say which flag gave it
            raise UserError(f"--save_best {metric}: {err}") from None
        if metric not in self.keys or metric.endswith("_std"):
            raise UserError(f"--save_best {metric}: this model's validation reports "
                            f"{', '.join(k for k in self.keys if not k.endswith('_std'))}; pick one of them.")
        if needs_inception(metric) and metric in self.metrics.skipped:
            raise UserError(f"--save_best {metric} needs FID/KID, which cannot run: {self.metrics.skipped[metric]}")
        return metric

    def due(self, epoch: int) -> bool:
        """Whether to validate at the end of `epoch` (every --val_freq epochs, and the last one)."""
        return self.freq > 0 and (epoch % self.freq == 0 or epoch == self.last_epoch)

    def run(self, model: BaseModel, networks: InferenceNetworks) -> ValidationResult:
        """Score `model`, and its moving averages, on this process's share of the split, its networks called
        as `networks(eval_mode, ema=...)` gives them (the training engine's `inference_networks`); every
        process must call it. Training resumes unchanged afterwards."""
        start = time.monotonic()
        visuals: OrderedDict = OrderedDict()
        scores = self._score(model, networks, self.metrics, ema=False, keep=visuals)
        if self.ema_metrics is not None:
            ema_scores = self._score(model, networks, self.ema_metrics, ema=True)
            scores.update({ema_key(k): v for k, v in ema_scores.items()})
        images = self.metrics.image_counts.get(next(iter(self.metrics.pairs), ""), {})
        return ValidationResult(scores, time.monotonic() - start, max(images.values(), default=0), visuals)

    def _score(self, model: BaseModel, networks: InferenceNetworks, metrics: TranslationMetrics, ema: bool,
               keep: OrderedDict | None = None) -> dict:
        metrics.reset()
        with networks(self.eval_mode, ema=ema) as nets:  # as test.py runs them
            for batch in self.dataset:
                model.set_input(batch)
                model.test(nets)
                current = model.get_current_visuals()
                # the scored outputs and targets, which the training visuals may not show (BicycleGAN's fake_B)
                current.update((name, getattr(model, name)) for pair in metrics.pairs.values() for name in pair
                               if name is not None and name not in current)
                metrics.update(current)
                if keep is not None and not keep:
                    keep.update((name, image[:1].detach().cpu()) for name, image in current.items())
        return metrics.compute()

    def plateau_signal(self, result: ValidationResult | None) -> dict:
        """Keyword arguments for `model.update_learning_rate`: the plateau policy watches the
        validation metric (lower is better; --save_best's, else the first one) and steps only after
        a validation; without that metric (e.g. FID without Inception weights) it watches the
        generator's loss every epoch."""
        if self.plateau_key is None or self.plateau_key in self.metrics.skipped:
            return {}
        if result is None:
            return {"plateau_step": False}
        value = result.scores[self.plateau_key]
        return {"plateau_metric": -value if higher_is_better(self.plateau_key) else value}
