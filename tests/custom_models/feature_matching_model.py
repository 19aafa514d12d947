"""A model that lives outside models/, as a user's own would (`--model custom_models.feature_matching_model`
with tests/ on sys.path): proof that a new model is one file, written against BaseModel's contract alone.

It translates paired images with one generator trained by L1 plus a feature-matching loss through a
projection `netF` that, like CUT's MLP head, is built from the first training batch (its input channels
are the target images' channels), before the training engine wraps the networks in DDP; its optimizer is
made then.
"""
from __future__ import annotations

import itertools

import torch
from torch import nn

from models import networks
from models.base_model import BaseModel
from util.flag_types import non_negative_float

FEATURES = 4


class FeatureMatchingModel(BaseModel):
    """G: one generator (--netG), A -> B. Training: L1(G(A), B) + --lambda_feature * L1(F(G(A)), F(B))."""

    # What the code around a model reads (models/base_model.py): domains of the visuals, the
    # generator that translates, what validation and test.py score.
    visual_sides = {"real_A": "A", "fake_B": "B", "real_B": "B"}
    network_roles = {"G": "generator", "F": "head"}  # netF: a projection for the feature loss
    translators = ("G",)
    input_visual = "real_A"

    @classmethod
    def scored_pairs(cls, paired: bool) -> dict[str, tuple[str, str | None]]:
        return {"": ("fake_B", "real_B")} if paired else {"": ("fake_B", None)}

    @staticmethod
    def modify_commandline_options(parser, is_train: bool = True):
        parser.set_defaults(dataset_mode="aligned", netG="resnet_6blocks", norm="instance")
        if is_train:
            parser.add_argument("--lambda_feature", type=non_negative_float, default=1.0,
                                help="weight of the feature-matching loss through netF")
        return parser

    def __init__(self, opt, ctx):
        super().__init__(opt, ctx)
        self.loss_names = ["G_L1", "G_feature"] if self.isTrain else []
        self.visual_names = ["real_A", "fake_B", "real_B"]
        self.model_names = ["G"]
        self.netG = networks.define_G(opt.input_nc, opt.output_nc, opt.ngf, opt.netG, opt.norm,
                                      not opt.no_dropout, opt.init_type, opt.init_gain).to(self.device)

    def data_dependent_initialize(self, batch: dict) -> None:
        """netF's size follows the data: its input channels are those of the first batch's targets."""
        _, target, _ = self.paired_input(batch)
        self.netF = nn.Conv2d(target.shape[1], FEATURES, kernel_size=1).to(self.device, self.dtype)
        networks.init_weights(self.netF, self.opt.init_type, self.opt.init_gain)
        self.model_names.append("F")
        self.optimizer = self.make_adam(itertools.chain(self.netG.parameters(), self.netF.parameters()))
        self.optimizers = [self.optimizer]

    def set_input(self, input: dict) -> None:
        self.real_A, self.real_B, self.image_paths = self.paired_input(input)

    def forward(self, nets) -> None:
        self.fake_B = nets.G(self.real_A)

    def optimize_parameters(self, step) -> None:
        with self.autocast():
            self.forward(step.nets)
            self.loss_G_L1 = torch.nn.functional.l1_loss(self.fake_B, self.real_B)
            features_fake, features_real = step.nets.F(self.fake_B), step.nets.F(self.real_B)
            self.loss_G_feature = torch.nn.functional.l1_loss(features_fake, features_real) * self.opt.lambda_feature
            loss = self.loss_G_L1 + self.loss_G_feature
        step.update_weights(self.optimizer, loss)
