"""Corpus cases of tests/test_bad_input.py for damaged files in a run folder: checkpoints that are
empty, cut short or something else altogether (a saved error page, a Git LFS pointer), training
states that cannot be read (an older good one is used, with a note naming the damaged one), and
architecture.json / train_opt.json that are empty or cut short. Each is named in one paragraph
(docs/resume.md); tests/test_damaged_files.py damages every file of a real run in turn."""
from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import torch
from PIL import Image

from bad_input_kit import NAME, PIX, Case, Setup, aligned, eval_args, random_pixels, run_args, train_in_process

NOT_A_GENERATOR = {"weight": torch.arange(6.0)}  # loads as weights, fits no network


def run_dir(work: Path) -> Path:
    folder = work / "ck" / NAME
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def cut_short(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def checkpoint_for_test(content: bytes | None, *names: str) -> Callable[[Path], Setup]:
    """test.py loads latest_net_G.pth holding `content` (None: real weights, cut in half)."""
    def build(work: Path) -> Setup:
        aligned(work / "data" / "test", 1)
        ckpt = run_dir(work) / "latest_net_G.pth"
        if content is None:
            torch.save({"weight": torch.randn(2000)}, ckpt)
            cut_short(ckpt)
        else:
            ckpt.write_bytes(content)
        return Setup(eval_args(work), stderr_has=(ckpt, *names))
    return build


def b_empty_architecture_json_with_other_flags(work):
    """The weights do not fit the flags: the message would name the flags architecture.json records."""
    aligned(work / "data" / "test", 1)
    torch.save(NOT_A_GENERATOR, run_dir(work) / "latest_net_G.pth")
    architecture = run_dir(work) / "architecture.json"
    architecture.write_bytes(b"")
    return Setup(eval_args(work), stderr_has=(run_dir(work) / "latest_net_G.pth", architecture, "is damaged"))


def b_every_training_state_damaged(work):
    aligned(work / "data" / "train", 2)
    (run_dir(work) / "latest_train_state.pth").write_bytes(b"")
    older = run_dir(work) / "3_train_state.pth"
    torch.save({"format": 1, "progress": {"epoch": 4}, "padding": torch.zeros(2000)}, older)
    cut_short(older)
    return Setup(run_args(work, *PIX, "--continue_train"),
                 stderr_has=(run_dir(work), "latest_train_state.pth", "3_train_state.pth", "--epoch_count"))


def b_empty_newest_training_state_falls_back(work):
    """A run of two epochs killed in its second (as the end of epoch 1 left it), whose latest
    training state was then emptied: --continue_train goes on from 1_train_state.pth, saying why."""
    aligned(work / "data" / "train", 2)
    two_epochs = ("--n_epochs_decay", "1", "--save_epoch_freq", "1")
    train_in_process(run_args(work, *PIX, *two_epochs))
    folder = run_dir(work)
    for saved in folder.glob("2_*"):
        saved.unlink()
    for saved in folder.glob("1_*"):
        shutil.copyfile(saved, folder / saved.name.replace("1_", "latest_", 1))
    (folder / "latest_train_state.pth").write_bytes(b"")
    return Setup(run_args(work, *PIX, *two_epochs, "--continue_train"),
                 stderr_has=(f"cannot resume from {folder / 'latest_train_state.pth'}", "is empty"),
                 stdout_has=(f"resuming from {folder / '1_train_state.pth'}: epoch 2",))


def b_empty_weights_for_reference_style_continue(work):
    aligned(work / "data" / "train", 2)
    weights = run_dir(work) / "1_net_G.pth"
    weights.write_bytes(b"")
    return Setup(run_args(work, *PIX, "--continue_train", "--epoch", "1"), stderr_has=(weights, "is empty"))


def translate_args(work: Path) -> list[str]:
    image = work / "in.png"
    Image.fromarray(random_pixels(0, 32, 32)).save(image)
    return [str(image), "--checkpoint", str(run_dir(work)), "--output", str(work / "out")]


def b_translate_with_empty_architecture_json(work):
    torch.save(NOT_A_GENERATOR, run_dir(work) / "latest_net_G.pth")
    architecture = run_dir(work) / "architecture.json"
    architecture.write_bytes(b"")
    return Setup(translate_args(work), stderr_has=(architecture, "is damaged", "it is empty"))


def b_translate_with_cut_train_opt_json(work):
    torch.save(NOT_A_GENERATOR, run_dir(work) / "latest_net_G.pth")
    options = run_dir(work) / "train_opt.json"
    options.write_text('{"model": "pix2pix", "data_range": [0, ')
    return Setup(translate_args(work), stderr_has=(options, "is damaged"))


HTML_ERROR_PAGE = b"<!DOCTYPE html><html><head><title>404 Not Found</title></head></html>\n"
LFS_POINTER = b"version https://git-lfs.github.com/spec/v1\noid sha256:4d7a\nsize 45000000\n"

DAMAGED_FILE_CASES = [
    # weights that test.py cannot read: one paragraph naming the file and what it holds instead
    Case("zero-byte latest_net_G.pth is refused by test.py naming it as empty", checkpoint_for_test(b"", "is empty"), 2,
         script="test.py"),
    Case("latest_net_G.pth cut in half is refused by test.py naming it as cut short",
         checkpoint_for_test(None, "cut short"), 2, script="test.py"),
    Case("a saved html error page as latest_net_G.pth is refused by test.py as not a checkpoint",
         checkpoint_for_test(HTML_ERROR_PAGE, "not a PyTorch checkpoint", "<!DOCTYPE"), 2, script="test.py"),
    Case("a git-lfs pointer as latest_net_G.pth is refused by test.py suggesting git lfs pull",
         checkpoint_for_test(LFS_POINTER, "git lfs pull"), 2, script="test.py"),
    Case("zero-byte weights for --continue_train --epoch 1 are refused naming them",
         b_empty_weights_for_reference_style_continue, 2),
    # training states: an older good one is used with a note; none readable is refused naming them
    Case("--continue_train with an empty latest_train_state.pth goes on from the older state naming the empty one",
         b_empty_newest_training_state_falls_back, 0),
    Case("--continue_train with every training state damaged is refused naming them",
         b_every_training_state_damaged, 2),
    # the run folder's JSON files
    Case("empty architecture.json with weights of other flags is refused by test.py naming both",
         b_empty_architecture_json_with_other_flags, 2, script="test.py"),
    Case("empty architecture.json is refused by translate.py naming it", b_translate_with_empty_architecture_json, 2,
         script="scripts/translate.py"),
    Case("train_opt.json cut short is refused by translate.py naming it", b_translate_with_cut_train_opt_json, 2,
         script="scripts/translate.py"),
]
