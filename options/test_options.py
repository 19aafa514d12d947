"""Inference flags, as in the reference implementation."""
from __future__ import annotations

import argparse
import os

import data
from options.base_options import BaseOptions
from options.inference_flags import add_exact_flags, add_tile_flags
from util.errors import UserError
from util.flag_types import MAX_SAMPLES, Bounded, positive_int
from util.html import RESULT_LAYOUTS
from util.paths import unwritable_folder_reason
from util.safe_files import refuse_output_over_inputs


class TestOptions(BaseOptions):
    isTrain = False

    def initialize(self, parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        parser = super().initialize(parser)
        # test.py continues no run: its own flags are "silent" (util/resume_flags.py)
        parser.add_argument("--results_dir", type=str, default="./results/", on_resume="silent",
                            help="saves results here.")
        parser.add_argument("--results_layout", type=str, default="ours", choices=RESULT_LAYOUTS, on_resume="silent",
                            help="ours: images/<image>_<visual>.png; original: also images/<visual>/<image>.png, one "
                                 "folder per visual as CUT's and UNSB's test.py write them (UNSB's images/real/, "
                                 "images/fake_<step>/), for their evaluation commands (pytorch-fid over a folder)")
        parser.add_argument("--aspect_ratio",type=Bounded(float, low=0.01, high=100, name="aspect_ratio"),default=1.0,
                            on_resume="silent",
                            help="aspect ratio of result images")
        parser.add_argument("--phase", type=str, default="test", on_resume="noted", help="train, val, test, etc")
        parser.add_argument("--eval", action="store_true", on_resume="silent", help="use eval mode during test time.")
        parser.add_argument("--num_test", type=positive_int, default=50, on_resume="silent",
                            help="how many test images to run")
        parser.add_argument("--center_crop", action="store_true", on_resume="silent",
                            help="crop the middle of each image (--load_size > --crop_size), not a random place, as "
                                 "BicycleGAN's test.py does")
        # Large and non-square images (models/inference/application.py, models/inference/windows.py,
        # models/inference/exact/, docs/inference.md).
        parser = add_exact_flags(add_tile_flags(parser))
        # Many answers per input: models whose generator takes a latent code (docs/inference.md).
        parser.add_argument("--n_samples",type=Bounded(int, low=0, high=MAX_SAMPLES, name="n_samples"),default=0,
                            on_resume="silent",
                            help="with a model whose generator takes a latent code: besides its own output, N more "
                                 "per input from N random codes drawn from --seed (reproducible); 0: none")
        parser.add_argument("--sync", action="store_true", on_resume="silent",
                            help="with --n_samples: the same N codes for every input (otherwise each input draws its "
                                 "own)")
        # Metrics (util/evaluation/metrics.py, util/evaluation/metrics_report.py, docs/evaluation.md).
        parser.add_argument("--eval_metrics", action="store_true", on_resume="silent",
                            help="compute FID/KID besides the paired metrics (L1, PSNR, SSIM); results go to "
                                 "metrics.json and the results page")
        parser.add_argument("--fid_reference", type=str, default="", on_resume="silent",
                            help="folder of real images that FID/KID compare the outputs with (default: the test "
                                 "set's real images of the target domain, e.g. real_B)")
        parser.set_defaults(model="test")
        # To avoid cropping, the load_size should be the same as crop_size.
        parser.set_defaults(load_size=parser.get_default("crop_size"))
        # The reference hard-codes these for testing; as defaults they keep its behaviour.
        parser.set_defaults(num_threads=0, batch_size=1, serial_batches=True, no_flip=True, display_id=-1)
        return parser

    DEPENDENT_FLAGS = {
        "sync": ("--n_samples", lambda opt: opt.n_samples > 0, "gives every input the same --n_samples codes"),
        "tile_overlap": ("--tile", lambda opt: opt.tile > 0, "sets how much neighbouring tiles overlap"),
        "fid_reference": ("--eval_metrics", lambda opt: opt.eval_metrics, "gives FID/KID their real images"),
    }

    def check_combinations(self, parser: argparse.ArgumentParser, opt) -> None:
        reason = unwritable_folder_reason(opt.results_dir)
        if reason:
            parser.error(f"argument --results_dir: cannot create {opt.results_dir} ({reason}); "
                         f"choose another --results_dir")
        inputs = [("of --dataroot", folder) for folder in data.folders_read(opt)]
        if opt.eval_metrics and opt.fid_reference:
            inputs.append(("--fid_reference", opt.fid_reference))
        written = results_folder(opt)
        try:  # the results must not land among (or around) the images translated
            refuse_output_over_inputs(written, f"the results folder {written} (--results_dir {opt.results_dir})",
                                      inputs, f"Pass a --results_dir apart from the data, e.g. --results_dir "
                                      f"{os.path.normpath(opt.dataroot)}_results.")
        except UserError as err:
            parser.error(f"argument --results_dir: {err}")


def results_folder(opt) -> str:
    """The folder test.py writes: --results_dir/--name/<phase>_<epoch>[_iter<load_iter>]."""
    folder = os.path.join(opt.results_dir, opt.name, f"{opt.phase}_{opt.epoch}")
    return f"{folder}_iter{opt.load_iter}" if opt.load_iter > 0 else folder
