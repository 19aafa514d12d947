"""Models written for the contract before the training engine are refused with how to update them.

Until the networks stayed the model's plain modules, a model's `forward()` and `optimize_parameters()`
took no argument, called `self.netG(x)` (a DDP wrapper in training) and applied its losses with
`self.update_weights(optimizer, loss)` inside `with self.frozen(self.netD) as netD:`. Now `forward(nets)`
calls the networks it is handed and `optimize_parameters(step)` applies its losses with the step's
`update_weights` and `frozen` (docs/extending.md, "A model"). A model of the old kind is named in one
paragraph when it is created, before a run writes anything, rather than failing at its first step;
so is one that still calls `self.update_weights(...)` or `self.frozen(...)`, read from its source.
"""
from __future__ import annotations

import ast
import inspect
import textwrap

from util.errors import UserError

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
