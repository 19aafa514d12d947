"""A network's facts live in its family's file: nothing else in the product spells a built-in
network's name, so a new family is one file and no `if netG == ...` can creep back elsewhere.

Product code is train.py, test.py and everything under models/, data/, options/, util/ and scripts/
(the development harness in dev/ and the tests may name networks freely: they choose them).
String constants are read with `ast`, so a name in a comment or in a longer sentence of prose is
fine; a constant that *is* a name (`"unet_256"`), or a prefix test of one (`startswith("resnet_")`,
`"unet"`), is a switch on names.
"""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from conftest import ROOT
from models import networks

PRODUCT = ["train.py", "test.py", "models", "data", "options", "util", "scripts"]


def family_files() -> dict[str, Path]:
    """Each built-in network name -> the file of the family that answers to it."""
    return {name: Path(inspect.getfile(family)).resolve()
            for by_name in networks.builtin_families().values() for name, family in by_name.items()}


def product_files(root: Path) -> list[Path]:
    files = []
    for entry in PRODUCT:
        path = root / entry
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return files


def switches_on(text: str, name: str) -> bool:
    """Whether the constant `text` names `name`, or is a prefix that picks it among the others."""
    if text == name:
        return True
    stem = name.split("_")[0]  # resnet_9blocks -> resnet, unet_256 -> unet
    return len(stem) >= 4 and text in (stem, stem + "_")


# Constants that spell a network's name but are the value of another flag, defined once.
NOT_NETWORK_NAMES = {("unet_latent.py", "basic"): "BicycleGAN's --upsample basic (transposed convolutions)"}


def network_names_outside_their_family(root: Path) -> list[str]:
    """`file:line "constant"` for every string constant in product code under `root` that names a
    built-in network, outside the file of the family that network belongs to. A prefix (`"resnet_"`)
    is fine in the file of a family whose own names it picks (other roles' names are other flags')."""
    homes = {name: Path(str(path).replace(str(ROOT), str(root))) for name, path in family_files().items()}
    found = []
    for path in product_files(root):
        constants = [node for node in ast.walk(ast.parse(path.read_text()))
                     if isinstance(node, ast.Constant) and isinstance(node.value, str)]
        own_stems = {name.split("_")[0] for name, home in homes.items() if home.resolve() == path.resolve()}
        for node in constants:
            if (path.name, node.value) in NOT_NETWORK_NAMES:
                continue
            for name, home in homes.items():
                prefix_of_own = node.value != name and node.value.rstrip("_") in own_stems
                if switches_on(node.value, name) and path.resolve() != home.resolve() and not prefix_of_own:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.value!r} (--net {name}: {home.name})")
    return found


def test_no_product_file_spells_a_built_in_network_name_outside_its_family():
    assert network_names_outside_their_family(ROOT) == []


@pytest.mark.parametrize("statement", [
    'if opt.netG == "unet_256":\n    pass\n',
    'small = opt.netG.startswith("resnet_")\n',
    'kind = {"basic": 3}\n',
    'deep = opt.netD in ("multiscale", "n_layers")\n',
])
def test_a_name_switch_added_to_product_code_is_found(tmp_path, statement):
    """The mutation: copy the product files, add a switch on a network name to train.py, and the
    check names it (so the test above fails when someone writes one)."""
    for path in product_files(ROOT):
        copy = tmp_path / path.relative_to(ROOT)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(path.read_text())
    (tmp_path / "train.py").write_text((tmp_path / "train.py").read_text() + "\n\n" + statement)
    found = network_names_outside_their_family(tmp_path)
    assert found and all(line.startswith("train.py:") for line in found), found


def test_every_built_in_name_belongs_to_exactly_one_family_file():
    generators, discriminators = networks.generators(), networks.discriminators()
    assert generators[:1] == [networks.DEFAULT_GENERATOR] and networks.DEFAULT_DISCRIMINATOR in discriminators
    homes = family_files()
    assert set(homes) == set(generators) | set(discriminators) | set(networks.builtin_names(networks.ENCODER))
    assert all(home.parent.name == "networks" and home.parent.parent.name == "models" for home in homes.values())
