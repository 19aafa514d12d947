"""Classes from a user's own module: `--model mypackage.my_model`, `--dataset_mode my.dataset`,
`--netG mypackage.my_net`, `--logger my_logger.py` all name a module that defines one subclass of
the project's base class. One way to find it, with one rule for where modules are looked for:
importable from sys.path or from the folder the command runs in (a script's sys.path starts at the
script's own folder, not there), or, where a caller allows it, the path of a `.py` file.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable
from types import ModuleType

from util.errors import UserError


def import_user_module(spec: str, missing: Callable[[], str], allow_file: bool = False) -> ModuleType:
    """The module `spec` names: a dotted module name, or with `allow_file` the path of a .py file.
    When that module (or its package) cannot be found, a UserError with the paragraph `missing()`;
    a module that exists but fails to import (e.g. it needs a package that is missing) keeps its
    own error and traceback."""
    if allow_file and spec.endswith(".py"):
        return _import_file(spec, missing)
    if not spec or not all(part.isidentifier() for part in spec.split(".")):
        raise UserError(missing())
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        return importlib.import_module(spec)
    except ModuleNotFoundError as err:
        if err.name is not None and (spec == err.name or spec.startswith(err.name + ".")):
            raise UserError(missing()) from None
        raise


def _import_file(path: str, missing: Callable[[], str]) -> ModuleType:
    if not os.path.isfile(path):
        raise UserError(missing())
    name = "user_module_" + os.path.splitext(os.path.basename(path))[0]
    if name not in sys.modules:
        module_spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module  # dataclasses and pickling look their module up there
        module_spec.loader.exec_module(module)
    return sys.modules[name]


def classes_defined_in(module: ModuleType, base: type) -> list[type]:
    """The concrete subclasses of `base` that `module` defines (ones it imports, e.g. to extend
    them, do not count), in the order they are defined."""
    return [candidate for candidate in vars(module).values()
            if inspect.isclass(candidate) and issubclass(candidate, base) and candidate is not base
            and candidate.__module__ == module.__name__ and not inspect.isabstract(candidate)]


def load_user_class(spec: str, base: type, flag: str, how: str) -> type:
    """The one subclass of `base` that the module `spec` defines, for the option `flag`; a UserError
    (one paragraph, ending with `how`) when there is no such module or it defines none or several."""
    def missing() -> str:
        return (f"{flag} {spec}: no module of that name can be imported (looked in the current folder "
                f"{os.getcwd()} and on sys.path); {how}.")
    module = import_user_module(spec, missing)
    found = classes_defined_in(module, base)
    if len(found) != 1:
        what = "none" if not found else f"{len(found)} ({', '.join(c.__name__ for c in found)})"
        raise UserError(f"{flag} {spec}: the module {module.__file__} must define exactly one {base.__name__} "
                        f"subclass, but defines {what}; {how}.")
    return found[0]
