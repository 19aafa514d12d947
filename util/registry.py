"""One registry per kind of class the user picks by name: models (`--model`), dataset modes
(`--dataset_mode`), network families (`--netG`, `--netD`, `--netE`) and loggers (`--logger`).

Every kind finds a name the same way:
  - a built-in NAME is found by the kind's convention: by its file (`NamedFiles`: models/NAME_model.py
    holds the class NAMEModel, case and underscores aside, as in the reference) or by the names its
    class declares (`DeclaredNames`: a network family's `names`). Nothing lists them: adding one is
    adding its file;
  - anything else is a module of the user's own, named by its dotted path, importable from sys.path
    or from the folder the command runs in (a script's sys.path starts at the script's own folder,
    not there), or, where the kind allows it (loggers), by the path of a .py file. That module
    defines exactly one concrete subclass of the kind's base class (one it imports, e.g. to extend
    it, does not count), and that class is the entry;
  - a name that finds nothing is a `UserError` of one paragraph naming the flag, the built-in names
    and how to name one's own; so is a module defining none or several (naming its file and the
    classes it defines). A module that exists but fails to import (it needs a package that is
    missing, it has a bug) keeps its own error and traceback.

    MODELS = Registry("--model", BaseModel, kind="model", builtins=NamedFiles("models", "_model"),
                      example="mypackage.my_model", see="docs/extending.md")
    MODELS.find("cycle_gan"), MODELS.find("mypackage.my_model"), MODELS.builtin_names()
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import os
import pkgutil
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Generic, Protocol, TypeVar

from util.errors import UserError

T = TypeVar("T")


class BuiltIns(Protocol):
    """How a kind's built-in entries are found."""

    def names(self, base: type) -> list[str]:
        """The built-in names, in the order --help and errors show them."""

    def load(self, name: str, base: type) -> type:
        """The class of the built-in `name` (one of `names`)."""


class NoBuiltIns:
    """A kind whose every entry is named by its module (loggers: the built-in back ends are switched
    on by flags of their own)."""

    def names(self, base: type) -> list[str]:
        return []

    def load(self, name: str, base: type) -> type:
        raise KeyError(name)


class NamedFiles:
    """Built-ins found by their files, as in the reference: `<package>/NAME<suffix>.py` holds the
    class whose name, lower-cased, is NAME + suffix without underscores (models/cycle_gan_model.py:
    CycleGANModel). `skip`: files of that pattern holding no entry (base_model.py: the contract)."""

    def __init__(self, package: str, suffix: str, skip: tuple[str, ...] = ("base",)) -> None:
        self.package, self.suffix, self.skip = package, suffix, skip
        self._names: list[str] | None = None

    def names(self, base: type) -> list[str]:
        if self._names is None:
            stems = (info.name for info in pkgutil.iter_modules(importlib.import_module(self.package).__path__))
            self._names = sorted(stem[:-len(self.suffix)] for stem in stems
                                 if stem.endswith(self.suffix) and stem[:-len(self.suffix)] not in self.skip)
        return self._names

    def load(self, name: str, base: type) -> type:
        module = importlib.import_module(f"{self.package}.{name}{self.suffix}")
        wanted = (name + self.suffix).replace("_", "").lower()
        for candidate in classes_defined_in(module, base):
            if candidate.__name__.lower() == wanted:
                return candidate
        raise RuntimeError(f"{module.__file__} defines no {base.__name__} subclass named {wanted} (case aside); a "
                           f"built-in's class is its file's name without underscores, e.g. CycleGANModel in "
                           f"cycle_gan_model.py")


class DeclaredNames:
    """Built-ins that say their own names: each subclass of the base in the modules of `package`
    answers to the names in its `names` attribute; `keep` picks the classes of this registry (e.g.
    the generator families). In the order of the modules' names, then as each module lists them."""

    def __init__(self, package: str, keep: Callable[[type], bool] = lambda cls: True) -> None:
        self.package, self.keep = package, keep
        self._found: dict[str, type] | None = None

    def names(self, base: type) -> list[str]:
        return list(self._classes(base))

    def load(self, name: str, base: type) -> type:
        return self._classes(base)[name]

    def _classes(self, base: type) -> dict[str, type]:
        if self._found is None:
            found: dict[str, type] = {}
            package = importlib.import_module(self.package)
            for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda info: info.name):
                if info.name.startswith("_"):
                    continue
                module = importlib.import_module(f"{self.package}.{info.name}")
                for cls in classes_defined_in(module, base):
                    if self.keep(cls):
                        found.update(dict.fromkeys(getattr(cls, "names", ()), cls))
            self._found = found
        return self._found


class Registry(Generic[T]):
    """The classes of one kind (subclasses of `base`) that the option `flag` picks by name (see the
    module docstring). `kind` words the entry in messages ("model"); `example` is a module path a user
    might give; `see` the documentation of writing one; `files`: a .py file's path may name one."""

    def __init__(self, flag: str, base: type[T], *, kind: str, example: str, see: str,
                 builtins: BuiltIns | None = None, files: bool = False) -> None:
        self.flag, self.base, self.kind, self.example, self.see = flag, base, kind, example, see
        self.builtins = builtins or NoBuiltIns()
        self.files = files

    def builtin_names(self) -> list[str]:
        """The built-in names, in the order --help and errors show them (finding them imports nothing
        for `NamedFiles`)."""
        return list(self.builtins.names(self.base))

    def builtin_classes(self) -> dict[str, type[T]]:
        """Every built-in class by name (imports them all)."""
        return {name: self.builtins.load(name, self.base) for name in self.builtin_names()}

    def find(self, name: str) -> type[T]:
        """The class `name` picks: a built-in name, or a module of the user's own (a dotted path, or
        a .py file where the kind allows it). A UserError of one paragraph when it finds nothing."""
        if name in self.builtin_names():
            return self.builtins.load(name, self.base)
        if name.endswith(".py"):
            if not self.files:
                raise UserError(self._not_found(name, f"a {self.kind} is named by its module, not by a file"))
            if not os.path.isfile(name):
                raise UserError(self._not_found(name, "no such file"))
            return self._one_class(name, _import_file(name))
        parts = name.split(".")
        # Where there are built-in names a bare name is a misspelt one, not a module to look for among
        # everything installed (`--dataset_mode json` would find Python's json module).
        if (self.builtin_names() and len(parts) < 2) or not all(part.isidentifier() for part in parts):
            raise UserError(self._not_a_name(name))
        # The current folder is searched during this import only (last, so it shadows no installed module): a
        # lookup must not change where every later import of the process looks. What the module imports
        # while it runs is found there too, and once imported it stays in sys.modules for later lookups.
        folder = os.getcwd()
        searched_here = folder not in sys.path
        if searched_here:
            sys.path.append(folder)
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            # Only the module itself (or its package) missing means the name finds nothing; a module that
            # exists but imports a missing one is that module's error and keeps its traceback.
            if err.name is not None and (name == err.name or name.startswith(err.name + ".")):
                raise UserError(self._not_found(name, "no module of that name can be imported (looked in the "
                                                      f"current folder {folder} and on sys.path)")) from None
            raise
        finally:
            if searched_here and folder in sys.path:
                sys.path.remove(folder)
        return self._one_class(name, module)

    def argument_type(self) -> Callable[[str], str]:
        """argparse `type` of the flag: the name when it finds a class (`find`), so that a bad one exits 2
        with one paragraph while options are parsed, before anything is written."""
        return argument_type(self.find, self.flag)

    def how_to_name_ones_own(self) -> str:
        """The clause of every error that says how to name a class of one's own."""
        stem = self.example.replace(".", "/")
        file = ", or by the path of its .py file" if self.files else ""
        return (f"name your own {self.kind} by its module's dotted path (e.g. {self.flag} {self.example} for "
                f"{stem}.py, importable from the current folder or sys.path){file}, a module that defines exactly "
                f"one {_qualified(self.base)} subclass; see {self.see}")

    def _one_class(self, name: str, module: ModuleType) -> type[T]:
        found = classes_defined_in(module, self.base)
        if len(found) == 1:
            return found[0]
        defined = ", ".join(cls.__name__ for cls in found) or "none"
        raise UserError(f"{self.flag} {name}: the module {module.__file__} must define exactly one subclass of "
                        f"{_qualified(self.base)} (imported ones do not count), but defines {defined}; see {self.see}.")

    def _choices(self) -> str:
        names = self.builtin_names()
        return f"choose one of {', '.join(names)}, or " if names else ""

    def _not_a_name(self, name: str) -> str:
        what = f"no built-in {self.kind} has that name, and it is not" if self.builtin_names() else "it is not"
        path = " nor the path of a .py file" if self.files else ""
        return f"{self.flag} {name}: {what} a dotted module path{path}; {self._choices()}{self.how_to_name_ones_own()}."

    def _not_found(self, name: str, why: str) -> str:
        return f"{self.flag} {name}: {why}; {self._choices()}{self.how_to_name_ones_own()}."


def argument_type(find: Callable[[str], object], flag: str) -> Callable[[str], str]:
    """argparse `type` of `flag`: the text when `find(text)` raises no UserError; else its one paragraph,
    without the leading flag (argparse writes "argument --flag: " before it). Any other error of
    `find` propagates, with its traceback."""
    def parse(text: str) -> str:
        try:
            find(text)
        except UserError as err:
            raise argparse.ArgumentTypeError(" ".join(str(err).split()).removeprefix(f"{flag} ")) from None
        except (TypeError, ValueError) as err:
            # argparse would report these as "invalid value" and drop them: a module of the user's that
            # raises one while it is imported shows it, with its traceback, as the cause of this error.
            raise RuntimeError(f"{flag} {text}: loading it raised {type(err).__name__} (above)") from err
        return text
    parse.__name__ = flag.lstrip("-")
    return parse


def classes_defined_in(module: ModuleType, base: type) -> list[type]:
    """The concrete subclasses of `base` that `module` defines (ones it imports, e.g. to extend
    them, do not count), in the order they are defined."""
    return [candidate for candidate in vars(module).values()
            if inspect.isclass(candidate) and issubclass(candidate, base) and candidate is not base
            and candidate.__module__ == module.__name__ and not inspect.isabstract(candidate)]


def _import_file(path: str) -> ModuleType:
    name = "user_module_" + os.path.splitext(os.path.basename(path))[0]
    if name not in sys.modules:
        module_spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module  # dataclasses and pickling look their module up there
        try:
            module_spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]  # a file that failed to run is not a module; it keeps its own error
            raise
    return sys.modules[name]


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
