"""Models, dataset modes, network families and loggers are found the same way (util/registry.py): a
module of one's own, named by its dotted path and importable from the current folder, defines exactly
one subclass of the kind's base class (imported ones do not count); a name that finds nothing, or a
module defining none or several, is refused in one paragraph naming the flag, the built-in names and how
to name one's own; a module that exists but fails to import keeps its own error and traceback. Each kind
is asked through the function the rest of the code calls, and through train.py's options."""
from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from util.errors import UserError


@dataclass(frozen=True)
class Kind:
    flag: str
    find: Callable[[str], type]
    builtin_names: Callable[[], list[str]]
    base: str  # the base class's qualified name, as the errors give it
    extends: tuple[str, str]  # (module, class): a built-in that a module of one's own imports to extend
    doc: str


def _kinds() -> dict[str, Kind]:
    import data
    import models
    from models import networks
    from util.display.user_loggers import logger_class
    return {
        "model": Kind("--model", models.find_model_using_name, models.builtin_model_names,
                      "models.base_model.BaseModel", ("models.pix2pix_model", "Pix2PixModel"), "docs/extending.md"),
        "dataset mode": Kind("--dataset_mode", data.find_dataset_using_name, data.builtin_dataset_names,
                             "data.base_dataset.BaseDataset", ("data.aligned_dataset", "AlignedDataset"),
                             "docs/datasets.md"),
        "generator": Kind("--netG", networks.family_of, networks.generators,
                          "models.networks.family.NetworkFamily", ("models.networks.resnet", "ResnetFamily"),
                          "docs/extending.md"),
        "logger": Kind("--logger", logger_class, lambda: [], "util.display.backend.LoggerBackend",
                       ("util.display.console_backend", "ConsoleBackend"), "docs/visualization.md"),
    }


KINDS = _kinds()


@pytest.fixture
def current_folder(tmp_path, monkeypatch):
    """An empty current folder; sys.path and sys.modules lose what was imported from it afterwards."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield tmp_path
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", None) or "").startswith(str(tmp_path)) or name.startswith("own_"):
            del sys.modules[name]


def write_module(folder: Path, dotted: str, *classes: str, extra: str = "") -> Path:
    """`folder`/a/b.py for `dotted` a.b (no __init__.py needed): `extra`, then a subclass of `Extended`
    (which `extra` imports) for each name in `classes`."""
    path = folder.joinpath(*dotted.split(".")).with_suffix(".py")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(extra + "".join(f"\n\nclass {name}(Extended):\n    pass\n" for name in classes))
    return path


def source(kind: Kind) -> str:
    module, name = kind.extends
    return f"from {module} import {name} as Extended\n"


def module_name(kind_name: str, case: str) -> str:
    """A module path of its own for each test: the model and family lookups keep what they found."""
    return f"own_{kind_name.replace(' ', '_')}_{case}.mine"


@pytest.mark.parametrize("kind_name", KINDS)
def test_a_module_of_ones_own_is_found_from_the_current_folder_and_classes_it_imports_do_not_count(
        kind_name, current_folder):
    kind = KINDS[kind_name]
    name = module_name(kind_name, "found")
    write_module(current_folder, name, "Mine", extra=source(kind))
    found = kind.find(name)
    found = found if isinstance(found, type) else type(found)  # family_of gives the family's instance
    assert found.__name__ == "Mine" and found.__module__ == name


@pytest.mark.parametrize("kind_name", KINDS)
@pytest.mark.parametrize("classes, defined", [((), "none"), (("First", "Second"), "First, Second")])
def test_a_module_defining_none_or_several_is_refused_naming_the_rule_and_what_it_defines(kind_name, classes,
                                                                                            defined, current_folder):
    kind = KINDS[kind_name]
    name = module_name(kind_name, f"defines_{len(classes)}")
    path = write_module(current_folder, name, *classes, extra=source(kind))
    with pytest.raises(UserError) as refused:
        kind.find(name)
    assert str(refused.value).startswith(f"{kind.flag} {name}: the module {path} must define exactly one subclass of "
                                         f"{kind.base} (imported ones do not count), but defines {defined}; "
                                         f"see {kind.doc}")


@pytest.mark.parametrize("kind_name", KINDS)
def test_a_module_that_cannot_be_found_is_refused_naming_the_flag_the_built_ins_and_how_to_name_ones_own(
        kind_name, current_folder):
    kind = KINDS[kind_name]
    with pytest.raises(UserError) as refused:
        kind.find("own_nowhere.mine")
    message = str(refused.value)
    assert message.startswith(f"{kind.flag} own_nowhere.mine: no module of that name can be imported (looked in "
                              f"the current folder {current_folder} and on sys.path); ")
    builtins = kind.builtin_names()
    assert (f"choose one of {', '.join(builtins)}, or " in message) == bool(builtins)
    assert f"name your own {kind_name} by its module's dotted path" in message
    assert f"a module that defines exactly one {kind.base} subclass; see {kind.doc}" in message
    assert "\n" not in message


@pytest.mark.parametrize("kind_name", KINDS)
def test_a_module_that_exists_but_fails_to_import_keeps_its_own_error_and_traceback(kind_name, current_folder):
    kind = KINDS[kind_name]
    missing_dependency = module_name(kind_name, "needs")
    write_module(current_folder, missing_dependency, "Mine",
                 extra=source(kind) + "import a_package_nobody_installed\n")
    with pytest.raises(ModuleNotFoundError) as missing:
        kind.find(missing_dependency)
    assert missing.value.name == "a_package_nobody_installed"
    broken = module_name(kind_name, "broken")
    path = write_module(current_folder, broken, extra="1 / 0\n")
    with pytest.raises(ZeroDivisionError) as failed:
        kind.find(broken)
    assert any(Path(str(entry.path)) == path for entry in failed.traceback)  # its own line is shown


@pytest.mark.parametrize("kind_name", KINDS)
def test_train_py_refuses_a_name_that_finds_nothing_while_parsing_in_one_paragraph(kind_name, tmp_path, capsys):
    from options.train_options import TrainOptions

    kind = KINDS[kind_name]
    with pytest.raises(SystemExit) as stop:
        TrainOptions().parse(["--dataroot", str(tmp_path), "--name", "n", "--checkpoints_dir", str(tmp_path / "ck"),
                              kind.flag, "own_nowhere.mine"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"error: argument {kind.flag}: own_nowhere.mine: no module of that name can be imported")
    assert not (tmp_path / "ck").exists()


@pytest.mark.parametrize("kind_name", KINDS)
def test_train_py_shows_a_module_that_fails_to_import_with_its_own_error_not_as_a_bad_value(kind_name,
                                                                                           current_folder):
    """argparse turns a ValueError raised in a flag's type into "invalid value" (exit 2): the module's own
    error must reach the user with the line that raised it."""
    from options.train_options import TrainOptions

    kind = KINDS[kind_name]
    name = module_name(kind_name, "raises")
    path = write_module(current_folder, name, extra="raise ValueError('its own bug')\n")
    with pytest.raises(Exception) as failed:  # not SystemExit
        TrainOptions().parse(["--dataroot", str(current_folder), "--name", "n", "--checkpoints_dir",
                              str(current_folder / "ck"), kind.flag, name])
    chain = [failed.value]
    while chain[-1].__cause__ is not None:
        chain.append(chain[-1].__cause__)
    (own,) = [err for err in chain if isinstance(err, ValueError)]
    assert str(own) == "its own bug"
    assert str(path) in [frame.filename for frame in traceback.extract_tb(own.__traceback__)]
