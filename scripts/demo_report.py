"""Does training work? Compare a trained pix2pix model with two baselines on held-out images.

    python scripts/demo_report.py --seed 0 <the test.py flags of the run>

It takes test.py's flags and its own, --texture_window and --compare (`--help` lists them all).

Prints the mean L1 (in the network's [-1, 1] units) and PSNR on the test split (volumes: whole volumes in
sliding windows, as test.py translates them, with MAE in the target's units) of:
  identity   the input itself (what a model that changes nothing would score),
  untrained  the generator as initialised with --seed (the training run's starting point),
  trained    the generator loaded from the checkpoint (--epoch, default latest),
  best       with a run trained with --val_freq and --save_best: the best epoch's generator, as
             best.json names it, with that epoch's validation scores.
With --texture_window N (an unpaired model scored against true counterparts whose fine texture, e.g. a
stripe's phase, no model can know) it adds coarse_L1 and texture_L1 over N x N squares
(util/evaluation/texture.py), and those two decide the verdict instead of pixel L1.
With --n_samples N (N >= 2) it also measures how different N answers to the same input are
(util/evaluation/diversity.py: mean pairwise L1, and LPIPS where its weights are at hand): for a model
with many answers per input (BicycleGAN) N latent codes, as test.py --n_samples draws them, and L1/PSNR
are those of the encoded output; for any other model N forward passes with dropout on (the reference's
only source of variety; test.py without --eval). Then

    python scripts/demo_report.py --compare MANY.json ONE.json

says whether the first run's trained samples are more diverse than the second's (the demo_report.json
files of a BicycleGAN and a pix2pix run).
Writes the table as JSON beside the results page and exits non-zero if training did not help.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from data import create_dataset, spatial_dims  # noqa: E402
from models import create_model  # noqa: E402
from models.base_model import BaseModel  # noqa: E402
from models.inference.application import inference_views  # noqa: E402
from models.inference.latent_codes import draw_latent_codes  # noqa: E402
from models.inference.windows import Windows  # noqa: E402
from models.network_views import NetworkViews  # noqa: E402
from options.test_options import TestOptions  # noqa: E402
from util import distributed  # noqa: E402
from util.console import setup_logging  # noqa: E402
from util.errors import UserError, exit_with_status, exits_on_user_error  # noqa: E402
from util.evaluation.diversity import SampleDiversity  # noqa: E402
from util.evaluation.metrics import TranslationMetrics  # noqa: E402
from util.evaluation.texture import texture_distances  # noqa: E402
from util.flag_types import Bounded, OneParagraphParser  # noqa: E402
from util.frozen_options import FrozenOptions  # noqa: E402
from util.paths import why_missing  # noqa: E402
from util.safe_files import atomic_write_json, read_json_object  # noqa: E402
from util.seeding import seed_everything  # noqa: E402

MAX_TEXTURE_WINDOW = 4096  # --texture_window: pixels per side
TEXTURE_WINDOW = Bounded(int, low=0, high=MAX_TEXTURE_WINDOW, name="texture_window")


def best_epoch(opt) -> dict | None:
    """best.json of the run (written by train.py --save_best), if there is one."""
    path = os.path.join(opt.checkpoints_dir, opt.name, "best.json")
    if not os.path.exists(path):
        return None
    return read_json_object(path, "train.py rewrites it at the next validation that beats the best; delete it to "
                                  "report without it.").get("best")


def report(opt, best: dict | None, texture_window: int = 0) -> dict[str, dict[str, float]]:
    ctx = distributed.init_distributed("cpu")
    dataset = create_dataset(opt, 0)
    seed_everything(opt.seed or 0)
    models = {"untrained": create_model(opt, ctx), "trained": create_model(opt, ctx)}
    models["trained"].setup(opt)
    if best is not None:
        models["best"] = create_model(opt, ctx)
        models["best"].setup(FrozenOptions(**{**opt.as_dict(), "epoch": "best"}).freeze())
    if opt.eval:  # batch norm's running statistics and no dropout, as test.py --eval
        for model in models.values():
            model.eval()
    names = ("identity", *models)
    volumes, windows = {}, None
    if spatial_dims(opt) == 3:  # whole volumes in sliding windows, as test.py; MAE in the target's units
        windows = Windows.for_volumes(opt.patch_size, opt.window_overlap, opt.window_batch)
        low, high = dataset.dataset.window("B" if opt.direction == "AtoB" else "A")
        volumes = {"volume_units": dict.fromkeys(names, (high - low) / 2), "mask": opt.eval_mask}
    # each model's networks as test.py applies them (models/inference/application.py)
    nets = {name: inference_views(model.named_networks(), model.networks_with_role("generator"), opt, windows)
            for name, model in models.items()}
    scores = TranslationMetrics({name: (name, "target") for name in names}, paired=True, **volumes)
    diversity = {name: SampleDiversity(lpips=True) for name in models} if opt.n_samples >= 2 else {}
    texture = {name: {"coarse_L1": [], "texture_L1": []} for name in names}
    for i, data in enumerate(dataset):
        if i >= opt.num_test:
            break
        for name, model in models.items():
            model.set_input(data)
            if name in diversity:
                diversity[name].update(samples(model, nets[name], opt.n_samples, (opt.seed or 0) * 1_000_003 + i))
            model.test(nets[name])
        trained = models["trained"]
        outputs = {"identity": trained.real_A, **{name: model.fake_B for name, model in models.items()}}
        scores.update({"target": trained.real_B, **outputs})
        if texture_window > min(trained.real_B.shape[-2:]):
            raise UserError(f"--texture_window {texture_window} is larger than the images scored "
                            f"({'x'.join(map(str, trained.real_B.shape[-2:]))} px): give a window of about one "
                            f"period of the texture, smaller than the images.")
        for name, output in outputs.items() if texture_window else ():
            for key, values in texture_distances(output, trained.real_B, texture_window).items():
                texture[name][key] += values.tolist()
    means = scores.compute()
    table = {name: {metric: means[f"{metric}_{name}"] for metric in ("L1", "PSNR", "MAE")
                    if f"{metric}_{name}" in means}
             for name in names}
    for name, distances in texture.items() if texture_window else ():
        table[name].update({key: sum(values) / len(values) for key, values in distances.items()})
    notes = set()
    for name, measure in diversity.items():
        table[name].update(measure.compute())
        notes.update(f"{key} left out: {why}" for key, why in measure.skipped.items())
    for note in sorted(notes):
        print(note)
    return table


def samples(model: BaseModel, nets: NetworkViews, count: int, seed: int) -> list[torch.Tensor]:
    """`count` answers of `model` to its input: from `count` latent codes drawn from `seed` (as test.py
    --n_samples does) if its generator takes one, else from `count` dropout masks (seeds of their own
    for every input and answer)."""
    answers = []
    if model.latent_size() > 0:
        for code in draw_latent_codes(count, model.latent_size(), seed):
            model.set_latent(code.expand(len(model.real_A), -1))
            model.test(nets)
            answers.append(model.fake_B[:1])
        model.set_latent(None)
        return answers
    for k in range(count):
        seed_everything(seed * count + k)  # networks in training mode (no --eval): dropout draws a new mask
        model.test(nets)
        answers.append(model.fake_B[:1])
    return answers


def compare(paths: list[str]) -> int:
    """`--compare MANY.json ONE.json`: print whether the trained samples of the run in the first file
    are more diverse than those in the second."""
    if len(paths) != 2:
        raise UserError(f"--compare takes two demo_report.json files (the run with many answers, then the other), "
                        f"not {len(paths)} argument(s): {' '.join(paths) or 'none'}.")
    many_path, one_path = paths
    for path in paths:
        if not os.path.isfile(path):
            raise UserError(f"--compare {path} {why_missing(path)}; pass the demo_report.json files that reports "
                            f"with --n_samples 2 or more wrote (results/<name>/<phase>_<epoch>/demo_report.json).")
    rerun = "Run scripts/demo_report.py --n_samples N again to rewrite it."
    tables = [read_json_object(path, rerun) for path in paths]
    for path, table in zip(paths, tables):
        if not isinstance(table.get("trained"), dict):
            raise UserError(f"--compare {path} holds no scores of a trained model (no \"trained\" table). {rerun}")
    many, one = (table["trained"] for table in tables)
    keys = [key for key in ("diversity_LPIPS", "diversity_L1") if key in many and key in one]
    if not keys:
        print("no diversity score in both files: run scripts/demo_report.py with --n_samples 2 or more")
        return 1
    for key in keys:
        print(f"{key}: {many[key]:.4f} ({many_path}) vs {one[key]:.4f} ({one_path})")
    more = all(many[key] > one[key] for key in keys)
    print("the first run's answers are more diverse" if more else "the first run's answers are NOT more diverse")
    return 0 if more else 1


def add_compare_flag(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--compare", nargs=2, metavar=("MANY.json", "ONE.json"), default=None, on_resume="silent",
                        help="instead of a report: whether the trained samples of the run whose demo_report.json is "
                             "first are more diverse than those of the second (no other flag)")
    return parser


class ReportOptions(TestOptions):
    """test.py's flags (the run's command line picks the same checkpoint and test images) and this script's."""

    def initialize(self, parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        parser = super().initialize(parser)
        parser.add_argument("--texture_window", type=TEXTURE_WINDOW, default=0, on_resume="silent",
                            help="also score coarse_L1 and texture_L1 over N x N squares, which then decide the "
                                 "verdict (an unpaired model whose fine texture no model can know); 0: pixel L1")
        return add_compare_flag(parser)

    def check_combinations(self, parser: argparse.ArgumentParser, opt) -> None:
        super().check_combinations(parser, opt)
        if opt.texture_window and spatial_dims(opt) == 3:
            parser.error(f"argument --texture_window: --texture_window {opt.texture_window} compares squares of "
                         f"pictures; --dataset_mode {opt.dataset_mode} gives volumes, which it does not score: leave "
                         f"--texture_window out")


def compared_files(argv: list[str]) -> list[str] | None:
    """The two files of `--compare MANY.json ONE.json`, wherever it stands, or None without it; a parse
    error (exit 2) when other arguments come with it, which it would not read."""
    parser = add_compare_flag(OneParagraphParser(add_help=False))
    known, rest = parser.parse_known_args(argv)
    if known.compare is not None and rest:
        parser.error(f"argument --compare: --compare compares two demo_report.json files and reads no other "
                     f"argument, but {' '.join(rest)} came with it; pass --compare MANY.json ONE.json alone")
    return known.compare


@exits_on_user_error()
def main(argv: list[str] | None = None) -> int:
    setup_logging()
    argv = sys.argv[1:] if argv is None else argv
    paths = None if {"-h", "--help"} & set(argv) else compared_files(argv)  # --help: every flag, ReportOptions'
    if paths is not None:
        return compare(paths)
    opt = ReportOptions().parse(argv)
    texture_window = opt.texture_window
    best = best_epoch(opt)
    table = report(opt, best, texture_window)
    # Where a texture is the translation, its distances decide (pixel L1 cannot tell a stripe's phase).
    decisive = ["coarse_L1", "texture_L1"] if texture_window else ["L1"]
    spread = [key for key in ("coarse_L1", "texture_L1", "MAE", "diversity_L1", "diversity_LPIPS")
              if key in table["trained"]]
    print(f"{'held-out test images':<22}{'L1 (lower is better)':>22}{'PSNR dB':>10}"
          + "".join(f"{k:>17}" for k in spread))
    for name, row in table.items():
        label = f"best (epoch {best['epoch']})" if name == "best" else name
        print(f"{label:<22}{row['L1']:>22.4f}{row['PSNR']:>10.2f}" + "".join(
            f"{row[k]:>17.4f}" if k in row else f"{'':>17}" for k in spread))
    if best is not None:
        validated = ", ".join(f"{k} {v:.4f}" for k, v in best["metrics"].items() if not k.startswith("ema_"))
        print(f"best epoch by validation: {best['epoch']} of the run (on the val split: {validated})")
        table["best"]["epoch"] = best["epoch"]
    out_dir = os.path.join(opt.results_dir, opt.name, f"{opt.phase}_{opt.epoch}")
    os.makedirs(out_dir, exist_ok=True)
    atomic_write_json(os.path.join(out_dir, "demo_report.json"), table, indent=1)
    improved = all(table["trained"][key] < min(table["untrained"][key], table["identity"][key]) for key in decisive)
    print(f"training works: the trained model beats both baselines ({', '.join(decisive)})" if improved
          else f"training did NOT beat the baselines ({', '.join(decisive)})")
    return 0 if improved else 1


if __name__ == "__main__":
    exit_with_status(main())
