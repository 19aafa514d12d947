"""A starting point for your own model: a generator trained by L1 regression.

To write a model `dummy`, copy this file to models/dummy_model.py and rename the class DummyModel:
`--model dummy` finds it by its file and class names, nothing else to edit. (Or keep it outside this
project, e.g. mypackage/dummy_model.py, and pass `--model mypackage.dummy_model`.) Then fill in:
  - `modify_commandline_options`: your flags and changed defaults, each flag with what a change of
    it does on --continue_train (`on_resume="noted"` for a loss weight, "architecture" for what
    shapes a network: docs/resume.md);
  - the facts the code around a model reads from its class (models/base_model.py):
      `visual_sides`: each visual's domain, A being the input side (test.py's full-precision files);
      `translators`: the generator that translates (the Translator, scripts/translate.py, export.py);
      `scored_pairs(paired)`: which output is scored against which target (validation, test.py);
      `input_visual`: the input, scored against the target as the do-nothing baseline;
  - `__init__(opt, ctx)` (add a `seed` parameter for random streams of your own): `loss_names`,
    `visual_names`, `model_names`, the networks, losses, optimizers;
  - `set_input`: move the batch to `self.device`;
  - `forward(nets)`: produce the outputs named in `visual_names`, calling each network as
    `nets.<name>(...)` (`self.net<name>` is the plain module: its weights; `nets` runs it as the
    caller needs, e.g. DDP-wrapped in training, padded to any image size at test time);
  - `optimize_parameters(step)`: compute losses with `step.nets` and apply each with
    `step.update_weights(optimizer, loss)`;
  - optionally `data_dependent_initialize(first_batch)`: build what needs to see data first.
DDP wrapping and the step's mechanics come from the training engine (models/training/engine.py);
checkpoints, schedules, logging and test-time loading from BaseModel.
Train it with: python train.py --dataroot ./datasets/facades --name template --model template
"""
from __future__ import annotations

import torch

from models import networks
from models.base_model import BaseModel
from models.network_views import NetworkViews
from models.training.step import TrainingStep
from util.flag_types import non_negative_float


class TemplateModel(BaseModel):
    visual_sides = {"data_A": "A", "data_B": "B", "output": "B"}
    network_roles = {"G": "generator"}  # what each network does (base_model.ROLES)
    # how it calls the network each flag names: --netG's on the image alone (the options refuse a family
    # that takes more, e.g. a time index, before anything runs)
    network_calls = {"netG": networks.NetworkCall(networks.GENERATOR)}
    translators = ("G",)  # netG translates A -> B
    input_visual = "data_A"
    loss_weights = ("lambda_regression",)  # its one loss: with --lambda_regression 0, G would learn nothing

    @classmethod
    def scored_pairs(cls, paired: bool) -> dict[str, tuple[str, str | None]]:
        """The output against its target: L1/PSNR/SSIM for paired data, FID/KID otherwise."""
        return {"": ("output", "data_B")}

    @staticmethod
    def modify_commandline_options(parser, is_train: bool = True):
        parser.set_defaults(dataset_mode="aligned")
        if is_train:
            parser.add_argument("--lambda_regression", type=non_negative_float, default=1.0, on_resume="noted",
                                help="weight for the regression loss")
        return parser

    # --accum_steps (models/training/accumulation.py): the methods that make one step, split where a loss
    # needs an optimizer step taken before it in the same step; one optimizer here, so one phase.
    accumulation_phases = ("optimize_parameters",)

    def __init__(self, opt, ctx):
        super().__init__(opt, ctx)
        self.loss_names = ["G"]
        self.visual_names = ["data_A", "data_B", "output"]
        self.model_names = ["G"]
        self.netG = networks.build_generator(opt, opt.input_nc, opt.output_nc).to(self.device)
        if self.isTrain:
            self.criterionLoss = torch.nn.L1Loss()
            self.optimizer = self.make_adam(self.netG.parameters())
            self.optimizers = [self.optimizer]

    def set_input(self, input: dict) -> None:
        self.data_A, self.data_B, self.image_paths = self.paired_input(input)

    def forward(self, nets: NetworkViews) -> None:
        self.output = nets.G(self.data_A)  # netG as the caller runs it (DDP-wrapped in training, padded at test)

    def optimize_parameters(self, step: TrainingStep) -> None:
        with self.autocast():  # mixed precision with --amp
            self.forward(step.nets)
            self.loss_G = self.criterionLoss(self.output, self.data_B) * self.opt.lambda_regression
        step.update_weights(self.optimizer, self.loss_G)  # gradients, fp16 scaling, accumulation, the step
