"""Apply one trained generator in one direction (e.g. a CycleGAN half) to single images.

Loads `<epoch>_net_G[model_suffix].pth`, so `--model_suffix _A` loads CycleGAN's G_A.
"""
from __future__ import annotations

import os

from models import networks
from models.base_model import BaseModel
from models.network_views import NetworkViews
from util.checkpoint_io import load_state_dict_file


class TestModel(BaseModel):
    visual_sides = {"real": "A", "fake": "B"}
    translators = ("G",)  # each instance: ("G" + --model_suffix,), the network it loads
    network_calls = {"netG": networks.NetworkCall(networks.GENERATOR)}  # G(real): the image alone

    @classmethod
    def visual_domains(cls, opt) -> dict[str, str]:
        """It reads one folder as domain A whatever --direction says, and translates it to B."""
        return dict(cls.visual_sides)

    @classmethod
    def scored_pairs(cls, paired: bool) -> dict[str, tuple[str, str | None]]:
        """The outputs have no targets: FID/KID against real images (--fid_reference)."""
        return {"": ("fake", None)}

    @staticmethod
    def modify_commandline_options(parser, is_train: bool = True):
        if is_train:
            parser.error("--model test only applies a trained generator (test.py); to train use --model "
                         "cycle_gan, pix2pix, colorization or template")
        parser.set_defaults(dataset_mode="single")
        parser.add_argument("--model_suffix", type=str, default="", on_resume="silent",
                            help="In checkpoints_dir, [epoch]_net_G[model_suffix].pth will be loaded as the generator.")
        return parser

    def __init__(self, opt, ctx):
        super().__init__(opt, ctx)
        self.loss_names = []
        self.visual_names = ["real", "fake"]
        self.model_names = ["G" + opt.model_suffix]
        self.translators = (self.model_names[0],)
        self.network_roles = {self.model_names[0]: "generator"}
        # A CUT checkpoint's antialiased layers are seen in its weights (CUT's test.py has no --model test)
        epoch = f"iter_{opt.load_iter}" if opt.load_iter > 0 else opt.epoch
        weights = os.path.join(self.save_dir, f"{epoch}_net_{self.model_names[0]}.pth")
        state = load_state_dict_file(weights) if os.path.isfile(weights) else {}
        self.netG = networks.rebuild_generator(opt, state, opt.input_nc, opt.output_nc).to(self.device)
        # The checkpoint name decides the attribute name (netG_A for suffix _A).
        setattr(self, "netG" + opt.model_suffix, self.netG)

    def set_input(self, input: dict) -> None:
        self.real = self.to_device(input["A"])
        self.image_paths = input["A_paths"]

    def forward(self, nets: NetworkViews) -> None:
        self.fake = nets[self.model_names[0]](self.real)
