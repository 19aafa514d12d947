"""A damaged file in a run folder -- empty (an interrupted copy, a full disk) or cut short -- never
ends in a traceback: the next `--continue_train` or `test.py` works from the last good state (with
a note naming the damaged file where an older copy is used instead), or stops with one paragraph
naming the file. And a run killed inside a save leaves nothing damaged behind (docs/resume.md).

The runs are tiny (2 images of 32 px, --ngf 4) and, but for the one killed for real, in-process:
`train.main` / `test.main` return the exit status and print what a user would read. The readers
and writers themselves (util/safe_files.py, util/checkpoint_io.py) are tested first.
"""
from __future__ import annotations

import os
import random
import shutil
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import ROOT, load_script
from processes import ScriptProcess

NAME = "run"
TINY = ["--model", "pix2pix", "--netG", "resnet_6blocks", "--ngf", "4", "--ndf", "4", "--load_size", "32",
        "--crop_size", "32", "--num_threads", "0"]
# Two epochs, each saved as <epoch>_* and latest_*, validated, keeping best files and moving averages,
# with images and the HTML page after every step: every file train.py writes.
TRAINING = ["--display_id", "0", "--seed", "5", "--no_progress", "--n_epochs", "1", "--n_epochs_decay", "1",
            "--save_epoch_freq", "1", "--val_freq", "1", "--save_best", "L1", "--ema_decay", "0.5",
            "--display_freq", "1", "--update_html_freq", "1", "--print_freq", "1"]


# ---------------------------------------------------------------------------------- damage
def empty(path: Path) -> None:
    path.write_bytes(b"")


def cut_in_half(path: Path) -> None:
    """Keep about the first half, ending inside a line, not just before or after its newline (a log
    whose lines are alike could otherwise lose a whole line and keep only whole ones)."""
    data = path.read_bytes()
    keep = len(data) // 2
    while 0 < keep < len(data) and b"\n" in data[keep - 1:keep + 1]:
        keep += 1
    path.write_bytes(data[:keep])


DAMAGE = {"empty": empty, "cut in half": cut_in_half}


# ---------------------------------------------------------------------------------- readers and writers
def legacy_checkpoint(path: Path) -> None:
    torch.save({"weight": torch.randn(500)}, path, _use_new_zipfile_serialization=False)  # PyTorch < 1.6's format


def zip_checkpoint(path: Path) -> None:
    torch.save({"weight": torch.randn(500)}, path)


@pytest.mark.parametrize("make, damage, says", [
    (None, lambda p: p.write_bytes(b""), "is empty (0 bytes"),
    (zip_checkpoint, cut_in_half, "is cut short or damaged"),
    (legacy_checkpoint, cut_in_half, "is cut short or damaged"),
    (None, lambda p: p.write_bytes(b"<html><body>404 Not Found</body></html>"), "is not a PyTorch checkpoint"),
    (None, lambda p: p.write_bytes(bytes(range(7, 250)) * 4), "is not a PyTorch checkpoint"),
    (None, lambda p: p.write_bytes(b"version https://git-lfs.github.com/spec/v1\noid sha256:1\n"), "git lfs pull"),
], ids=["empty", "zip cut short", "legacy cut short", "html page", "random bytes", "git-lfs pointer"])
def test_a_checkpoint_that_cannot_be_read_is_named_with_what_it_holds(make, damage, says, tmp_path):
    from util.checkpoint_io import load_checkpoint_file
    from util.errors import UserError

    path = tmp_path / "latest_net_G.pth"
    if make:
        make(path)
    damage(path)
    with pytest.raises(UserError) as refused:
        load_checkpoint_file(str(path))
    message = str(refused.value)
    assert str(path) in message and says in message and "\n" not in message, message


def test_a_log_line_cut_by_a_kill_is_skipped_and_the_next_one_starts_on_a_line_of_its_own(tmp_path, capsys):
    from util.display.validation_log import read_metrics
    from util.safe_files import append_line

    log = tmp_path / "metrics.jsonl"
    append_line(str(log), '{"epoch": 1, "metrics": {"L1": 0.5}}')
    with open(log, "a") as f:
        f.write('{"epoch": 2, "metr')  # killed in the middle of a write
    append_line(str(log), '{"epoch": 2, "metrics": {"L1": 0.4}}')
    assert log.read_text().splitlines()[-1] == '{"epoch": 2, "metrics": {"L1": 0.4}}'
    assert {epoch: row["metrics"]["L1"] for epoch, row in read_metrics(str(tmp_path)).items()} == {1: 0.5, 2: 0.4}
    assert f"{log}: skipping line(s) 2," in capsys.readouterr().err


def test_a_file_written_whole_or_not_at_all_keeps_the_old_one_when_the_writer_fails_and_gets_plain_permissions(
        tmp_path):
    from util.safe_files import atomic_write, atomic_write_text

    target = tmp_path / "best.json"
    target.write_text("old")

    def fails_halfway(f):
        f.write(b"new, but only ha")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(str(target), fails_halfway)
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["best.json"]
    atomic_write_text(str(tmp_path / "new.txt"), "text")
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "new.txt").stat().st_mode & 0o777 == 0o666 & ~umask  # as open() would make it, not 0600


def test_an_export_written_by_file_name_is_whole_or_absent(tmp_path):
    # scripts/export.py's ONNX writer takes a file name, not a file: an export interrupted halfway
    # leaves the previous file (or none), never a half-written one.
    from util.safe_files import atomic_write_by_name

    target = tmp_path / "latest_net_G.onnx"
    target.write_bytes(b"old")

    def fails_halfway(name):
        Path(name).write_bytes(b"new, but only ha")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write_by_name(str(target), fails_halfway)
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == [target.name]
    atomic_write_by_name(str(target), lambda name: Path(name).write_bytes(b"new"))
    assert target.read_bytes() == b"new" and [p.name for p in tmp_path.iterdir()] == [target.name]


def test_damaged_json_files_of_a_run_are_one_paragraph_naming_them(tmp_path):
    from util.errors import UserError
    from util.safe_files import read_json_object

    for content, says in ((b"", "it is empty"), (b'{"netG": "res', "JSONDecodeError"), (b"[1, 2]", "no JSON object")):
        path = tmp_path / "architecture.json"
        path.write_bytes(content)
        with pytest.raises(UserError, match="is damaged") as refused:
            read_json_object(str(path), "Delete it.")
        assert str(path) in str(refused.value) and says in str(refused.value)


# ---------------------------------------------------------------------------------- runs
@pytest.fixture(scope="module")
def scripts():
    return load_script("train.py"), load_script("test.py")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("damaged_data")
    for split, count in (("train", 2), ("val", 1), ("test", 1)):
        (root / split).mkdir()
        for i in range(count):
            pixels = np.random.default_rng(i).integers(0, 256, (32, 64, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / split / f"{i}.png")
    return root


def train_args(data: Path, ckpt: Path, *extra: str) -> list[str]:
    return ["--dataroot", str(data), "--name", NAME, "--checkpoints_dir", str(ckpt), *TINY, *TRAINING, *extra]


def eval_args(data: Path, ckpt: Path, *extra: str) -> list[str]:
    return ["--dataroot", str(data), "--name", NAME, "--checkpoints_dir", str(ckpt), *TINY,
            "--results_dir", str(ckpt / "results"), *extra]


@pytest.fixture(scope="module")
def finished(scripts, data, tmp_path_factory) -> Path:
    """The run folder of a finished two-epoch run."""
    ckpt = tmp_path_factory.mktemp("damaged_finished")
    assert scripts[0].main(train_args(data, ckpt)) == 0
    return ckpt / NAME


@pytest.fixture
def interrupted(finished, tmp_path) -> Path:
    """A copy of the finished run as it was when killed during its second epoch: `latest_*` are the
    end of epoch 1 (its `1_*` files), nothing of epoch 2 saved yet; logs and pages as they were."""
    run_dir = tmp_path / "ck" / NAME
    shutil.copytree(finished, run_dir, ignore=shutil.ignore_patterns("2_*"))
    for first in run_dir.glob("1_*"):
        shutil.copyfile(first, run_dir / first.name.replace("1_", "latest_", 1))
        os.utime(run_dir / first.name, (time.time() - 60,) * 2)  # older than latest_*, as when it was saved
    return run_dir


def call(main: Callable[[list[str]], int], args: list[str], capsys) -> tuple[int, str, str]:
    """`main(args)` in this process: (exit status, stdout, stderr); a traceback fails the test."""
    capsys.readouterr()
    code = main(args)
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return code, out, err


def assert_one_paragraph_naming(code: int, err: str, *names: object) -> None:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (code, err)
    for name in names:
        assert str(name) in lines[0], (name, err)


def files(run_dir: Path, keep: Callable[[Path], bool]) -> list[Path]:
    found = sorted(p for p in run_dir.rglob("*") if p.is_file() and keep(p))
    assert found
    return found


# ---------------------------------------------------------------------------------- every file
@pytest.mark.slow
@pytest.mark.parametrize("damage", DAMAGE)
def test_every_file_damaged_but_an_older_training_state_the_run_continues_from_it_and_test_py_names_the_rest(
        damage, scripts, data, interrupted, capsys):
    """Every file of the run folder damaged at once -- weights, moving averages, the newest training
    state, options, architecture.json, best.json, the logs, the pages, the images, the lock file --
    but the training state of epoch 1: --continue_train says which state it cannot use and goes on
    from the older one (which holds a copy of the weights), skipping the cut validation record and
    rewriting the rest; test.py then works, and names the weights file of epoch 1, still damaged."""
    for path in files(interrupted, lambda p: p.name != "1_train_state.pth"):
        DAMAGE[damage](path)
    code, out, err = call(scripts[0].main, train_args(data, interrupted.parent, "--continue_train"), capsys)
    assert code == 0, err
    assert f"cannot resume from {interrupted / 'latest_train_state.pth'}" in err
    assert f"resuming from {interrupted / '1_train_state.pth'}: epoch 2" in out
    metrics = interrupted / "metrics.jsonl"
    if damage == "cut in half":  # the cut record is skipped, naming the file; the new one is on a line of its own
        assert f"{metrics}: skipping line" in err, err
    assert '"epoch": 2' in metrics.read_text().splitlines()[-1]
    for written in ("latest_net_G.pth", "latest_train_state.pth", "train_opt.json", "architecture.json",
                    "web/index.html"):
        assert (interrupted / written).stat().st_size > 0, written
    code, out, err = call(scripts[1].main, eval_args(data, interrupted.parent), capsys)
    assert code == 0, err
    code, out, err = call(scripts[1].main, eval_args(data, interrupted.parent, "--epoch", "1"), capsys)
    assert_one_paragraph_naming(code, err, interrupted / "1_net_G.pth",
                                "is empty" if damage == "empty" else "cut short")


@pytest.mark.slow
def test_every_training_state_damaged_is_refused_naming_them_and_changing_nothing(scripts, data, interrupted, capsys):
    for path in interrupted.glob("*_train_state.pth"):
        cut_in_half(path)
    before = {path: path.read_bytes() for path in files(interrupted, lambda p: p.name != ".run.lock")}
    code, out, err = call(scripts[0].main, train_args(data, interrupted.parent, "--continue_train"), capsys)
    assert_one_paragraph_naming(code, err, interrupted, "latest_train_state.pth", "1_train_state.pth", "cut short",
                                "--epoch_count")
    assert {path: path.read_bytes() for path in before} == before


@pytest.mark.slow
def test_damaged_architecture_json_is_named_where_it_is_read(scripts, data, interrupted, capsys):
    """test.py with flags that do not fit the weights reads architecture.json for the flags to use;
    the Translator reads it to build the generator."""
    from models.inference.translator import Translator
    from util.errors import UserError

    architecture = interrupted / "architecture.json"
    empty(architecture)
    code, out, err = call(scripts[1].main, eval_args(data, interrupted.parent, "--ngf", "8"), capsys)
    assert_one_paragraph_naming(code, err, interrupted / "latest_net_G.pth", architecture, "is damaged")
    with pytest.raises(UserError, match=f"{architecture} is damaged"):
        Translator.load(interrupted)
    architecture.unlink()  # the way out the message gives: the architecture then comes from the weights
    options = interrupted / "train_opt.json"
    cut_in_half(options)
    with pytest.raises(UserError, match=f"{options} is damaged"):
        Translator.load(interrupted)


# ---------------------------------------------------------------------------------- killed inside a save
@pytest.mark.slow
def test_run_killed_at_a_random_point_inside_a_save_continues_and_tests_from_the_last_good_state(
        scripts, data, tmp_path, capsys):
    """SIGKILL while one of the files of a save (weights, moving averages, architecture.json, the
    training state) is being written -- which one, of which save, is drawn at random -- leaves every
    file readable: --continue_train resumes from the last complete save and finishes; test.py works."""
    ckpt = tmp_path / "ck"
    run_dir = ckpt / NAME
    seed = random.randrange(1 << 16)
    draw = random.Random(seed)
    victim, delay = draw.randrange(1, 9), draw.uniform(0, 0.03)  # kill `delay` s after the victim-th temporary file
    # a save after every step (each: weights, moving averages, architecture.json, training state)
    flags = ["--dataroot", str(data), "--name", NAME, "--checkpoints_dir", str(ckpt), *TINY, "--display_id", "0",
             "--no_html", "--no_progress", "--n_epochs", "1", "--n_epochs_decay", "1", "--ema_decay", "0.5",
             "--save_latest_freq", "1"]
    command = [sys.executable, str(ROOT / "train.py"), *flags]
    proc = ScriptProcess(command, ROOT, {**os.environ, "OMP_NUM_THREADS": "1"})
    seen, deadline = set(), time.time() + 120
    try:
        # counted from the first complete save on, so that there is a last good state to go back to
        while len(seen) < victim:
            assert proc.poll() is None, f"the run ended before its {victim}th temporary file (seed {seed})"
            assert time.time() < deadline
            if (run_dir / "latest_train_state.pth").exists():
                seen.update(run_dir.rglob(".*.tmp"))
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    killed_in = sorted(p.name for p in run_dir.rglob(".*.tmp"))  # the file being written, unless between two
    code, out, err = call(scripts[0].main, [*flags, "--continue_train"], capsys)
    assert code == 0 and "resuming from" in out, (seed, killed_in, err)
    assert not list(run_dir.rglob(".*.tmp"))  # the killed run's temporary files are gone
    code, out, err = call(scripts[1].main, eval_args(data, ckpt), capsys)
    assert code == 0, (seed, killed_in, err)
