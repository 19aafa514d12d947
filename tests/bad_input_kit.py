"""The corpus of tests/test_bad_input.py: what a case is, the inputs every case builds on, and
how a case is run (in the test process by default; as a subprocess where the process matters)."""
from __future__ import annotations

import contextlib
import os
import resource
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import FAST_FLAGS, run_in_process, run_script

SMALL = ["--load_size", "32", "--crop_size", "32", "--n_epochs", "1", "--n_epochs_decay", "0"]
PIX = ["--model", "pix2pix", "--netG", "resnet_6blocks"]
NAME = "corpus"  # --name of every corpus run
CYCLE = ["--model", "cycle_gan"]  # reads trainA/trainB


@dataclass
class Setup:
    """What a case built: the arguments after the script name and what to look for afterwards."""
    args: list[str]
    stderr_has: tuple = ()    # fragments the (error or warning) output must contain
    stdout_has: tuple = ()    # e.g. proof that training had started before a file failed
    stderr_lacks: tuple = ()  # e.g. a convertible image: no message about it at all
    after: Callable[[], None] | None = None  # more checks once the run is over (raise to fail)
    env: dict[str, str] = field(default_factory=dict)  # extra environment of the run
    cleanup: list[Callable[[], None]] = field(default_factory=list)  # always run, even on failure
    unchanged: tuple = ()     # input files and folders: every file's bytes (and a folder's file names) kept
    absent: tuple = ()        # paths a refused run must not have created (nothing written)
    stdout_lacks: tuple = ()  # e.g. a refusal before training: no "The number of training images"
    memory_cap: bool = False  # run with little address space beyond what the process holds (`address_space_cap`)
    # the command the refusal suggests, from the arguments and the refusal's text (`suggested`): run after it,
    # it must succeed (exit 0, no error), so that every fix a message offers is one that works
    suggestion: Callable[[list[str], str], list[str]] | None = None


@dataclass(frozen=True)
class Case:
    id: str                               # reads as the spec: "<input> is refused naming <what>"
    build: Callable[[Path], Setup]        # makes the input in an empty folder; run folder is <folder>/ck/corpus
    exit: int                             # 2 refused (one "error: ..." line), 0 proceeds
    script: str = "train.py"
    parse_only: bool = False              # refused by the option parser: runs its parse(argv) only
    # Runs as `python <script>`, as a case with `env` always does (a fresh interpreter reads it): the
    # second run beside a first one, and representatives proving that the real script's stderr is the
    # one paragraph -- in the test process Python warnings (a library's UserWarning, say) go to
    # pytest's capture, not to the stderr checked here.
    own_process: bool = False

    def __repr__(self) -> str:
        return self.id


@dataclass
class Outcome:
    result: subprocess.CompletedProcess
    setup: Setup
    guards: dict[Path, bytes]             # checkpoints in the run folder before the run, and their bytes
    inputs_before: dict[Path, bytes] = field(default_factory=dict)  # Setup.unchanged's files, before the run


def suggested(*flags: str, drop: tuple[str, ...] = ()) -> Callable[[list[str], str], list[str]]:
    """The command a refusal suggests: the arguments with each of `flags` set to the value the message gives
    it as an example ("... e.g. --fold_AB D/A_AB"), else last ("; pass --batch_size 2"), and the `drop`ped
    flags (without a value) left out."""
    def command(args: list[str], message: str) -> list[str]:
        args = [arg for arg in args if arg not in drop]
        for flag in flags:
            assert f"{flag} " in message, (flag, message)
            example = f"e.g. {flag} "
            after = message.split(example, 1)[1] if example in message else message.rsplit(f"{flag} ", 1)[1]
            value = after.split()[0].rstrip(".,;)")
            if flag in args:  # its last occurrence is the one argparse keeps
                args[len(args) - 1 - args[::-1].index(flag) + 1] = value
            else:
                args += [flag, value]
        return args
    return command


def snapshot(paths) -> dict[Path, bytes]:
    """Every file under `paths` (files, or folders walked) and its bytes; a symbolic link is kept as a link."""
    files: dict[Path, bytes] = {}
    for path in map(Path, paths):
        found = [path] if not path.is_dir() else sorted(p for p in path.rglob("*") if p.is_file() or p.is_symlink())
        for file in found:
            files[file] = f"-> {os.readlink(file)}".encode() if file.is_symlink() else file.read_bytes()
    return files


# What a run under `memory_cap` may allocate beyond what the process has mapped: enough for any run of
# the corpus's small inputs, far below what a size taken on trust from a flag or a header asks for.
MEMORY_HEADROOM = 3 << 30


@contextlib.contextmanager
def address_space_cap(headroom: int = MEMORY_HEADROOM):
    """Within the block, this process may map at most `headroom` bytes more than it has mapped now (the
    soft RLIMIT_AS, i.e. `ulimit -v`): an allocation sized by an unchecked number fails with MemoryError
    instead of taking the machine's memory, which the programs report as "out of memory" (util/errors.py):
    a case fails then because it expects the limit or the file its check names. The limit is lifted after."""
    with open("/proc/self/status") as status:
        mapped = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = mapped + headroom if hard == resource.RLIM_INFINITY else min(hard, mapped + headroom)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


# ---------------------------------------------------------------------------------- input builders
def random_pixels(seed: int, h: int = 32, w: int = 64, channels: int = 3) -> np.ndarray:
    """Seeded random 8-bit pixels (h x w x channels)."""
    return np.random.default_rng(seed).integers(0, 256, (h, w, channels), dtype=np.uint8)


def aligned(folder: Path, count: int = 2, make: Callable[[int], Image.Image] | None = None,
            ext: str = ".png") -> list[Path]:
    """`count` A|B images (32x64, A and B 32x32) named 0000.png, 0001.png, ..."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        img = make(i) if make else Image.fromarray(random_pixels(i))
        path = folder / f"{i:04d}{ext}"
        img.save(path)
        paths.append(path)
    return paths


def mode_of(path: Path) -> str:
    with Image.open(path) as img:
        return img.mode


def run_args(work: Path, *extra: str, data: Path | None = None) -> list[str]:
    return ["--dataroot", str(data or work / "data"), "--name", NAME, "--checkpoints_dir", str(work / "ck"),
            *FAST_FLAGS, *SMALL, *extra]


def eval_args(work: Path, *extra: str, data: Path | None = None) -> list[str]:
    return ["--dataroot", str(data or work / "data"), "--name", NAME, "--checkpoints_dir", str(work / "ck"),
            "--results_dir", str(work / "results"), *PIX, "--ngf", "8", "--num_threads", "0",
            "--load_size", "32", "--crop_size", "32", *extra]


def train_in_process(args: list[str]) -> None:
    """A real (tiny) training run that a case builds on (weights, training state, architecture.json),
    by train.py's main in the test process; its output is in the test's captured output."""
    import train  # the repository root is on sys.path (conftest)

    code = train.main(args)
    assert code == 0, f"the run the case builds on exited with status {code}"


# ---------------------------------------------------------------------------------- running a case
def parse_in_process(script: str, args: list[str], capsys: pytest.CaptureFixture) -> subprocess.CompletedProcess:
    """What `script` does with `args` up to the end of option parsing, as a finished process."""
    from options.test_options import TestOptions
    from options.train_options import TrainOptions

    capsys.readouterr()
    try:
        (TrainOptions if script == "train.py" else TestOptions)().parse(args)
        code = 0  # accepted: the script would go on to run
    except SystemExit as stop:
        code = stop.code
    captured = capsys.readouterr()
    return subprocess.CompletedProcess([script, *args], code, captured.out, captured.err)


def execute(case: Case, work: Path, capsys: pytest.CaptureFixture) -> Outcome:
    """Build the case's input in `work` and run it: its parse(argv) or its main(argv) in the test
    process (output read through `capsys`), or a `python <script>` process (`Case.own_process`)."""
    setup = case.build(work)
    try:
        guards = {}
        for net in ("G", "G_A"):  # a pix2pix and a cycle_gan checkpoint from an earlier run
            path = work / "ck" / NAME / f"latest_net_{net}.pth"
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                torch.save({"weight": torch.arange(6.0)}, path)
            guards[path] = path.read_bytes()
        inputs_before = snapshot(setup.unchanged)
        if case.parse_only:
            assert not setup.env, "parse_only cases run in the test process, whose environment stays"
            result = parse_in_process(case.script, setup.args, capsys)
        elif case.own_process or setup.env:  # environment variables are read by a fresh interpreter
            assert not setup.memory_cap, "memory_cap runs in the test process"
            result = run_script(case.script, *setup.args, timeout=240, env=setup.env)
        else:
            with address_space_cap() if setup.memory_cap else contextlib.nullcontext():
                result = run_in_process(case.script, *setup.args, capsys=capsys)
        if setup.after is not None:
            setup.after()
    finally:
        for cleanup in setup.cleanup:
            cleanup()
    return Outcome(result, setup, guards, inputs_before)
