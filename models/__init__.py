"""Model registry: `--model NAME` picks a model class; `create_model(opt, ctx, seed)` builds it.

A built-in model NAME is the `BaseModel` subclass in models/NAME_model.py whose class name,
lower-cased without underscores, is NAME + "model" (cycle_gan -> CycleGANModel), as in the
reference: adding one is adding that file (see models/template_model.py). A model of your own
needs no file here: pass its module path, `--model mypackage.my_model`, importable from sys.path
or the current directory; the one `BaseModel` subclass defined in that module is the model. Both
are found as every kind is (util/registry.py). A run folder's architecture.json stores the name as
given, so scripts find the class the same way.
"""
from __future__ import annotations

import functools
import inspect

from models.base_model import BaseModel
from models.model_contract import check_contract
from util.console import print0
from util.distributed import DistContext
from util.registry import NamedFiles, Registry, argument_type

MODELS: Registry[BaseModel] = Registry("--model", BaseModel, kind="model", builtins=NamedFiles("models", "_model"),
                                       example="mypackage.my_model", see="docs/extending.md, \"A model\"")


def builtin_model_names() -> list[str]:
    """The built-in models' names (models/<name>_model.py), sorted."""
    return MODELS.builtin_names()


def builtin_models() -> dict[str, type[BaseModel]]:
    """Every built-in model class by name (imports them all)."""
    return MODELS.builtin_classes()


@functools.cache
def find_model_using_name(model_name: str) -> type[BaseModel]:
    """The model class `--model model_name` names: a built-in name, or a dotted module path whose
    module defines exactly one BaseModel subclass. A UserError (one paragraph: the built-in names
    and how to name a module) for anything else, and for a model written for the contract before
    the training engine (models/model_contract.py)."""
    model_class = MODELS.find(model_name)
    check_contract(model_class, f"--model {model_name}")
    return model_class


# argparse `type` of --model: the name when it names a model, so that a bad one exits 2 with one
# paragraph while options are parsed, before anything is written.
model_name = argument_type(find_model_using_name, "--model")


def get_option_setter(model_name: str):
    """The model's `modify_commandline_options(parser, is_train)`."""
    return find_model_using_name(model_name).modify_commandline_options


def create_model(opt, ctx: DistContext, seed: int = 0) -> BaseModel:
    """Build the model for `opt.model` on `ctx.device`; call `model.setup(opt)` next. Models whose
    constructor takes a `seed` (the run's seed, the same on every rank: for a model's own random
    streams, e.g. CycleGAN's image pools) get it; the others are built from (opt, ctx) alone."""
    model_class = find_model_using_name(opt.model)
    takes_seed = "seed" in inspect.signature(model_class).parameters
    model = model_class(opt, ctx, seed=seed) if takes_seed else model_class(opt, ctx)
    print0(f"model [{type(model).__name__}] was created")
    return model
