"""The code's layers only look down: util/ < data/ < models/ < options/ < train.py, test.py, scripts/.

A lower layer that imports a higher one (even inside a function, where the import runs late) makes
the layers impossible to read or reuse one at a time, and is how import cycles start. The imports
are read from the source with `ast`, so nothing is executed and an import hidden in a function or
under `if TYPE_CHECKING:` counts too.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import ROOT

LAYERS = ("util", "data", "models", "options")  # each may import those before it, never those after


def layer_of(module: str) -> int | None:
    top = module.split(".")[0]
    return LAYERS.index(top) if top in LAYERS else None


def imported_modules(source: str, package: str) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in `source`, a module of `package`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the importing package
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.append((node.lineno, module))
    return found


def upward_imports(root: Path) -> list[str]:
    """Every import in util/, data/, models/ or options/ under `root` of a layer above its own."""
    violations = []
    for layer in LAYERS:
        for path in sorted((root / layer).rglob("*.py")):
            package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
            for line, module in imported_modules(path.read_text(), package):
                target = layer_of(module)
                if target is not None and target > LAYERS.index(layer):
                    violations.append(f"{path.relative_to(root)}:{line} imports {module}")
    return violations


def test_no_layer_imports_a_layer_above_it():
    assert upward_imports(ROOT) == []


@pytest.mark.parametrize("layer, statement, module", [
    ("util", "from data.image_io import probe_image", "data.image_io"),
    ("util", "import models.networks", "models.networks"),
    ("data", "def late():\n    from models import networks", "models"),
    ("models", "from options.base_options import format_options", "options.base_options"),
    ("util", "from ..models import networks", "models"),
])
def test_an_upward_import_is_found_wherever_it_hides(tmp_path, layer, statement, module):
    for name in LAYERS:
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / layer / "helper.py").write_text(statement + "\n")
    line = statement.count("\n") + 1
    assert upward_imports(tmp_path) == [f"{layer}/helper.py:{line} imports {module}"]


def test_the_reference_module_paths_users_import_still_work():
    import importlib

    for module in ("util.util", "util.html", "util.visualizer", "util.image_pool", "models.networks",
                   "data.base_dataset", "options.train_options", "options.test_options"):
        importlib.import_module(module)


LONGEST_FUNCTION = 60  # lines, decorators and docstring included: a reader sees a function whole


def long_functions(root: Path) -> list[str]:
    """Functions of the product code (everything but tests/) longer than LONGEST_FUNCTION lines."""
    found = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if relative.parts[0] in ("tests", ".venv") or relative.parts[0].startswith("."):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                if node.end_lineno - first + 1 > LONGEST_FUNCTION:
                    found.append(f"{relative}:{node.lineno} {node.name} ({node.end_lineno - first + 1} lines)")
    return found


def test_no_product_function_is_longer_than_a_screen():
    assert long_functions(ROOT) == []


def test_a_long_function_is_found(tmp_path):
    (tmp_path / "module.py").write_text("def long():\n" + "    x = 1\n" * LONGEST_FUNCTION)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_module.py").write_text("def test_long():\n" + "    x = 1\n" * 100)
    assert long_functions(tmp_path) == [f"module.py:1 long ({LONGEST_FUNCTION + 1} lines)"]
