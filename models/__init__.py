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

from data import spatial_dims
from models import networks
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


# ---------------------------------------------------------------------------- networks a model can run
# What a model that declares no `network_calls` is checked for: only that its networks have the data's number
# of spatial dimensions (a model of one's own keeps the behaviour it had before models declared their calls).
_DIMENSIONS_ONLY = {"netG": networks.NetworkCall(networks.GENERATOR),
                    "netD": networks.NetworkCall(networks.DISCRIMINATOR)}


def builds_network(opt, flag: str) -> bool:
    """Whether training with the options `opt` builds the network `flag` ("netD", ...) names: not where the
    model's `built_with_weight` says that a weight of 0 leaves it out (pix2pix --lambda_GAN 0: no D)."""
    weight = find_model_using_name(opt.model).built_with_weight.get(flag)
    return weight is None or getattr(opt, weight) > 0


def network_refusal(opt, calls: bool = True) -> tuple[str, str] | None:
    """(the flag, one paragraph) for the first network the parsed options name that cannot run in their
    --model: a family of another number of spatial dimensions than the data's, or (with `calls`) one the
    model cannot call as it calls that flag's network (its `network_calls`: what it gives beside the image,
    whether it reads the layers' outputs). Each paragraph names the models the network runs in and the
    built-in choices that run here. At test time only generators and encoders are asked (nothing else is
    built). Without `calls`, for what applies a generator itself (scripts/export.py), dimensions only."""
    model_class = find_model_using_name(opt.model)
    dims = spatial_dims(opt)
    for flag, call in (model_class.network_calls or _DIMENSIONS_ONLY).items():
        if not hasattr(opt, flag) or (not opt.isTrain and call.role not in (networks.GENERATOR, networks.ENCODER)):
            continue
        if opt.isTrain and not builds_network(opt, flag):  # a network these flags leave out is not judged
            continue
        name, family = getattr(opt, flag), networks.family_of(getattr(opt, flag), call.role)
        declared = calls and flag in model_class.network_calls
        fitting = call.fitting_names(opt, dims) if declared else \
            [other for other in networks.builtin_names(call.role)
             if networks.family_of(other, call.role).size_rule(opt).dims == dims]
        if family.size_rule(opt).dims != dims:
            kind = "volumes (3-D)" if dims == 3 else f"{dims}-D images"
            choose = f"choose a {dims}-D {call.role}: {', '.join(fitting)}" if fitting else \
                f"no built-in {dims}-D {call.role} runs in --model {opt.model}"
            return flag, (f"--{flag} {name} is a {family.size_rule(opt).dims}-D network, but --dataset_mode "
                          f"{opt.dataset_mode} gives {kind}; {choose} "
                          f"(docs/{'volumes' if dims == 3 else 'datasets'}.md)")
        why = call.refusal(family, opt, f"--model {opt.model}") if declared else None
        if why:
            takers = [model if flag in flags else f"{model} (as --{' or --'.join(flags)})"  # e.g. UNSB's --netE
                      for model, flags in _models_calling(family, opt, other_than=model_class).items()]
            runs_in = f"--{flag} {name} runs in --model {_one_of(takers)}" if takers else \
                f"no built-in model can call --{flag} {name} as these flags build it"
            choices = f"choose --{flag} {_one_of(fitting)}, or" if fitting else "no built-in one fits: write"
            return flag, (f"--{flag} {name} {why}; {runs_in}. With --model {opt.model} {choices} a family of your "
                          f"own that it can call (docs/extending.md, \"A network family\").")
    return None


def _models_calling(family: networks.NetworkFamily, opt, other_than: type[BaseModel]) -> dict[str, list[str]]:
    """The built-in models (those that train, for training options) that can call `family`'s network, as
    `opt` builds it, each with its flags (without "--") that take it."""
    found = {}
    for name, model_class in builtin_models().items():
        trains = model_class.optimize_parameters is not BaseModel.optimize_parameters
        if model_class is other_than or (opt.isTrain and not trains):
            continue
        flags = [flag for flag, call in model_class.network_calls.items()
                 if call.role == family.role and call.refusal(family, opt) is None]
        if flags:
            found[name] = flags
    return found


def _one_of(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


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
