"""Corpus cases of tests/test_bad_input.py for flags changed between a run and its continuation
(util/resume_flags.py, docs/resume.md): flags that cannot change are refused naming both
values, a finished run says how to train more, changed schedule flags are honoured with a note,
and a refused continuation leaves every file of the run folder byte-identical.

All cases continue copies of one real (tiny) pix2pix run trained with --lr_policy plateau, made
once by the first case that needs it."""
from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import torch

from bad_input_kit import NAME, PIX, Case, Setup, aligned, run_args, train_in_process

PLATEAU = ("--lr_policy", "plateau")  # the flag the trained run was started with


def trained_run(work: Path) -> Path:
    """A finished 1-epoch pix2pix --lr_policy plateau run, trained once per session beside the
    case folders; its data folder is returned (the cases continue copies of its run folder)."""
    template = work.parent / "resume_flags_run"
    if not (template / "ck" / NAME / "latest_train_state.pth").exists():
        aligned(template / "data" / "train", 2)
        train_in_process(run_args(template, *PIX, *PLATEAU, data=template / "data"))
    shutil.copytree(template / "ck" / NAME, work / "ck" / NAME)
    return template / "data"


def snapshot(run_dir: Path) -> dict[str, bytes]:
    """Every file of the run folder and its bytes, but the run lock (each run writes its holder there)."""
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*"))
            if p.is_file() and p.name != ".run.lock"}


def unchanged(run_dir: Path) -> Callable[[], None]:
    """A check that the run folder is as it is now (the corpus kit's own guard files aside)."""
    before = snapshot(run_dir)

    def check() -> None:
        after = {name: data for name, data in snapshot(run_dir).items()
                 if name in before or not name.startswith("latest_net_")}  # bad_input_kit.execute adds guards
        assert after.keys() == before.keys(), f"files added or removed: {after.keys() ^ before.keys()}"
        changed = [name for name in before if after[name] != before[name]]
        assert not changed, f"a refused run changed {changed}"
    return check


def continued(*flags: str, stderr_has: tuple = (), stdout_has: tuple = (),
              prepare: Callable[[Path], None] | None = None) -> Callable[[Path], Setup]:
    """Continue a copy of the trained run with `flags`; a refusal must leave its folder as it was."""
    def build(work: Path) -> Setup:
        data = trained_run(work)
        run_dir = work / "ck" / NAME
        if prepare is not None:
            prepare(run_dir)
        args = run_args(work, *PIX, "--continue_train", *flags, data=data)
        return Setup(args, stderr_has=stderr_has, stdout_has=stdout_has, after=unchanged(run_dir))
    return build


def without_recorded_options(run_dir: Path) -> None:
    """Make the training state one written before the options were recorded."""
    path = run_dir / "latest_train_state.pth"
    state = torch.load(path, weights_only=True)
    del state["options"]
    torch.save(state, path)


def honoured(work: Path) -> Setup:
    setup = continued(*PLATEAU, "--n_epochs", "2", "--lr", "0.0001", "--seed", "1")(work)
    setup.after = None  # it trains: the folder changes
    setup.stdout_has = ("--n_epochs 2 (it trained with --n_epochs 1)", "--lr 0.0001 (it trained with --lr 0.0002)",
                        "--seed 1 is ignored", "End of epoch 2 / 2", "learning rate 0.0001000")
    return setup


RESUME_FLAG_CASES = [
    Case("--continue_train of a --lr_policy plateau run without that flag is refused naming both policies",
         continued(stderr_has=("latest_train_state.pth", "--lr_policy plateau", "--lr_policy linear")), 2),
    Case("--continue_train of a training state that recorded no options, with another --lr_policy, is refused "
         "naming both", continued("--n_epochs", "2", stderr_has=("--lr_policy plateau", "--lr_policy linear"),
                                  prepare=without_recorded_options), 2),
    Case("--continue_train of a run trained without a learning-rate recipe, with one, is refused naming both values",
         continued(*PLATEAU, "--n_epochs", "2", "--scale_lr", "sqrt", "--warmup_epochs", "1",
                   stderr_has=("learning-rate recipe", "--scale_lr none", "--scale_lr sqrt", "--warmup_epochs 1")), 2),
    Case("--continue_train with other architecture flags is refused naming each with both values",
         continued(*PLATEAU, "--ngf", "16", "--norm", "instance", "--no_dropout", "--direction", "BtoA",
                   "--input_nc", "1", stderr_has=("--ngf 8", "--ngf 16", "--norm batch", "--norm instance",
                                                  "no --no_dropout, this command has --no_dropout", "--direction AtoB",
                                                  "--direction BtoA", "--input_nc 3", "--input_nc 1")), 2),
    Case("--continue_train of a finished run is refused saying to raise --n_epochs or --n_epochs_decay",
         continued(*PLATEAU, stderr_has=("nothing is left to train", "finished epoch 1", "--n_epochs_decay 10")), 2),
    Case("--continue_train with an invalid --display_channels is refused before the run folder is rewritten",
         continued(*PLATEAU, "--n_epochs", "2", "--display_channels", "9,9", stderr_has=("--display_channels 9,9",)),
         2),
    Case("--continue_train with a higher --n_epochs, another --lr and --seed trains on with notes", honoured, 0),
]
