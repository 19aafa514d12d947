"""Models written for the contract before the training engine are refused with how to update them.

Until the networks stayed the model's plain modules, a model's `forward()` and `optimize_parameters()`
took no argument, called `self.netG(x)` (a DDP wrapper in training) and applied its losses with
`self.update_weights(optimizer, loss)` inside `with self.frozen(self.netD) as netD:`. Now `forward(nets)`
calls the networks it is handed and `optimize_parameters(step)` applies its losses with the step's
`update_weights` and `frozen` (docs/extending.md, "A model"). A model of the old kind is named in one
paragraph when it is created, before a run writes anything, rather than failing at its first step.
"""
from __future__ import annotations

import inspect

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


class MovedToTheStep:
    """What a model called on itself before, now the training step's: a call names where it went."""

    def update_weights(self, optimizer, loss) -> None:
        raise UserError(f"{type(self).__name__} calls self.update_weights(optimizer, loss), which is now the "
                        f"training step's; {HOW}.")

    def frozen(self, *nets):
        raise UserError(f"{type(self).__name__} calls self.frozen(...), which is now the training step's; {HOW}.")
