"""Shared fixtures: the repository root, small datasets in the reference's layouts, CLI runners,
scripts loaded as modules, one compute thread; the opt-in `benchmark` marker."""
from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import io
import os
import socket
import subprocess
import sys
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch

from processes import run_ranks, run_script_process

# In CI (.ci/run sets IMG2IMG_FAIL_ON_SKIP) a skipped test fails unless it is marked gpu.
from skip_policy import pytest_collectreport, pytest_runtest_makereport, pytest_sessionfinish, pytest_terminal_summary  # noqa: F401 (hooks)

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

_spec = importlib.util.spec_from_file_location("make_demo_dataset", ROOT / "scripts" / "make_demo_dataset.py")
demo_data = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(demo_data)


def pytest_configure(config: pytest.Config) -> None:
    # One compute thread in every test process (each xdist worker), as OMP_NUM_THREADS=1 gives the
    # scripts' subprocesses and torchrun's workers: in-process runs do the arithmetic of the process
    # runs they are compared with bit for bit, and on a 2-core machine running two workers a second
    # thread per worker only spins (2-5x the CPU time for the small networks of the tests).
    torch.set_num_threads(1)
    # Log as the programs do (util/console.py): what a library call made here notes or warns goes to the
    # stderr of the moment, which pytest captures (shown for a failing test only) and tests read.
    from util.console import setup_logging
    setup_logging()
    # As train.py and test.py do: the in-process trainings reuse freed memory instead of faulting it in.
    from util.host_memory import keep_freed_memory
    keep_freed_memory()
    config.addinivalue_line("markers", "slow: multi-process or end-to-end test (still run in CI)")
    config.addinivalue_line("markers", "benchmark: timing run of minutes, deselected unless asked for "
                                       "(pytest -m benchmark)")
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (tests/test_gpu.py, run by scripts/gpu_check.sh); "
                                       "skipped with the reason elsewhere")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the `benchmark` tests unless the -m expression names that marker."""
    if "benchmark" in (config.getoption("markexpr") or ""):
        return
    deselected = [item for item in items if item.get_closest_marker("benchmark")]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if not item.get_closest_marker("benchmark")]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After a test file's last test and its fixtures' teardown: collect the file's garbage, then freeze what
    survives (the session's fixtures, imported modules, caches), so that the cycle collector's later full
    passes walk only what later files make. A worker that has run a few hundred tests holds over a million
    objects, and walking them again and again took ~19 s of each worker's time (measured with gc.callbacks).
    Each collection here walks only the objects made since the last freeze."""
    result = yield
    if nextitem is None or nextitem.path != item.path:
        gc.collect()
        gc.freeze()
    return result


@pytest.fixture(autouse=True)
def environment_given_back() -> Iterator[None]:
    """Each test leaves os.environ as it found it. What an in-process run or a library puts there (wandb's
    WANDB_SERVICE, --deterministic's CUBLAS_WORKSPACE_CONFIG) would otherwise reach every later process of
    this test process, and make each of its forks a new interpreter (tests/processes.py)."""
    before = dict(os.environ)
    yield
    for name in set(os.environ) - set(before) - {"PYTEST_CURRENT_TEST"}:
        del os.environ[name]
    for name, value in before.items():
        if os.environ.get(name) != value and name != "PYTEST_CURRENT_TEST":
            os.environ[name] = value


def load_script(relative_path: str) -> ModuleType:
    """A script of the repository (e.g. "dev/benchmark.py") imported as a module, as tests
    need its functions; its folder is put on sys.path for the modules it imports from there (dev/bench)."""
    path = ROOT / relative_path
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    name = "script_" + path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def paired_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Aligned A|B images, 32x32 per side: <root>/{train,val,test}/*.png (the reference's facades layout)."""
    return demo_data.make_pix2pix_demo(tmp_path_factory.mktemp("paired"), 32, 0, 8, 4, 4)


@pytest.fixture(scope="session")
def unpaired_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Unpaired 32x32 images: <root>/{trainA,trainB,testA,testB}/*.png (the reference's horse2zebra layout)."""
    return demo_data.make_cyclegan_demo(tmp_path_factory.mktemp("unpaired"), 32, 0, 8, 4)


@pytest.fixture(scope="module")
def real_scan_pairs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real MRI scan (nibabel's anatomical.nii) as aligned volume pairs: <root>/{trainA,trainB,testA,testB}/
    scan.nii, B the scan, A a blurred and noisy copy in another contrast (helpers_volumes.real_scan_pairs_in).
    Skips the test where nibabel is not installed."""
    pytest.importorskip("nibabel")
    from helpers_volumes import real_scan_pairs_in

    return real_scan_pairs_in(tmp_path_factory.mktemp("real_scan"))


@pytest.fixture(scope="module")
def resnet_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """checkpoints/<name>/latest_net_G.pth of a resnet_6blocks generator (ngf 8, batch norm): the checkpoints
    folder, its run named "r" (what helpers.run_test_py runs)."""
    from models import networks

    ckpt = tmp_path_factory.mktemp("ckpt")
    (ckpt / "r").mkdir()
    torch.manual_seed(0)
    net = networks.define_G(3, 3, 8, "resnet_6blocks", "batch", init_type="xavier", init_gain=1.0)
    torch.save(net.state_dict(), ckpt / "r" / "latest_net_G.pth")
    return ckpt


def run_script(script: str, *args: str, timeout: float = 300, env: dict | None = None,
               cwd: Path | None = None, new_interpreter: bool = False) -> subprocess.CompletedProcess:
    """Run `python <script> args...` from the repository root, as a user would, in a process of its own
    (forked with torch imported, or a new interpreter: tests/processes.py); capture output."""
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    return run_script_process([sys.executable, str(ROOT / script), *args], cwd or ROOT, full_env, timeout,
                              new_interpreter=new_interpreter)


_script_modules: dict[str, ModuleType] = {}


def run_in_process(script: str, *args: str, capsys: pytest.CaptureFixture | None = None
                   ) -> subprocess.CompletedProcess:
    """What `python <script> args...` does, run by calling the script's `main(argv)` in the test
    process, as a finished process: exit status, stdout and stderr (read through `capsys`, or, for
    module-scoped fixtures, which cannot take it, caught in strings: no terminal, as for a piped
    subprocess). For runs whose point is what the script does with its input (its files, messages,
    exit status): ~2 s of interpreter start-up less each. Runs whose point is the process itself (a
    signal, torchrun's workers, what a fresh interpreter imports or prints -- Python warnings go to
    pytest here, not to stderr --, a second process on the same folder) use `run_script`."""
    if script not in _script_modules:
        _script_modules[script] = load_script(script)
    main = _script_modules[script].main
    if capsys is None:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = exit_status(main, list(args))
        return subprocess.CompletedProcess([script, *args], code, out.getvalue(), err.getvalue())
    capsys.readouterr()
    code = exit_status(main, list(args))
    captured = capsys.readouterr()
    return subprocess.CompletedProcess([script, *args], code, captured.out, captured.err)


def built_with_actions(build: Callable[[], argparse.ArgumentParser]) -> tuple[argparse.ArgumentParser,
                                                                               list[argparse.Action]]:
    """`build()`'s parser and the actions added to it, in order: recorded as the public `add_argument` of
    util.flag_types.OneParagraphParser returns them (argparse lists them only in a private attribute)."""
    from util.flag_types import OneParagraphParser

    actions: list[argparse.Action] = []
    add_argument = OneParagraphParser.add_argument

    def recording(self: OneParagraphParser, *args, **kwargs) -> argparse.Action:
        actions.append(add_argument(self, *args, **kwargs))
        return actions[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(OneParagraphParser, "add_argument", recording)
        return build(), actions


def exit_status(main, argv: list[str]) -> int:
    """The status a script's `main(argv)` ends with, argparse's refusals and --help included."""
    try:
        return main(argv)
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for torchrun, test servers)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_arguments(script: str, *args: str, nproc: int = 2, extra: tuple[str, ...] = ()) -> list[str]:
    """torchrun's arguments `--nproc_per_node=N [extra] script args`, on a free port."""
    return [f"--nproc_per_node={nproc}", f"--master_port={free_port()}", *extra, str(ROOT / script), *args]


def torchrun_command(script: str, *args: str, nproc: int = 2, extra: tuple[str, ...] = ()) -> list[str]:
    """The command line `torchrun --nproc_per_node=N [extra] script args` on a free port."""
    return [sys.executable, "-m", "torch.distributed.run", *torchrun_arguments(script, *args, nproc=nproc, extra=extra)]


def torchrun(script: str, *args: str, nproc: int = 2, extra: tuple[str, ...] = (), timeout: float = 240,
             env: dict | None = None) -> subprocess.CompletedProcess:
    """`torchrun --nproc_per_node=N script args` as a user starts it (a new interpreter, whose workers are
    new interpreters), one thread per worker; past `timeout` it and all its workers are killed (then
    TimeoutExpired). For what only the launcher shows; N processes compared with one use `ranks`."""
    command = torchrun_command(script, *args, nproc=nproc, extra=extra)
    return run_script_process(command, ROOT, {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}, timeout)


def ranks(script: str, *args: str, nproc: int = 2, timeout: float = 240, env: dict | None = None
          ) -> subprocess.CompletedProcess:
    """`python <script> args` as the `nproc` workers of `torchrun --nproc_per_node=N` on one node (their
    rank variables, one thread each), started by torch.multiprocessing without the launcher
    (tests/processes.py): for the tests that compare N processes with one. Exit status of the first
    failing rank, the ranks' output one after the other; past `timeout` all are killed (TimeoutExpired)."""
    return run_ranks(ROOT / script, list(args), {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}, ROOT,
                     timeout, nprocs=nproc, port=free_port())


_engines: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def training_engine(model):
    """The training engine of a set-up `model` (models/training/engine.py), built at its first use as
    train.py builds it: the networks as training calls them, gradient scalers, moving averages."""
    from models.training.engine import TrainingEngine
    from util.distributed import DistContext

    if model not in _engines:
        _engines[model] = TrainingEngine(model, model.opt, DistContext(device=model.device))
    return _engines[model]


def train_on(model, batch: dict) -> None:
    """One training step of `model` on `batch`, as train.py's loop takes it (through the engine)."""
    training_engine(model).train_step([batch])


def inference_nets(model, windows=None):
    """The networks of a set-up `model` as test.py applies them (models/inference/application.py)."""
    from models.inference.application import inference_views

    return inference_views(model.named_networks(), model.networks_with_role("generator"), model.opt, windows)


# Small networks and no display, so that a few iterations take seconds on a CPU.
FAST_FLAGS = ["--ngf", "8", "--ndf", "8", "--display_id", "0", "--num_threads", "0", "--seed", "0"]


@pytest.fixture(scope="session")
def inception_torch_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A TORCH_HOME whose hub cache holds deterministic Inception weights under the file name
    torch-fidelity downloads (util/evaluation/inception.py) and deterministic AlexNet weights under the
    name torchvision downloads for LPIPS (util/evaluation/diversity.py): set TORCH_HOME to it to run
    FID/KID and LPIPS offline."""
    from dev.bench.seeded_inception import write_seeded_inception_weights
    from util.evaluation.diversity import ALEXNET_WEIGHTS_NAME
    from util.evaluation.inception import INCEPTION_WEIGHTS_NAME

    home = tmp_path_factory.mktemp("torch_home")
    write_seeded_inception_weights(home / "hub" / "checkpoints" / INCEPTION_WEIGHTS_NAME)
    write_seeded_alexnet_weights(home / "hub" / "checkpoints" / ALEXNET_WEIGHTS_NAME)
    return home


def write_seeded_alexnet_weights(path: Path) -> None:
    """torchvision's AlexNet with seeded random convolutions (what LPIPS uses) and its classifier's
    weights as zeros stored once and broadcast (LPIPS never runs it), so the file is small."""
    import torchvision

    with torch.random.fork_rng():
        torch.manual_seed(0)
        state = torchvision.models.alexnet().state_dict()
    state = {key: value if key.startswith("features.") else torch.zeros(()).expand(value.shape)
             for key, value in state.items()}
    torch.save(state, path)
