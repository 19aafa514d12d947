"""Inference flags, as in the reference implementation."""
from __future__ import annotations

import argparse

from options.base_options import BaseOptions


class TestOptions(BaseOptions):
    isTrain = False

    def initialize(self, parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        parser = super().initialize(parser)
        parser.add_argument("--results_dir", type=str, default="./results/", help="saves results here.")
        parser.add_argument("--aspect_ratio", type=float, default=1.0, help="aspect ratio of result images")
        parser.add_argument("--phase", type=str, default="test", help="train, val, test, etc")
        parser.add_argument("--eval", action="store_true", help="use eval mode during test time.")
        parser.add_argument("--num_test", type=int, default=50, help="how many test images to run")
        parser.set_defaults(model="test")
        # To avoid cropping, the load_size should be the same as crop_size.
        parser.set_defaults(load_size=parser.get_default("crop_size"))
        # The reference hard-codes these for testing; as defaults they keep its behaviour.
        parser.set_defaults(num_threads=0, batch_size=1, serial_batches=True, no_flip=True, display_id=-1)
        return parser
