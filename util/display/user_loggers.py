"""Your own logger without forking: `train.py --logger MODULE` (repeatable) imports MODULE and adds
the one `LoggerBackend` subclass defined in it beside the built-in back ends.

MODULE is a dotted module name that Python can import (installed, on PYTHONPATH, or a folder of this
repository), or the path of a `.py` file: found as every kind is (util/registry.py). The built-in back
ends have no --logger name: flags of their own switch them on (util/display/visualizer.py). A bad value
is refused when the options are parsed, before the run writes anything, naming every problem
(options/train_options.py).
"""
from __future__ import annotations

from util.display.backend import LoggerBackend
from util.errors import UserError
from util.registry import Registry

LOGGERS: Registry[LoggerBackend] = Registry("--logger", LoggerBackend, kind="logger", example="mypackage.my_logger",
                                            see="docs/visualization.md, \"Writing a logger\"", files=True)


def logger_class(spec: str) -> type[LoggerBackend]:
    """The one LoggerBackend subclass that the module `spec` (a dotted name or a .py file) defines;
    UserError if there is no such module, or it defines none or several."""
    return LOGGERS.find(spec)


def logger_classes(specs: list[str]) -> list[type[LoggerBackend]]:
    """The logger class of each --logger value, in order; one UserError naming every bad value."""
    classes, problems = [], []
    for spec in specs:
        try:
            classes.append(logger_class(spec))
        except UserError as err:
            problems.append(str(err).removeprefix("--logger "))
    if problems:
        raise UserError(f"--logger: {' '.join(problems)}")
    return classes
