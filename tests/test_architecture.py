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


def product_modules(root: Path) -> dict[str, Path]:
    """Every module of util/, data/, models/, options/ and the entry points (train.py, test.py), by name."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if relative.parts[0] not in LAYERS and len(relative.parts) > 1:
            continue
        if len(relative.parts) == 1 and relative.stem not in ("train", "test"):
            continue
        name = ".".join(relative.with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the product modules it imports (`from package import module` names the module; a
    name that is not a module names its package)."""
    modules = product_modules(root)
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                wanted = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                _, base = imported_modules(ast.unparse(node), package)[0] if node.level else (0, node.module or "")
                wanted = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
            else:
                continue
            for module in wanted:
                while module and module not in modules and "." in module:
                    module = module.rpartition(".")[0]
                if module in modules and module != name:
                    targets.add(module)
        graph[name] = targets
    return graph


def import_cycles(root: Path) -> list[list[str]]:
    """The groups of product modules that import each other, directly or through others (the strongly
    connected components of the import graph with more than one module)."""
    graph = import_graph(root)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in graph[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for module in graph:
        if module not in index:
            visit(module)
    return cycles


def test_no_product_modules_import_each_other_in_a_circle():
    """One training step is followed from train.py down without climbing back: no module imports
    one that imports it, however many modules lie between."""
    assert import_cycles(ROOT) == []


def test_a_circle_of_imports_is_found_through_other_modules(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "__init__.py").write_text("")
    (tmp_path / "models" / "engine.py").write_text("from models import step\n")
    (tmp_path / "models" / "step.py").write_text("from models.model import Model\n")
    (tmp_path / "models" / "model.py").write_text("def late():\n    from .engine import run\n")
    (tmp_path / "models" / "leaf.py").write_text("from models import engine\n")
    assert import_cycles(tmp_path) == [["models.engine", "models.model", "models.step"]]


LONGEST_MODELS_MODULE = 350  # lines: a module of models/ is read whole


def test_every_module_of_models_is_short_enough_to_read_whole():
    long = {str(path.relative_to(ROOT)): len(path.read_text().splitlines())
            for path in sorted((ROOT / "models").rglob("*.py"))}
    assert {path: lines for path, lines in long.items() if lines > LONGEST_MODELS_MODULE} == {}


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


# ---------------------------------------------------------------------------- the Python floor
PYTHON_FLOOR = (3, 10)  # zip(strict=True), among others; README, environment.yml and setup.sh say it


def test_the_python_floor_is_stated_alike_in_readme_environment_and_setup():
    floor = ".".join(map(str, PYTHON_FLOOR))
    assert f"Python {floor}+" in (ROOT / "README.md").read_text()
    assert f"python>={floor}" in (ROOT / "environment.yml").read_text()
    assert f"PYTHON_FLOOR={floor}\n" in (ROOT / "scripts" / "setup.sh").read_text()


def test_the_product_code_parses_as_the_floor_python_does():
    """The grammar of every product module is the floor's (ast checks syntax newer than it)."""
    for path in sorted(ROOT.rglob("*.py")):
        relative = path.relative_to(ROOT)
        if relative.parts[0] == ".venv" or relative.parts[0].startswith("."):
            continue
        ast.parse(path.read_text(), filename=str(relative), feature_version=PYTHON_FLOOR)


def test_setup_refuses_an_older_python_in_one_line_before_making_anything(tmp_path):
    import shutil
    import subprocess

    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    old = tmp_path / "python3.9"
    old.write_text('#!/bin/sh\n[ "$1" = --version ] && echo "Python 3.9.18" && exit 0\nexit 1\n')  # too old
    old.chmod(0o755)
    result = subprocess.run(["bash", "scripts/setup.sh"], cwd=tmp_path,
                            env={"PATH": "/usr/bin:/bin", "PYTHON": str(old)},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "needs Python 3.10 or newer" in result.stderr
    assert "Python 3.9.18" in result.stderr
    assert not (tmp_path / ".venv").exists()


# ---------------------------------------------------------------------------- the parts of models/
MOST_TOP_LEVEL_MODULES = 15  # models/ shows its families at a glance; the rest lives in its parts


def test_models_top_level_holds_the_families_and_their_contract_and_the_parts_beside_them():
    top = sorted(path.name for path in (ROOT / "models").glob("*.py"))
    assert len(top) <= MOST_TOP_LEVEL_MODULES, top
    parts = {path.name for path in (ROOT / "models").iterdir() if (path / "__init__.py").exists()}
    assert parts == {"networks", "losses", "training", "inference"}


def imports_between_parts(root: Path) -> list[str]:
    """Imports that climb between the parts of models/: a network family or a loss importing a model
    family, training or inference; inference importing training. (models/networks/__init__.py keeps the
    reference's `networks.GANLoss` and `networks.get_scheduler` for its users: a face, not a dependency.)"""
    families = {path.stem for path in (root / "models").glob("*.py") if path.stem != "__init__"}
    found = []
    for path in sorted((root / "models").rglob("*.py")):
        relative = path.relative_to(root)
        part = relative.parts[1] if len(relative.parts) > 2 else None
        if part is None or relative == Path("models/networks/__init__.py"):
            continue
        package = ".".join(relative.with_suffix("").parts[:-1])
        for line, module in imported_modules(path.read_text(), package):
            names = module.split(".")
            if names[0] != "models" or len(names) < 2:
                continue
            climbs = (part in ("networks", "losses") and (names[1] in families | {"training", "inference"})) or \
                     (part == "inference" and names[1] == "training")
            if climbs:
                found.append(f"{relative}:{line} imports {module}")
    return found


def test_networks_and_losses_look_at_no_model_and_inference_never_at_training():
    assert imports_between_parts(ROOT) == []


@pytest.mark.parametrize("part, statement", [("losses", "from models.cycle_gan_model import CycleGANModel"),
                                             ("networks", "from models.training import step"),
                                             ("inference", "import models.training.engine")])
def test_an_import_climbing_between_parts_is_found(tmp_path, part, statement):
    (tmp_path / "models" / part).mkdir(parents=True)
    (tmp_path / "models" / "cycle_gan_model.py").write_text("")
    (tmp_path / "models" / part / "helper.py").write_text(statement + "\n")
    module = statement.split()[1]
    assert imports_between_parts(tmp_path) == [f"models/{part}/helper.py:1 imports {module}"]


def product_modules_calling(frame) -> list[str]:
    """The product modules on the call stack down to `frame`, outermost first, each run of one module once."""
    modules = []
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name.split(".")[0] in LAYERS and (not modules or modules[-1] != name):
            modules.append(name)
        frame = frame.f_back
    return modules[::-1]


MOST_MODULES_TO_THE_OPTIMIZER = 8  # train.py's loop -> ... -> optimizer.step(), each module called by the one before


def test_a_training_step_reaches_the_optimizer_through_a_few_modules_going_down(tmp_path):
    """A real CycleGAN step, followed with a profiler: when Adam steps, the product modules on the call stack
    (train.py's loop, then the engine, the model, its step) are few, and each appears once (no module is
    called back by one it called)."""
    import sys

    import torch

    from conftest import FAST_FLAGS, training_engine
    from models import create_model
    from options.train_options import TrainOptions
    from util.distributed import DistContext

    opt = TrainOptions().parse(["--dataroot", str(tmp_path), "--model", "cycle_gan", "--netG", "resnet_6blocks",
                                "--checkpoints_dir", str(tmp_path), "--name", "step", *FAST_FLAGS])
    model = create_model(opt, DistContext(), 0)
    model.setup(opt)
    batch = {"A": torch.rand(1, 3, 32, 32) * 2 - 1, "B": torch.rand(1, 3, 32, 32) * 2 - 1,
             "A_paths": ["a.png"], "B_paths": ["b.png"]}
    chains = []

    def on_call(frame, event, arg):
        if event == "call" and frame.f_code.co_name == "step" and frame.f_code.co_filename.endswith("optim/adam.py"):
            chains.append(["train", *product_modules_calling(frame)])  # the loop calls engine.train_step as here

    engine = training_engine(model)
    sys.setprofile(on_call)
    try:
        engine.train_step([batch])
    finally:
        sys.setprofile(None)
    assert len(chains) == 2  # the generators' update, then the discriminators'
    for chain in chains:
        assert len(chain) == len(set(chain)) <= MOST_MODULES_TO_THE_OPTIMIZER, chain
        assert chain[:2] == ["train", "models.training.engine"] and chain[-1] == "models.training.step", chain


MOST_MODULES_TO_THE_GENERATOR = 6  # Translator.translate -> ... -> the generator's forward


def test_a_translation_reaches_the_generator_through_a_few_modules_going_down():
    """An image handed to `Translator.translate` in tiles (the longest way), followed with a profiler: when the
    generator's forward runs, the product modules on the call stack are few, begin with the Translator, and
    each appears once (inputs are decoded and encoded by calls that return, not by calling the Translator back)."""
    import sys

    import numpy as np
    import torch

    from models import networks
    from models.translator import Translator

    torch.manual_seed(0)
    generator = networks.define_G(3, 3, 4, "resnet_6blocks", "instance")
    translator = Translator.from_generator(generator, "resnet_6blocks", 3, 3, device="cpu")
    chains = []

    def on_call(frame, event, arg):
        if event == "call" and frame.f_code.co_name == "forward" and frame.f_locals.get("self") is generator:
            chains.append(product_modules_calling(frame))

    sys.setprofile(on_call)
    try:
        out = translator.translate(np.zeros((40, 36, 3), np.uint8), tile=32, tile_overlap=8)
    finally:
        sys.setprofile(None)
    assert out.shape == (40, 36, 3) and chains
    for chain in chains:
        assert len(chain) == len(set(chain)) <= MOST_MODULES_TO_THE_GENERATOR, chain
        assert chain[0] == "models.inference.translator" and chain[-1].startswith("models.networks."), chain
