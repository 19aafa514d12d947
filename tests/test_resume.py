"""A resumed run is the run that was interrupted: same final weights, bit for bit.

Runs are killed for real (SIGKILL, SIGTERM) at iterations chosen by watching loss_log.txt, and
resumed with `--continue_train`; their final weights are
compared with torch.equal against a run that was never interrupted. The runs killed are processes of
their own (tests/processes.py); the uninterrupted and continued ones run in this process, or as
ranks started by torch.multiprocessing where they have two. (A worker killed and restarted by torchrun's
--max-restarts: tests/test_cluster.py, beside the other launchers.)
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import ROOT, built_with_actions, run_in_process
from helpers import ENV, cycle_gan, interrupt_when_logged, pix2pix, run_here, train_command
from helpers_weights import assert_identical, final_weights
from models import networks
from processes import ScriptProcess, run_script_process
from util import resume_flags
from util.errors import UserError

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def uninterrupted(unpaired_root, paired_root, tmp_path_factory) -> dict[str, dict]:
    ckpt = tmp_path_factory.mktemp("uninterrupted")
    run_here(cycle_gan(unpaired_root, ckpt, "cycle_gan"))
    run_here(pix2pix(paired_root, ckpt, "pix2pix"))
    return {name: final_weights(ckpt / name) for name in ("cycle_gan", "pix2pix")}


def assert_goes_on_after_the_saved_position(resumed_stdout: str, log: Path) -> None:
    """The continued run's first step trains the image after the one its checkpoint was saved at
    (mid-epoch too: the epoch is not restarted)."""
    where = re.search(r"_train_state.pth: epoch (\d+), (\d+) images into it", resumed_stdout)
    assert where, resumed_stdout[-3000:]
    epoch, images_done = int(where[1]), int(where[2])
    first_resumed_step = next(line for line in log.read_text().split("================ Training Loss")[-1].splitlines()
                              if line.startswith("(epoch"))
    expected = f"(epoch: {epoch}, iters: {images_done + 1}," if images_done < 8 else f"(epoch: {epoch + 1}, iters: 1,"
    assert first_resumed_step.startswith(expected), first_resumed_step


# "(epoch: E, iters: I," is logged after the step that completes image I of epoch E. CycleGAN (its image pool)
# mid-epoch, one image after a periodic save (the one after image 6), late in the last epoch; pix2pix (dropout,
# batch norm) at the epoch's start. The position in the data is the models' common code: a stop at an epoch's start
# is also CUT's, the volumes', and the extension examples' kill point, pix2pix's mid-epoch one is
# test_training_state_written_before_options_were_recorded_still_resumes_bit_identically's, and a mid-epoch stop in
# the first epoch test_sigterm_saves_a_checkpoint_that_resumes_exactly_where_it_stopped's.
KILL_POINTS = [("cycle_gan", "(epoch: 2, iters: 7,"), ("pix2pix", "(epoch: 2, iters: 1,")]


@pytest.mark.parametrize("model, kill_at", KILL_POINTS)
def test_run_killed_and_continued_ends_with_bit_identical_weights(model, kill_at, uninterrupted, unpaired_root,
                                                                   paired_root, tmp_path):
    args = cycle_gan(unpaired_root, tmp_path, model) if model == "cycle_gan" else pix2pix(paired_root, tmp_path, model)
    log = tmp_path / model / "loss_log.txt"
    killed = interrupt_when_logged(train_command(args), log, kill_at)
    assert killed.returncode == -signal.SIGKILL
    resumed = run_here(args + ["--continue_train"])
    assert "resuming from" in resumed.stdout
    assert_goes_on_after_the_saved_position(resumed.stdout, log)
    assert_identical(final_weights(tmp_path / model), uninterrupted[model])


def test_sigterm_saves_a_checkpoint_that_resumes_exactly_where_it_stopped(uninterrupted, unpaired_root, tmp_path):
    args = cycle_gan(unpaired_root, tmp_path, "cycle_gan")
    log = tmp_path / "cycle_gan" / "loss_log.txt"
    stopped = interrupt_when_logged(train_command(args), log, "(epoch: 1, iters: 5,", sig=signal.SIGTERM)
    assert stopped.returncode == 128 + signal.SIGTERM
    where = re.search(r"stopped by a signal at epoch (\d+), (\d+) images into it; saved", stopped.output)
    assert where and "--continue_train" in stopped.output, stopped.output[-3000:]
    epoch, images_done = int(where[1]), int(where[2])
    resumed = run_here(args + ["--continue_train"])
    # The checkpoint written at the signal, not an older periodic one (after images 3 and 6), is
    # where the run goes on: the next image is the first one trained.
    assert f"latest_train_state.pth: epoch {epoch}, {images_done} images into it" in resumed.stdout
    assert_goes_on_after_the_saved_position(resumed.stdout, log)
    assert_identical(final_weights(tmp_path / "cycle_gan"), uninterrupted["cycle_gan"])


def test_corrupt_newest_checkpoint_falls_back_to_the_previous_one(unpaired_root, tmp_path):
    # 4 images an epoch: kept after images 3 and 6 (the second epoch's second), killed after the 7th, and
    # continued from the 3rd when the 6th is found cut short
    args = cycle_gan(unpaired_root, tmp_path, "corrupt") + ["--save_by_iter", "--max_dataset_size", "4"]
    interrupt_when_logged(train_command(args), tmp_path / "corrupt" / "loss_log.txt", "(epoch: 2, iters: 3,")
    states = sorted((tmp_path / "corrupt").glob("iter_*_train_state.pth"), key=os.path.getmtime)
    assert len(states) >= 2
    states[-1].write_bytes(states[-1].read_bytes()[:1000])  # a half-written file
    resumed = run_here(args + ["--continue_train"])
    assert f"cannot resume from {states[-1]}" in resumed.stderr
    assert f"resuming from {states[-2]}" in resumed.stdout


def test_a_second_run_on_the_same_folder_is_refused_while_the_first_is_alive(unpaired_root, tmp_path):
    args = cycle_gan(unpaired_root, tmp_path, "busy")
    args[args.index("--n_epochs") + 1] = "50"
    first = ScriptProcess(train_command(args), ROOT, ENV)
    try:
        log = tmp_path / "busy" / "loss_log.txt"
        # image 4's line comes after the save at image 3 is complete (train.py logs a step, then saves), so
        # the kill below, whenever it falls, leaves a whole checkpoint to resume from: killed within that
        # first save, the weights were there without their training state (seen when run alone)
        while not (log.exists() and "(epoch: 1, iters: 4," in log.read_text()):
            assert first.poll() is None, first.output_so_far()
            time.sleep(0.05)
        second = run_script_process(train_command(args), ROOT, ENV, timeout=120)
        assert second.returncode == 2
        assert "another training run is using" in second.stderr and str(tmp_path / "busy") in second.stderr
        assert "Traceback" not in second.stderr
        assert first.poll() is None  # the first run goes on undisturbed
    finally:
        first.kill()
    # once the first run is gone (killed, even), the folder is free again: --continue_train gets past the
    # lock and resumes. (How far the first run got depends on the machine's speed: with --n_epochs 1 the
    # continuation trains on, or says that the run is already past its last epoch.) It runs in this process:
    # the lock it must get past is the dead process's, whoever asks for it.
    args[args.index("--n_epochs") + 1] = "1"
    resumed = run_in_process("train.py", *args, "--continue_train")
    assert "another training run is using" not in resumed.stderr
    assert "resuming from" in resumed.stdout
    assert resumed.returncode == 0 or (resumed.returncode == 2 and "nothing is left to train" in resumed.stderr), \
        resumed.stderr[-3000:]


def test_checkpoint_killed_while_being_written_leaves_the_previous_one_intact(tmp_path):
    target = tmp_path / "latest_net_G.pth"
    torch.save({"w": torch.ones(3)}, target)
    before = target.read_bytes()
    # a process of its own, killed for real; forked with torch already imported (tests/processes.py)
    script = tmp_path / "writer.py"
    script.write_text("import sys, torch; sys.path.insert(0, sys.argv[1])\n"
                      "from util.checkpoint_io import atomic_torch_save\n"
                      "atomic_torch_save({'w': torch.zeros(400_000_000 // 4)}, sys.argv[2])\n")
    writer = ScriptProcess([sys.executable, str(script), str(ROOT), str(target)], ROOT, ENV)
    deadline = time.time() + 60
    while not list(tmp_path.glob(".latest_net_G.pth.*.tmp")) or \
            list(tmp_path.glob(".latest_net_G.pth.*.tmp"))[0].stat().st_size == 0:
        assert writer.poll() is None and time.time() < deadline, "the write finished before it could be killed"
        time.sleep(0.001)
    writer.kill()  # SIGKILL, then waited for
    assert writer.returncode == -signal.SIGKILL
    assert target.read_bytes() == before
    assert torch.equal(torch.load(target, weights_only=True)["w"], torch.ones(3))


def test_training_state_written_before_options_were_recorded_still_resumes_bit_identically(uninterrupted, paired_root,
                                                                                            tmp_path):
    args = pix2pix(paired_root, tmp_path, "pix2pix")
    interrupt_when_logged(train_command(args), tmp_path / "pix2pix" / "loss_log.txt", "(epoch: 1, iters: 4,")
    for path in (tmp_path / "pix2pix").glob("*_train_state.pth"):  # as an older version wrote them
        state = torch.load(path, weights_only=True)
        del state["options"]
        torch.save(state, path)
    resumed = run_here(args + ["--continue_train"])
    assert "resuming from" in resumed.stdout
    assert_identical(final_weights(tmp_path / "pix2pix"), uninterrupted["pix2pix"])


# ---------------------------------------------------------------------------------- flags changed on --continue_train
# (end to end, with the runs' messages: the RESUME_FLAG_CASES of tests/test_bad_input.py)
def built_in_parsers(options_classes: tuple = ()):
    """(what, the actions of its parser) for train.py (and test.py, unless `options_classes` says
    otherwise) with every built-in model and dataset mode, and with every built-in network family."""
    import data
    import models
    from options.test_options import TestOptions
    from options.train_options import TrainOptions

    commands = [["--model", model, "--dataset_mode", mode]
                for model in models.builtin_model_names() for mode in data.builtin_dataset_names()]
    commands += [["--netG", name] for name in networks.generators()]
    commands += [["--netD", name] for name in networks.discriminators()]
    for options_class in options_classes or (TrainOptions, TestOptions):
        for command in commands:
            try:
                _, actions = built_with_actions(lambda: options_class().build_parser(["--dataroot", "x", *command]))
            except SystemExit:  # --model test does not train
                continue
            yield f"{options_class.__name__} {' '.join(command)}", actions


def declared(actions: list) -> dict[str, str]:
    """Each long option of a parser's `actions` (but --help) -> the name of the class it declares (None:
    none)."""
    return {option: resume_flags.class_name(getattr(action, "on_resume", None))
            for action in actions if action.dest != "help"
            for option in action.option_strings if option.startswith("--")}


def declared_classes(*argv: str) -> dict:
    """What each flag of train.py with `argv` declares (`opt._flag_classes` without parsing)."""
    from options.train_options import TrainOptions

    return TrainOptions().build_parser(["--dataroot", "x", *argv]).resume_classes()


def test_every_built_in_flag_declares_what_a_change_of_it_does_on_continue_train():
    undeclared = sorted({f"{option} ({what})" for what, actions in built_in_parsers()
                         for option, name in declared(actions).items() if name is None})
    assert not undeclared, f"declare on_resume= where these flags are added: {undeclared}"


def test_a_flag_of_your_own_model_declared_without_a_class_is_recorded_and_honoured_with_a_note():
    from options.train_options import TrainOptions

    def parse(*flags: str):
        return TrainOptions().parse(["--dataroot", "x", "--model", "custom_models.feature_matching_model", *flags])

    trained, now = parse(), parse("--lambda_feature", "2", "--lr", "0.001")
    assert "lambda_feature" not in now._flag_classes  # tests/custom_models/feature_matching_model.py declares none
    saved = resume_flags.recorded_options(trained.as_dict(), trained._flag_classes)
    assert saved["lambda_feature"] == 1.0 and "name" not in saved  # recorded, unlike the silent ones
    said = resume_flags.check_changed_flags(saved, now.as_dict(), now._defaults, "state.pth",
                                            classes=now._flag_classes)
    assert said == ["note: continuing with changed flags, honoured from here on: --lr 0.001 (it trained with --lr "
                    "0.0002), --lambda_feature 2.0 (it trained with --lambda_feature 1.0); the run no longer matches "
                    "one that was never interrupted."]


def flags_in_docs_table() -> dict[str, set[str]]:
    """The flags docs/resume.md lists under each class, in its table of the built-in flags."""
    text = (ROOT / "docs" / "resume.md").read_text()
    section = text[text.index("### Every built-in flag"):]
    table = section[:section.find("\n#")]  # up to the next heading
    rows = re.findall(r"^\| `(?:on_resume=)?\"?(\w+)[^|]*\|([^|\n]*)\|", table, flags=re.M)
    return {name: set(re.findall(r"--\w+", flags)) for name, flags in rows}


def test_the_docs_list_every_built_in_training_flag_under_the_class_it_declares():
    from options.train_options import TrainOptions

    declared_by_class: dict[str, set[str]] = {}
    for _, actions in built_in_parsers((TrainOptions,)):
        for option, name in declared(actions).items():
            declared_by_class.setdefault(name, set()).add(option)
    listed = flags_in_docs_table()
    assert set(listed) == set(resume_flags.CLASS_NAMES), listed.keys()
    for name in resume_flags.CLASS_NAMES:
        wrong = {"not listed": sorted(declared_by_class.get(name, set()) - listed[name]),
                 "listed but not declared so": sorted(listed[name] - declared_by_class.get(name, set()))}
        assert not any(wrong.values()), f"docs/resume.md, class {name}: {wrong}"


def test_every_network_familys_shape_flags_are_architecture_flags():
    # CUT's --no_antialias* shape the resnet family's generators, BicycleGAN's --nz, --where_add and --nl its U-Net
    classes = {**declared_classes("--model", "cut"), **declared_classes("--model", "bicycle_gan")}
    for role in (networks.GENERATOR, networks.DISCRIMINATOR, networks.ENCODER):
        for name in networks.builtin_names(role):
            for flag in networks.family_of(name, role).shape_flags:
                assert classes.get(flag) == resume_flags.ARCHITECTURE, f"--{flag} shapes --{role} {name}"


def test_architecture_and_lr_policy_changes_are_refused_naming_each_flag_with_both_values():
    saved = {"ngf": 64, "norm": "batch", "no_dropout": False, "lr_policy": "plateau", "print_freq": 100}
    current = {"ngf": 32, "norm": "syncbatch", "no_dropout": True, "lr_policy": "linear", "print_freq": 1}
    with pytest.raises(UserError) as refused:
        resume_flags.check_changed_flags(saved, current, {}, "ck/run/latest_train_state.pth",
                                         classes=declared_classes("--model", "pix2pix"))
    message = str(refused.value)
    for text in ("ck/run/latest_train_state.pth", "--ngf 64", "--ngf 32", "no --no_dropout", "--lr_policy plateau",
                 "--lr_policy linear", "networks and learning-rate schedule cannot change",
                 "continue from its weights alone with --continue_train --epoch_count N"):
        assert text in message, (text, message)
    assert "--norm" not in message  # batch norm synchronised across processes builds the same networks
    assert "print_freq" not in message  # harmless


def test_honoured_changes_are_noted_ignored_ones_only_when_set_and_harmless_ones_not_at_all():
    saved = {"lr": 0.0002, "batch_size": 1, "seed": 0, "init_type": "xavier", "print_freq": 100, "my_flag": 1}
    current = {"lr": 0.001, "batch_size": 4, "seed": 5, "init_type": "normal", "print_freq": 1, "my_flag": 2,
               "added_since": 3}
    defaults = {"seed": None, "init_type": "normal"}
    classes = declared_classes("--model", "pix2pix")  # --my_flag: one of your own, declared without a class
    said = "\n".join(resume_flags.check_changed_flags(saved, current, defaults, "state.pth", classes=classes))
    for text in ("--lr 0.001 (it trained with --lr 0.0002)", "--batch_size 4 (it trained with --batch_size 1)",
                 "--my_flag 2 (it trained with --my_flag 1)", "--seed 5 is ignored",
                 "a continued run keeps the seed it started with"):
        assert text in said, (text, said)
    for text in ("init_type", "print_freq", "added_since"):  # left at its default; harmless; not recorded
        assert text not in said, (text, said)
    assert resume_flags.check_changed_flags(None, current, defaults, "state.pth", classes=classes) == []  # older


def schedule_options(**changes) -> argparse.Namespace:
    base = dict(lr_policy="linear", lr=0.0002, beta1=0.5, fused_adam=False, n_epochs=3, n_epochs_decay=4,
                lr_decay_iters=2, epoch_count=1)
    return argparse.Namespace(**{**base, **changes})


def stepped(opt: argparse.Namespace, epochs: int, first_epoch: int | None = None):
    """An Adam optimizer and --lr_policy schedule of `opt`, after `epochs` epochs."""
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(2))], lr=opt.lr, betas=(opt.beta1, 0.999))
    scheduler = networks.get_scheduler(optimizer, opt, first_epoch)
    for _ in range(epochs):
        optimizer.step()
        scheduler.step(1.0) if opt.lr_policy == "plateau" else scheduler.step()
    return optimizer, scheduler


@pytest.mark.parametrize("policy", ["linear", "step", "cosine", "plateau"])
def test_changed_schedule_flags_on_a_loaded_state_give_the_rates_of_the_new_schedule(policy):
    old = schedule_options(lr_policy=policy)
    new = schedule_options(lr_policy=policy, lr=0.001, beta1=0.9, n_epochs=5, n_epochs_decay=6, lr_decay_iters=3)
    saved_optimizer, saved_scheduler = stepped(old, 4)
    optimizer, scheduler = stepped(new, 0)
    optimizer.load_state_dict(saved_optimizer.state_dict())
    scheduler.load_state_dict(saved_scheduler.state_dict())
    networks.reapply_schedule_flags(optimizer, scheduler, new, vars(old))
    fresh, fresh_scheduler = stepped(new, 4)  # the new flags from the start
    for _ in range(3):  # now, and as the schedule goes on
        assert optimizer.param_groups[0]["lr"] == pytest.approx(fresh.param_groups[0]["lr"], rel=1e-9)
        assert optimizer.param_groups[0]["betas"] == (0.9, 0.999)
        for opt_, sched in ((optimizer, scheduler), (fresh, fresh_scheduler)):
            opt_.step()
            sched.step(1.0) if policy == "plateau" else sched.step()


def test_unchanged_schedule_flags_leave_a_loaded_state_untouched():
    opt = schedule_options()
    optimizer, scheduler = stepped(opt, 4)
    before = (optimizer.state_dict()["param_groups"], scheduler.state_dict())
    networks.reapply_schedule_flags(optimizer, scheduler, opt, {**vars(opt), "print_freq": 1})
    assert (optimizer.state_dict()["param_groups"], scheduler.state_dict()) == before


def test_a_continued_linear_schedule_counts_from_the_epoch_the_run_started_at():
    started_at_3 = stepped(schedule_options(epoch_count=3), 2)[0].param_groups[0]["lr"]
    continued = stepped(schedule_options(epoch_count=1), 2, first_epoch=3)[0].param_groups[0]["lr"]
    assert continued == started_at_3 != stepped(schedule_options(), 2)[0].param_groups[0]["lr"]


@pytest.mark.parametrize("continue_train", [True, False])
def test_continuing_a_finished_run_says_so_and_how_to_train_more(continue_train, capsys):
    import train
    from models.training.checkpointer import StartPoint
    from util.position import Position

    opt = argparse.Namespace(n_epochs=2, n_epochs_decay=1, continue_train=continue_train)
    finished = StartPoint(Position(epoch=4), seed=0, state={})
    train.check_epochs_left(opt, StartPoint(Position(epoch=3), seed=0, state={}), "ck/run")  # epoch 3 is left
    if continue_train:  # asked to train: refused
        with pytest.raises(UserError, match="nothing is left to train.*raise --n_epochs or --n_epochs_decay"):
            train.check_epochs_left(opt, finished, "ck/run")
    else:  # --auto_resume, a restart: a note, and nothing to do
        train.check_epochs_left(opt, finished, "ck/run")
        assert "note: the run in ck/run has finished epoch 3" in capsys.readouterr().out
