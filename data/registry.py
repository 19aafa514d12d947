"""Which dataset class a `--dataset_mode` names, found as every kind is (util/registry.py).

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
from collections.abc import Callable

from data.base_dataset import BaseDataset
from util.registry import NamedFiles, Registry

DATASET_MODES: Registry[BaseDataset] = Registry(
    "--dataset_mode", BaseDataset, kind="dataset mode", builtins=NamedFiles("data", "_dataset"),
    example="my_datasets.satellite_dataset", see="docs/datasets.md")

# argparse `type` of --dataset_mode: a name that finds no dataset exits 2 with one paragraph.
dataset_mode_name = DATASET_MODES.argument_type()


def builtin_dataset_names() -> list[str]:
    """The built-in modes' names (data/<name>_dataset.py), sorted."""
    return DATASET_MODES.builtin_names()


def find_dataset_using_name(dataset_name: str) -> type[BaseDataset]:
    """The dataset class `--dataset_mode dataset_name` means (see the module docstring).

    Raises `UserError` (one paragraph) for a name that finds no module, or a module without the
    class; errors raised while importing a module that exists are left to show their traceback."""
    return DATASET_MODES.find(dataset_name)


def built_in_datasets() -> dict[str, type[BaseDataset]]:
    """The built-in modes' classes, by mode name (imports them all)."""
    return DATASET_MODES.builtin_classes()


def get_option_setter(dataset_name: str) -> Callable[[argparse.ArgumentParser, bool], argparse.ArgumentParser]:
    """The `modify_commandline_options` static method of dataset `dataset_name`."""
    return find_dataset_using_name(dataset_name).modify_commandline_options
