"""Which dataset class a `--dataset_mode` names.

A name is either
- a built-in mode NAME: the class in `data/NAME_dataset.py` whose name, lower-cased and without
  underscores, is NAME + "dataset" (as in the reference: `aligned` -> `AlignedDataset`). Those
  shipped with the project are found by their files (`builtin_dataset_names`), and --help and
  errors offer them;
- a dotted module path (`my_datasets.satellite_dataset`): a user's own module, importable from
  the current folder or `sys.path`, holding one concrete `BaseDataset` subclass.

So a new dataset is one file, and a user's dataset needs no edit of the project at all.
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import os
import pkgutil
import sys
from collections.abc import Callable
from types import ModuleType

from data.base_dataset import BaseDataset
from util.errors import UserError

_MODULE_SUFFIX = "_dataset"
_NOT_MODES = ("base",)  # data/base_dataset.py holds the contract and the shared preprocessing, no mode


def builtin_dataset_names() -> list[str]:
    """The built-in modes' names (data/<name>_dataset.py), sorted."""
    folder = os.path.dirname(os.path.abspath(__file__))
    stems = (info.name for info in pkgutil.iter_modules([folder]))
    return sorted(stem[:-len(_MODULE_SUFFIX)] for stem in stems
                  if stem.endswith(_MODULE_SUFFIX) and stem[:-len(_MODULE_SUFFIX)] not in _NOT_MODES)


def find_dataset_using_name(name: str) -> type[BaseDataset]:
    """The dataset class `--dataset_mode name` means (see the module docstring).

    Raises `UserError` (one paragraph) for a name that finds no module, or a module without the
    class; errors raised while importing a module that exists are left to show their traceback."""
    if "." in name:
        return _dataset_in_module(name)
    if not name.isidentifier():
        raise _unknown(name)
    module = _import(f"data.{name}_dataset", name)
    wanted = name.replace("_", "") + "dataset"
    for _, cls in inspect.getmembers(module, _is_dataset_class):
        if cls.__name__.lower() == wanted:
            return cls
    raise _unknown(name)


def built_in_datasets() -> dict[str, type[BaseDataset]]:
    """The built-in modes' classes, by mode name (imports them all)."""
    return {name: find_dataset_using_name(name) for name in builtin_dataset_names()}


def get_option_setter(name: str) -> Callable[[argparse.ArgumentParser, bool], argparse.ArgumentParser]:
    """The `modify_commandline_options` static method of dataset `name`."""
    return find_dataset_using_name(name).modify_commandline_options


def _is_dataset_class(obj: object) -> bool:
    return inspect.isclass(obj) and issubclass(obj, BaseDataset) and not inspect.isabstract(obj)


def _dataset_in_module(path: str) -> type[BaseDataset]:
    """The one concrete BaseDataset subclass defined in module `path` (imported ones do not count:
    a user's dataset may import the built-in it extends)."""
    if not all(part.isidentifier() for part in path.split(".")):
        raise _unknown(path)
    # `python train.py` puts the script's folder on sys.path, not the folder it is run from.
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    module = _import(path, path)
    classes = [cls for _, cls in inspect.getmembers(module, _is_dataset_class) if cls.__module__ == module.__name__]
    if len(classes) == 1:
        return classes[0]
    found = f"defines {', '.join(cls.__name__ for cls in classes)}" if classes else "defines none"
    raise UserError(f"--dataset_mode {path}: module {path} ({module.__file__}) must define exactly one subclass of "
                    f"data.base_dataset.BaseDataset, the dataset, but {found}; keep one per module "
                    f"(see docs/datasets.md).")


def _import(module_name: str, mode: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        # Only the module itself (or its package) missing means an unknown name; a missing
        # dependency inside an existing module is that module's error and keeps its traceback.
        if err.name is not None and (module_name == err.name or module_name.startswith(err.name + ".")):
            raise _unknown(mode) from None
        raise


def _unknown(name: str) -> UserError:
    return UserError(
        f"unknown --dataset_mode {name!r}; use one of {', '.join(builtin_dataset_names())}, or name your own dataset by "
        f"its module's dotted path (e.g. --dataset_mode my_datasets.satellite_dataset for "
        f"my_datasets/satellite_dataset.py in the current folder or on sys.path, holding one BaseDataset "
        f"subclass; see docs/datasets.md).")
