"""Model registry: `--model NAME` picks a model class; `create_model(opt, ctx, seed)` builds it.

A built-in model NAME is the `BaseModel` subclass in models/NAME_model.py whose class name,
lower-cased without underscores, is NAME + "model" (cycle_gan -> CycleGANModel), as in the
reference: adding one is adding that file (see models/template_model.py). A model of your own
needs no file here: pass its module path, `--model mypackage.my_model`, importable from sys.path
or the current directory; the one `BaseModel` subclass defined in that module is the model. A run
folder's architecture.json stores the name as given, so scripts find the class the same way.
"""
from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import os
import pkgutil

from models.base_model import BaseModel
from util.console import print0
from util.distributed import DistContext
from util.errors import UserError
from util.user_code import classes_defined_in, import_user_module

_MODULE_SUFFIX = "_model"
_NOT_MODELS = ("base",)  # models/base_model.py holds the contract, not a model


def builtin_model_names() -> list[str]:
    """The built-in models' names (models/<name>_model.py), sorted."""
    folder = os.path.dirname(os.path.abspath(__file__))
    stems = (info.name for info in pkgutil.iter_modules([folder]))
    return sorted(stem[:-len(_MODULE_SUFFIX)] for stem in stems
                  if stem.endswith(_MODULE_SUFFIX) and stem[:-len(_MODULE_SUFFIX)] not in _NOT_MODELS)


def builtin_models() -> dict[str, type[BaseModel]]:
    """Every built-in model class by name (imports them all)."""
    return {name: find_model_using_name(name) for name in builtin_model_names()}


@functools.cache
def find_model_using_name(model_name: str) -> type[BaseModel]:
    """The model class `--model model_name` names: a built-in name, or a dotted module path whose
    module defines exactly one BaseModel subclass. A UserError (one paragraph: the built-in names
    and how to name a module) for anything else."""
    if model_name in builtin_model_names():
        return _builtin_class(model_name)
    if "." in model_name and all(part.isidentifier() for part in model_name.split(".")):
        return _model_in_module(model_name)
    raise UserError(f"--model {model_name} is not a model; choose one of {', '.join(builtin_model_names())}, or "
                    f"pass the module path of your own (e.g. --model mypackage.my_model for mypackage/my_model.py, "
                    f"importable from the current directory or sys.path), whose one BaseModel subclass is used.")


def model_name(text: str) -> str:
    """argparse `type` of --model: `text` when it names a model (find_model_using_name), so that a bad
    name exits 2 with one paragraph while options are parsed, before anything is written."""
    try:
        find_model_using_name(text)
    except UserError as err:
        # argparse prefixes "argument --model: ", so the message starts at the name
        raise argparse.ArgumentTypeError(" ".join(str(err).split()).removeprefix("--model ")) from None
    return text


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


def _model_in_module(path: str) -> type[BaseModel]:
    """The one concrete BaseModel subclass the module `path` defines (imported ones do not count)."""
    def missing() -> str:
        return (f"--model {path}: no module {path} (looked in the current directory {os.getcwd()} and sys.path); "
                f"choose one of {', '.join(builtin_model_names())}, or pass the dotted path of a module of yours "
                f"that defines one BaseModel subclass.")
    module = import_user_module(path, missing)
    found = classes_defined_in(module, BaseModel)
    if len(found) != 1:
        what = "defines no BaseModel subclass" if not found else \
            f"defines {len(found)} BaseModel subclasses ({', '.join(c.__name__ for c in found)})"
        raise UserError(f"--model {path}: the module {module.__file__} {what}; a model module defines exactly one "
                        f"(see models/template_model.py).")
    return found[0]


def _builtin_class(name: str) -> type[BaseModel]:
    module = importlib.import_module(f"models.{name}{_MODULE_SUFFIX}")
    wanted = name.replace("_", "") + "model"
    for candidate in vars(module).values():
        if (inspect.isclass(candidate) and issubclass(candidate, BaseModel)
                and candidate.__name__.lower() == wanted):
            return candidate
    raise RuntimeError(f"{module.__file__} defines no BaseModel subclass named {wanted} (case aside); a built-in "
                       f"model's class is its file's name without underscores, e.g. CycleGANModel in cycle_gan_model.py")
