"""Model registry. `create_model(opt, ctx)` builds the model named by `--model`.

Models: cycle_gan, pix2pix, test (one generator, inference only), colorization, template.
To add one, write a `BaseModel` subclass (see models/template_model.py) and list it below.
"""
from __future__ import annotations

from models.base_model import BaseModel
from models.colorization_model import ColorizationModel
from models.cycle_gan_model import CycleGANModel
from models.pix2pix_model import Pix2PixModel
from models.template_model import TemplateModel
from models.test_model import TestModel
from util.console import print0
from util.distributed import DistContext
from util.errors import UserError

MODELS: dict[str, type[BaseModel]] = {
    "cycle_gan": CycleGANModel,
    "pix2pix": Pix2PixModel,
    "test": TestModel,
    "colorization": ColorizationModel,
    "template": TemplateModel,
}


def find_model_using_name(model_name: str) -> type[BaseModel]:
    if model_name not in MODELS:
        raise UserError(f"--model {model_name} is not a model; choose one of {', '.join(sorted(MODELS))}.")
    return MODELS[model_name]


def get_option_setter(model_name: str):
    return find_model_using_name(model_name).modify_commandline_options


def create_model(opt, ctx: DistContext, seed: int = 0) -> BaseModel:
    """Build the model for `opt.model` on `ctx.device`; call `model.setup(opt)` next."""
    model = find_model_using_name(opt.model)(opt, ctx, seed)
    print0(f"model [{type(model).__name__}] was created")
    return model
