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

import ast
import functools
import inspect
import textwrap

from models.base_model import BaseModel
from util.console import print0
from util.distributed import DistContext, current_context
from util.errors import UserError
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
    the training engine (`check_contract`, below)."""
    model_class = MODELS.find(model_name)
    check_contract(model_class, f"--model {model_name}")
    return model_class


# argparse `type` of --model: the name when it names a model, so that a bad one exits 2 with one
# paragraph while options are parsed, before anything is written.
model_name = argument_type(find_model_using_name, "--model")


def get_option_setter(model_name: str):
    """The model's `modify_commandline_options(parser, is_train)`."""
    return find_model_using_name(model_name).modify_commandline_options


def create_model(opt, ctx: DistContext | None = None, seed: int = 0) -> BaseModel:
    """Build the model for `opt.model` on `ctx.device`; call `model.setup(opt)` next. Models whose
    constructor takes a `seed` (the run's seed, the same on every rank: for a model's own random
    streams, e.g. CycleGAN's image pools) get it; the others are built from (opt, ctx) alone. Without
    `ctx` (the reference's callers pass only `opt`): `current_context()`, this process as started."""
    ctx = ctx or current_context()
    model_class = find_model_using_name(opt.model)
    takes_seed = "seed" in inspect.signature(model_class).parameters
    model = model_class(opt, ctx, seed=seed) if takes_seed else model_class(opt, ctx)
    print0(f"model [{type(model).__name__}] was created")
    return model


# ---------------------------------------------------------------------------- the contract's checks
# A model written for the contract before the training engine (forward() and optimize_parameters() without
# arguments, self.update_weights, self.frozen) is refused when it is found, saying how to update it
# (docs/extending.md, "A model"), rather than failing at its first step.
HOW = ("a model's forward takes the networks to call, `def forward(self, nets)` calling `nets.G(x)` "
       "(`self.netG` is the plain module: under torchrun it would train without DDP's all-reduce), and "
       "optimize_parameters (and each of its accumulation_phases) the training step, `def "
       "optimize_parameters(self, step)`, running `self.forward(step.nets)`, applying each loss with "
       "`step.update_weights(optimizer, loss)` and judging through `with step.frozen(\"D\") as netD:`; see "
       "docs/extending.md, \"A model\", and models/template_model.py")


def check_contract(model_class: type, flag: str) -> None:
    """A UserError naming `model_class` (picked by `flag`, e.g. "--model mypackage.my_model") when its
    forward, optimize_parameters or an accumulation phase takes no argument (the contract before)."""
    methods = ["forward", "optimize_parameters", *getattr(model_class, "accumulation_phases", ())]
    for method in methods:
        function = getattr(model_class, method, None)
        if function is None:
            continue
        parameters = list(inspect.signature(function).parameters.values())[1:]  # after self
        if not any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in parameters):
            raise UserError(f"{flag}: {model_class.__name__}.{method}() takes no argument, as models did before "
                            f"the training engine ran their steps; {HOW}.")
    for called in calls_moved_to_the_step(model_class):
        raise UserError(f"{flag}: {model_class.__name__} calls self.{called}(...), which is now the training "
                        f"step's; {HOW}.")


MOVED_TO_THE_STEP = ("update_weights", "frozen")  # what a model called on itself before, now `step.<name>`


def calls_moved_to_the_step(model_class: type) -> list[str]:
    """The names of MOVED_TO_THE_STEP that the source of `model_class` or of a base class calls on `self`;
    none where a source cannot be read (a class made at run time)."""
    found = []
    for cls in model_class.__mro__[:-1]:  # all but `object`
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
        except (OSError, TypeError, SyntaxError):
            continue
        found += [node.func.attr for node in ast.walk(tree)
                  if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and isinstance(node.func.value, ast.Name) and node.func.value.id == "self"
                  and node.func.attr in MOVED_TO_THE_STEP and node.func.attr not in found]
    return found
