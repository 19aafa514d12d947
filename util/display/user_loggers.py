"""Your own logger without forking: `train.py --logger MODULE` (repeatable) imports MODULE and adds
the one `LoggerBackend` subclass defined in it beside the built-in back ends.

MODULE is a dotted module name that Python can import (installed, on PYTHONPATH, or a folder of this
repository), or the path of a `.py` file. A bad value is refused when the options are parsed, before
the run writes anything, naming every problem (options/train_options.py).
"""
from __future__ import annotations

from util.display.backend import LoggerBackend
from util.errors import UserError
from util.user_code import classes_defined_in, import_user_module

HOW = "see docs/visualization.md, \"Writing a logger\""


def logger_class(spec: str) -> type[LoggerBackend]:
    """The one LoggerBackend subclass that the module `spec` (a dotted name or a .py file) defines;
    UserError if there is no such module, or it defines none or several."""
    def missing() -> str:
        if spec.endswith(".py"):
            return f"{spec}: no such file"
        return (f"{spec}: no module of that name can be imported (is it installed, on PYTHONPATH or in the "
                f"folder train.py is run from? a file is given by its path, ending in .py)")
    module = import_user_module(spec, missing, allow_file=True)
    found = classes_defined_in(module, LoggerBackend)
    if not found:
        raise UserError(f"{spec}: defines no subclass of util.display.backend.LoggerBackend ({HOW})")
    if len(found) > 1:
        raise UserError(f"{spec}: defines several LoggerBackend subclasses ({', '.join(c.__name__ for c in found)}); "
                        f"keep one logger per module")
    return found[0]


def logger_classes(specs: list[str]) -> list[type[LoggerBackend]]:
    """The logger class of each --logger value, in order; one UserError naming every bad value."""
    classes, problems = [], []
    for spec in specs:
        try:
            classes.append(logger_class(spec))
        except UserError as err:
            problems.append(str(err))
    if problems:
        raise UserError(f"--logger: {'; '.join(problems)}")
    return classes
