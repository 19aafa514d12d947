"""Your own logger without forking: `train.py --logger MODULE` (repeatable) imports MODULE and adds
the one `LoggerBackend` subclass defined in it beside the built-in back ends.

MODULE is a dotted module name that Python can import (installed, on PYTHONPATH, or a folder of this
repository), or the path of a `.py` file. A bad value is refused when the options are parsed, before
the run writes anything, naming every problem (options/train_options.py).
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from types import ModuleType

from util.display.backend import LoggerBackend
from util.errors import UserError

HOW = "see docs/visualization.md, \"Writing a logger\""


def import_logger_module(spec: str) -> ModuleType:
    """The module `spec` names (a dotted name or a .py file); UserError if there is none."""
    if spec.endswith(".py"):
        if not os.path.isfile(spec):
            raise UserError(f"{spec}: no such file")
        name = "user_logger_" + os.path.splitext(os.path.basename(spec))[0]
        if name not in sys.modules:
            module_spec = importlib.util.spec_from_file_location(name, spec)
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[name] = module  # dataclasses and pickling look their module up there
            module_spec.loader.exec_module(module)
        return sys.modules[name]
    try:
        return importlib.import_module(spec)
    except ModuleNotFoundError as err:
        if err.name and (spec == err.name or spec.startswith(err.name + ".")):
            raise UserError(f"{spec}: no module of that name can be imported (is it installed, on PYTHONPATH or "
                            f"in the folder train.py is in? a file is given by its path, ending in .py)") from None
        raise UserError(f"{spec}: importing it failed: {err} (a package it needs is missing)") from None


def logger_class(spec: str) -> type[LoggerBackend]:
    """The one LoggerBackend subclass that the module `spec` defines; UserError if it defines none or several."""
    module = import_logger_module(spec)
    found = [cls for _, cls in inspect.getmembers(module, inspect.isclass)
             if issubclass(cls, LoggerBackend) and cls is not LoggerBackend and cls.__module__ == module.__name__]
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
