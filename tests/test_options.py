"""Command-line options: every flag of the reference implementation with its default and type,
the defaults each model changes, clear errors for misspelt choices, the deprecated --gpu_ids,
read-only options, --suffix and the saved option files."""
from __future__ import annotations

import argparse
import contextlib
import inspect
import io
import json
import math
import re
import sys
from collections.abc import Callable

import pytest
import torch

import data
import models
from conftest import ROOT, built_with_actions, load_script
from options.base_options import save_options
from options.test_options import TestOptions
from options.train_options import TrainOptions
from util.flag_types import OneParagraphParser

# (flag, reference default, type, a value to parse from the command line). "flag" = store_true.
BASE_FLAGS = [
    ("name", "experiment_name", str, "my_run"),
    ("checkpoints_dir", "./checkpoints", str, "/tmp/ckpt"),
    ("model", "cycle_gan", str, "pix2pix"),
    ("input_nc", 3, int, "1"),
    ("output_nc", 3, int, "1"),
    ("ngf", 64, int, "32"),
    ("ndf", 64, int, "32"),
    ("netD", "basic", str, "pixel"),
    ("netG", "resnet_9blocks", str, "unet_128"),
    ("n_layers_D", 3, int, "5"),
    ("norm", "instance", str, "batch"),
    ("init_type", "normal", str, "xavier"),
    ("init_gain", 0.02, float, "0.5"),
    ("no_dropout", False, "flag", None),
    ("dataset_mode", "unaligned", str, "aligned"),
    ("direction", "AtoB", str, "BtoA"),
    ("serial_batches", False, "flag", None),
    ("num_threads", 4, int, "2"),
    ("batch_size", 1, int, "8"),
    ("load_size", 286, int, "143"),
    ("crop_size", 256, int, "128"),
    ("max_dataset_size", math.inf, int, "10"),
    ("preprocess", "resize_and_crop", str, "scale_width"),
    ("no_flip", False, "flag", None),
    ("display_winsize", 256, int, "128"),
    ("epoch", "latest", str, "20"),
    ("load_iter", 0, int, "5000"),
    ("verbose", False, "flag", None),
    ("suffix", "", str, "x"),
    ("use_wandb", False, "flag", None),
    ("wandb_project_name", "CycleGAN-and-pix2pix", str, "proj"),
]

TRAIN_FLAGS = [
    ("display_freq", 400, int, "10"),
    ("display_ncols", 4, int, "2"),
    ("display_id", 1, int, "0"),
    ("display_server", "http://localhost", str, "http://example"),
    ("display_env", "main", str, "other"),
    ("display_port", 8097, int, "9000"),
    ("update_html_freq", 1000, int, "10"),
    ("print_freq", 100, int, "10"),
    ("no_html", False, "flag", None),
    ("save_latest_freq", 5000, int, "10"),
    ("save_epoch_freq", 5, int, "1"),
    ("save_by_iter", False, "flag", None),
    ("continue_train", False, "flag", None),
    ("epoch_count", 1, int, "7"),
    ("phase", "train", str, "val"),
    ("n_epochs", 100, int, "3"),
    ("n_epochs_decay", 100, int, "3"),
    ("beta1", 0.5, float, "0.9"),
    ("lr", 0.0002, float, "0.001"),
    ("gan_mode", "lsgan", str, "wgangp"),
    ("pool_size", 50, int, "0"),
    ("lr_policy", "linear", str, "cosine"),
    ("lr_decay_iters", 50, int, "10"),
]

TEST_FLAGS = [
    ("results_dir", "./results/", str, "/tmp/res"),
    ("aspect_ratio", 1.0, float, "2.0"),
    ("phase", "test", str, "val"),
    ("eval", False, "flag", None),
    ("num_test", 50, int, "7"),
]


def parse_train(*argv: str):
    return TrainOptions().parse(["--dataroot", "unused", *argv])


def parse_test(*argv: str):
    return TestOptions().parse(["--dataroot", "unused", *argv])


def declared_default(options_cls, dest: str):
    """The default as declared by the options class itself, before any model changes it."""
    parser = options_cls().initialize(OneParagraphParser())  # the parser that takes each flag's on_resume
    return parser.get_default(dest)


def _check_default_and_type(options_cls, parse, flag, default, kind, sample, check_default=True):
    if check_default:
        assert declared_default(options_cls, flag) == default
    if kind == "flag":
        assert isinstance(getattr(parse(), flag), bool)
        assert getattr(parse(f"--{flag}"), flag) is True
    else:
        value = getattr(parse(f"--{flag}", sample), flag)
        assert type(value) is kind
        assert value == kind(sample)


@pytest.mark.parametrize("flag,default,kind,sample", BASE_FLAGS, ids=[f[0] for f in BASE_FLAGS])
def test_base_flag_has_reference_default_and_type(flag, default, kind, sample):
    # the default model's identity loss needs as many output channels as input ones (refused when parsed)
    other = {"input_nc": ["--output_nc", sample], "output_nc": ["--input_nc", sample]}.get(flag, [])
    _check_default_and_type(TrainOptions, lambda *argv: parse_train(*other, *argv), flag, default, kind, sample)
    # test.py accepts the same flag; the reference forces a few of them for testing (see below).
    _check_default_and_type(TestOptions, parse_test, flag, default, kind, sample,
                            check_default=flag not in TEST_TIME_DEFAULTS)


@pytest.mark.parametrize("flag,default,kind,sample", TRAIN_FLAGS, ids=[f[0] for f in TRAIN_FLAGS])
def test_train_flag_has_reference_default_and_type(flag, default, kind, sample):
    _check_default_and_type(TrainOptions, parse_train, flag, default, kind, sample)


@pytest.mark.parametrize("flag,default,kind,sample", TEST_FLAGS, ids=[f[0] for f in TEST_FLAGS])
def test_test_flag_has_reference_default_and_type(flag, default, kind, sample):
    _check_default_and_type(TestOptions, parse_test, flag, default, kind, sample)


def test_plain_train_command_gives_reference_defaults():
    opt = parse_train()
    expected = {flag: default for flag, default, _, _ in BASE_FLAGS + TRAIN_FLAGS}
    expected["no_dropout"] = True  # the default model, cycle_gan, turns dropout off
    assert opt.isTrain is True
    for flag, value in expected.items():
        assert getattr(opt, flag) == value, flag


# The reference's test.py forces these after parsing; here they are TestOptions defaults.
TEST_TIME_DEFAULTS = {"model": "test", "load_size": 256, "num_threads": 0, "batch_size": 1,
                      "serial_batches": True, "no_flip": True}


def test_plain_test_command_uses_test_model_and_no_crop():
    opt = parse_test()
    assert opt.isTrain is False
    assert opt.model == "test"
    assert opt.dataset_mode == "single"
    assert opt.model_suffix == ""
    assert opt.crop_size == 256
    assert opt.load_size == opt.crop_size  # no random crop at test time
    for flag, default, _, _ in TEST_FLAGS:
        assert getattr(opt, flag) == default, flag
    for flag, value in TEST_TIME_DEFAULTS.items():
        assert getattr(opt, flag) == value, flag


def test_dataroot_is_required(capsys):
    with pytest.raises(SystemExit) as exc:
        TrainOptions().parse([])
    assert exc.value.code == 2
    assert "--dataroot" in capsys.readouterr().err


def test_training_only_flags_are_not_test_flags():
    opt = parse_test()
    for flag in ("lr", "n_epochs", "gan_mode", "pool_size", "continue_train", "display_freq"):
        assert not hasattr(opt, flag), flag


# ---------------------------------------------------------------- model-specific defaults
MODEL_DEFAULTS = [
    ("cycle_gan", True, {"lambda_A": 10.0, "lambda_B": 10.0, "lambda_identity": 0.5, "no_dropout": True,
                         "netG": "resnet_9blocks", "norm": "instance", "dataset_mode": "unaligned",
                         "gan_mode": "lsgan", "pool_size": 50}),
    ("cycle_gan", False, {"no_dropout": True, "dataset_mode": "unaligned"}),
    ("pix2pix", True, {"lambda_L1": 100.0, "netG": "unet_256", "norm": "batch", "dataset_mode": "aligned",
                       "pool_size": 0, "gan_mode": "vanilla", "no_dropout": False}),
    ("pix2pix", False, {"netG": "unet_256", "norm": "batch", "dataset_mode": "aligned", "no_dropout": False}),
    ("test", False, {"model_suffix": "", "dataset_mode": "single", "netG": "resnet_9blocks", "norm": "instance"}),
    ("colorization", True, {"dataset_mode": "colorization", "input_nc": 1, "output_nc": 2, "lambda_L1": 100.0,
                            "netG": "unet_256", "norm": "batch", "gan_mode": "vanilla", "pool_size": 0}),
    ("colorization", False, {"dataset_mode": "colorization", "input_nc": 1, "output_nc": 2}),
    ("template", True, {"lambda_regression": 1.0, "dataset_mode": "aligned"}),
    ("template", False, {"dataset_mode": "aligned"}),
]


@pytest.mark.parametrize("model,is_train,expected", MODEL_DEFAULTS,
                         ids=[f"{m}-{'train' if t else 'test'}" for m, t, _ in MODEL_DEFAULTS])
def test_model_sets_its_reference_defaults(model, is_train, expected):
    opt = (parse_train if is_train else parse_test)("--model", model)
    for flag, value in expected.items():
        assert getattr(opt, flag) == value, flag


@pytest.mark.parametrize("model,flag", [("cycle_gan", "lambda_A"), ("pix2pix", "lambda_L1"),
                                        ("template", "lambda_regression")])
def test_loss_weights_are_training_only_flags(model, flag):
    assert hasattr(parse_train("--model", model), flag)
    assert not hasattr(parse_test("--model", model), flag)


def test_explicit_flags_override_model_defaults():
    opt = parse_train("--model", "pix2pix", "--netG", "resnet_6blocks", "--norm", "instance", "--dataset_mode",
                "unaligned", "--pool_size", "10", "--gan_mode", "lsgan", "--lambda_L1", "5")
    assert (opt.netG, opt.norm, opt.dataset_mode, opt.pool_size, opt.gan_mode, opt.lambda_L1) == (
        "resnet_6blocks", "instance", "unaligned", 10, "lsgan", 5.0)
    opt = parse_train("--model", "cycle_gan", "--lambda_A", "3", "--lambda_identity", "0")
    assert (opt.lambda_A, opt.lambda_B, opt.lambda_identity) == (3.0, 10.0, 0.0)
    opt = parse_test("--model", "test", "--dataset_mode", "aligned", "--model_suffix", "_A")
    assert (opt.dataset_mode, opt.model_suffix) == ("aligned", "_A")


def test_model_default_dataset_mode_brings_that_datasets_defaults():
    # colorization's dataset sets 1 input and 2 output channels; an explicit flag still wins.
    assert (parse_train("--model", "colorization").input_nc, parse_train("--model", "colorization").output_nc) == (1, 2)
    assert parse_train("--model", "colorization", "--input_nc", "3").input_nc == 3


def test_test_model_cannot_be_trained(capsys):
    with pytest.raises(SystemExit) as exc:
        parse_train("--model", "test")
    assert exc.value.code == 2
    message = capsys.readouterr().err
    assert "--model test" in message and "cycle_gan" in message and "Traceback" not in message


# ---------------------------------------------------------------- misspelt choices
MISSPELT = [
    ("--netG", "resnet9", ["resnet_9blocks", "resnet_6blocks", "unet_256", "unet_128"]),
    ("--model", "cyclegan", ["cycle_gan", "pix2pix", "colorization", "template"]),
    ("--norm", "batchnorm", ["instance", "batch", "none"]),
    ("--netD", "patch", ["basic", "n_layers", "pixel"]),
    ("--gan_mode", "wgan", ["vanilla", "lsgan", "wgangp"]),
    ("--lr_policy", "exp", ["linear", "step", "plateau", "cosine"]),
    ("--init_type", "he", ["normal", "xavier", "kaiming", "orthogonal"]),
    ("--dataset_mode", "paired", ["aligned", "unaligned", "single"]),
    ("--direction", "AB", ["AtoB", "BtoA"]),
    ("--preprocess", "resize", ["resize_and_crop", "scale_width", "none"]),
]


@pytest.mark.parametrize("flag,value,choices", MISSPELT, ids=[m[0] for m in MISSPELT])
def test_misspelt_choice_exits_2_listing_valid_choices(capsys, flag, value, choices):
    with pytest.raises(SystemExit) as exc:
        parse_train(flag, value)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert flag in err and value in err
    for choice in choices:
        assert choice in err


def test_unknown_flag_exits_2(capsys):
    with pytest.raises(SystemExit) as exc:
        parse_train("--lamda_A", "5")
    assert exc.value.code == 2
    assert "--lamda_A" in capsys.readouterr().err


# ---------------------------------------------------------------- whole names only
# Every program of the repository whose `main` parses a command line.
ENTRY_POINTS = ["train.py", "test.py", *(f"{folder}/{path.name}" for folder in ("scripts", "dev")
                                        for path in sorted((ROOT / folder).glob("*.py"))
                                        if "\ndef main(" in path.read_text())]


def parsers_that_parse(build: Callable[[], object], monkeypatch: pytest.MonkeyPatch,
                       printed: io.StringIO | None = None) -> list[argparse.ArgumentParser]:
    """Every ArgumentParser that reads a command line while `build()` runs (argparse's `parse_args` reads
    through `parse_known_args`); --help's exit ends `build()`. What it prints goes to `printed`."""
    seen: list[argparse.ArgumentParser] = []
    parse_known_args = argparse.ArgumentParser.parse_known_args

    def recording(parser, args=None, namespace=None):
        seen.append(parser)
        return parse_known_args(parser, args, namespace)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", recording)
    with contextlib.redirect_stdout(printed or io.StringIO()), contextlib.suppress(SystemExit):
        build()
    return seen


def help_and_parsers(script: str, args: list[str], monkeypatch: pytest.MonkeyPatch
                     ) -> tuple[str, list[argparse.ArgumentParser]]:
    """What `script args --help` prints (its main run in this process: an in-process parse), and every parser
    that read the command line on the way (the model's probe and the pre-parse of train.py and test.py too)."""
    main = load_script(script).main
    command = [*args, "--help"]
    monkeypatch.setattr(sys, "argv", [script, *command])  # a main that reads sys.argv itself
    printed = io.StringIO()
    parsers = parsers_that_parse(lambda: main(command) if inspect.signature(main).parameters else main(), monkeypatch,
                                 printed)
    return printed.getvalue(), parsers


def flags_missing_from_help(help_text: str, parsers: list[argparse.ArgumentParser]) -> list[str]:
    """The flags some parser accepts that the help does not list where argparse lists a flag (at the start of
    an option line: "  -h, --help", "  --epoch EPOCH"): hidden ones (help=argparse.SUPPRESS) among them.
    (argparse keeps a parser's flags only in its `_actions`.)"""
    accepted = dict.fromkeys(flag for parser in parsers for action in parser._actions for flag in action.option_strings)
    return [flag for flag in accepted
            if not re.search(rf"^ +(?:-\S+(?: \S+)*, )*{re.escape(flag)}(?=[ ,]|$)", help_text, re.M)]


@pytest.mark.parametrize("script", ENTRY_POINTS)
def test_help_of_every_program_lists_every_flag_it_accepts_and_no_parser_takes_an_abbreviation(script, monkeypatch):
    """A user learns a program's flags from its `--help` (every refusal of a flag points there), so it lists
    each flag any of the program's parsers accepts; and none accepts an abbreviation, which would change
    meaning as flags are added."""
    help_text, parsers = help_and_parsers(script, [], monkeypatch)
    assert parsers and help_text.startswith("usage:")
    assert flags_missing_from_help(help_text, parsers) == []
    assert [parser.allow_abbrev for parser in parsers] == [False] * len(parsers)


@pytest.mark.parametrize("script", ["train.py", "test.py", "scripts/export.py", "scripts/demo_report.py"])
def test_help_after_a_model_or_dataset_mode_lists_the_flags_they_add(script, monkeypatch):
    """The flags a model or a dataset mode adds exist once it is chosen: `train.py --model sb --help` lists
    them, as a user would ask."""
    selections = [["--model", name] for name in models.builtin_model_names()
                  if not (script == "train.py" and name == "test")]  # the test model does not train
    selections += [["--dataset_mode", name] for name in data.builtin_dataset_names()
                   if not (script == "train.py" and not data.find_dataset_using_name(name).has_targets)]
    for selection in selections:
        help_text, parsers = help_and_parsers(script, selection, monkeypatch)
        assert help_text.startswith("usage:"), selection
        assert flags_missing_from_help(help_text, parsers) == [], selection


@pytest.mark.parametrize("options_cls", [TrainOptions, TestOptions], ids=["train", "test"])
def test_option_parsers_of_every_model_take_whole_flag_names_only(options_cls, monkeypatch):
    for model in models.builtin_model_names():
        if options_cls.isTrain and model == "test":
            continue
        argv = ["--dataroot", "x", "--model", model]
        built = []
        parsers = parsers_that_parse(lambda: built.append(options_cls().build_parser(argv)), monkeypatch)
        assert [parser.allow_abbrev for parser in (*parsers, *built)] == [False] * (len(parsers) + 1), model


@pytest.mark.parametrize("mode", ["sb", "FastCUT"])
def test_unsb_mode_flag_is_not_taken_for_model(mode, capsys):
    """`--model cut --mode X`: --mode is UNSB's flag (--model sb), not an abbreviation of --model; CUT's parser
    refuses it by its name, in one paragraph, exit status 2."""
    with pytest.raises(SystemExit) as exc:
        parse_train("--model", "cut", "--mode", mode)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: unrecognized arguments: --mode ")
    assert "Traceback" not in err and "--model" not in err.split("`")[0]


def test_abbreviated_flag_is_refused_by_its_name(capsys):
    with pytest.raises(SystemExit) as exc:
        parse_train("--batch", "2")  # --batch_size
    assert exc.value.code == 2
    assert capsys.readouterr().err.startswith("error: unrecognized arguments: --batch 2.")


# ---------------------------------------------------------------- ranges
# Numeric flags whose every value means something; all others are range-checked when parsed.
UNBOUNDED = {"seed": "any integer seeds the generators", "display_id": "0 or less disables visdom"}


def numeric_flags_without_range(options_cls) -> set[str]:
    unchecked = set()
    for model in models.builtin_model_names():
        for dataset in data.DATASETS:
            argv = ["--dataroot", "x", "--model", model, "--dataset_mode", dataset]
            try:
                _, actions = built_with_actions(lambda: options_cls().build_parser(argv))
            except SystemExit:  # e.g. --model test cannot be trained
                continue
            unchecked |= {action.option_strings[0] for action in actions
                          if action.type in (int, float) and action.dest not in UNBOUNDED}
    return unchecked


@pytest.mark.parametrize("options_cls", [TrainOptions, TestOptions], ids=["train", "test"])
def test_every_numeric_flag_of_every_model_and_dataset_is_range_checked(options_cls):
    assert numeric_flags_without_range(options_cls) == set()


@pytest.mark.parametrize("flag,value,allowed", [
    ("--batch_size", "0", "an integer >= 1"), ("--lr", "nan", "a number > 0"), ("--beta1", "1", "< 1"),
    ("--display_port", "70000", "<= 65535"), ("--n_epochs", "-1", "an integer >= 0"),
    ("--max_dataset_size", "2.5", "expected an integer >= 1"), ("--lambda_A", "-1", "a number >= 0"),
])
def test_value_out_of_range_exits_2_with_one_line_naming_flag_and_range(capsys, flag, value, allowed):
    with pytest.raises(SystemExit) as exc:
        parse_train(flag, value)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: argument {flag}: ")
    assert allowed in err and repr(value) in err


def test_reference_readme_norm_names_for_ddp_are_accepted():
    assert parse_train("--norm", "sync_batch").norm == "syncbatch"
    assert parse_train("--norm", "sync_instance").norm == "instance"  # no cross-image statistics to share


# ---------------------------------------------------------------- deprecated --gpu_ids
def test_gpu_ids_minus_one_means_cpu_with_one_line_warning(capsys):
    opt = parse_train("--gpu_ids", "-1")
    assert opt.device == "cpu"
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "--device" in err and "--gpu_ids" in err


@pytest.fixture
def cuda_machine(monkeypatch):
    """As on a machine with a GPU (without one, --gpu_ids 0 is refused: tests/test_bad_input.py)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


def test_gpu_ids_several_gpus_points_to_torchrun(capsys, cuda_machine):
    opt = parse_train("--gpu_ids", "0,1")
    assert opt.device == "cuda"
    assert "torchrun" in capsys.readouterr().err


def test_gpu_ids_single_gpu_means_cuda_without_torchrun_hint(capsys, cuda_machine):
    assert parse_train("--gpu_ids", "0").device == "cuda"
    err = capsys.readouterr().err
    assert "--device" in err and "torchrun" not in err


def test_without_gpu_ids_there_is_no_warning(capsys):
    assert parse_train().device == "auto"
    assert capsys.readouterr().err == ""


# ---------------------------------------------------------------- read-only, suffix
def test_options_are_read_only_after_parsing():
    opt = parse_train()
    with pytest.raises(AttributeError):
        opt.lr = 0.1
    with pytest.raises(AttributeError):
        opt.brand_new = 1
    assert opt.lr == 0.0002


def test_suffix_extends_name_with_formatted_options():
    assert parse_train("--suffix", "{model}_{netG}").name == "experiment_name_cycle_gan_resnet_9blocks"
    opt = parse_train("--name", "facades", "--model", "pix2pix", "--suffix", "{model}_{netG}_size{load_size}")
    assert opt.name == "facades_pix2pix_unet_256_size286"
    assert parse_train("--name", "facades").name == "facades"


# ---------------------------------------------------------------- saved options
def test_save_options_writes_text_and_json_with_the_values(tmp_path):
    opt = parse_train("--checkpoints_dir", str(tmp_path), "--name", "run1", "--ngf", "16", "--lr", "0.001")
    save_options(opt)
    text = (tmp_path / "run1" / "train_opt.txt").read_text()
    lines = {line.split(":", 1)[0].strip(): line.split(":", 1)[1] for line in text.splitlines() if ":" in line}
    assert lines["ngf"].split()[0] == "16"
    assert "[default: 64]" in lines["ngf"]  # changed values show the reference's default
    assert lines["ndf"].split()[0] == "64"
    assert "default" not in lines["ndf"]
    assert lines["lr"].split()[0] == "0.001"
    saved = json.loads((tmp_path / "run1" / "train_opt.json").read_text())
    assert saved["ngf"] == 16 and saved["lr"] == 0.001 and saved["name"] == "run1"
    assert saved["model"] == "cycle_gan" and saved["lambda_A"] == 10.0
    assert "_frozen" not in saved and "_defaults" not in saved


def test_save_options_at_test_time_writes_test_opt(tmp_path):
    opt = parse_test("--checkpoints_dir", str(tmp_path), "--name", "run2")
    save_options(opt)
    saved = json.loads((tmp_path / "run2" / "test_opt.json").read_text())
    assert saved["phase"] == "test" and saved["model"] == "test"
    assert (tmp_path / "run2" / "test_opt.txt").exists()


@pytest.mark.parametrize("name, suggested", [("", "experiment_name"), (".", "experiment_name"),
                                             ("..", "experiment_name"), ("runs/facades", "runs_facades"),
                                             ("/tmp/x", "tmp_x")])
def test_a_run_name_that_is_not_one_folder_name_is_refused_naming_it(capsys, tmp_path, name, suggested):
    """--name '' would write the run into --checkpoints_dir itself; '..' or a path somewhere else."""
    for options in (TrainOptions, TestOptions):
        with pytest.raises(SystemExit) as exc:
            options().parse(["--dataroot", str(tmp_path), "--name", name, "--checkpoints_dir", str(tmp_path / "ck")])
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"--name: {name!r}" in err and f"--name {suggested}" in err, err
    assert not (tmp_path / "ck").exists()


@pytest.mark.parametrize("parse, flags, named", [
    (parse_test, ["--sync"], ("--sync", "--n_samples")),
    (parse_test, ["--tile_overlap", "32"], ("--tile_overlap", "--tile")),
    (parse_test, ["--fid_reference", "."], ("--fid_reference", "--eval_metrics")),
    (parse_train, ["--lr_decay_iters", "5"], ("--lr_decay_iters", "--lr_policy step")),
    (parse_train, ["--val_max_images", "5"], ("--val_max_images", "--val_freq")),
    (parse_train, ["--display_id", "0", "--display_env", "x"], ("--display_env", "--display_id")),
    (parse_train, ["--compile_probe", "5"], ("--compile_probe", "--compile")),
], ids=["sync", "tile_overlap", "fid_reference", "lr_decay_iters", "val_max_images", "display_env", "compile_probe"])
def test_a_flag_that_does_nothing_without_another_is_named_once_with_both(parse, flags, named, capsys):
    parse(*flags)
    (warning,) = capsys.readouterr().err.strip().splitlines()
    assert warning.startswith(f"warning: {named[0]} ") and f"but {named[1]} is off" in warning
    assert f"add {named[1]} or drop {named[0]}" in warning


@pytest.mark.parametrize("parse, flags", [
    (parse_test, ["--sync", "--n_samples", "2"]),
    (parse_test, ["--tile_overlap", "32", "--tile", "256"]),
    (parse_train, ["--lr_decay_iters", "5", "--lr_policy", "step"]),
    (parse_train, ["--val_max_images", "5", "--val_freq", "1"]),
    (parse_train, []),
])
def test_flags_used_with_what_they_need_or_left_at_their_default_give_no_warning(parse, flags, capsys):
    parse(*flags)
    assert "warning" not in capsys.readouterr().err


# ----------------------------------------------------------------------------- UNSB's and CUT's parsers
# Every flag of their train and test option classes and of their sb/cut models' modify_commandline_options
# (cyclomon/UNSB, taesungp/contrastive-unpaired-translation), with a value in their form (their default,
# None: a bare switch), written out from their code. Flags both hold are listed once.
THEIR_FLAGS = [
    ("--name", "experiment_name"), ("--easy_label", "experiment_name"), ("--gpu_ids", "-1"),
    ("--checkpoints_dir", "./checkpoints"), ("--input_nc", "3"), ("--output_nc", "3"), ("--ngf", "64"),
    ("--ndf", "64"), ("--n_layers_D", "3"), ("--normG", "instance"), ("--normD", "instance"),
    ("--init_type", "xavier"), ("--init_gain", "0.02"), ("--no_dropout", "True"), ("--no_dropout", None),
    ("--no_antialias", None), ("--no_antialias_up", None), ("--dataset_mode", "unaligned"),
    ("--direction", "AtoB"), ("--direction", "B2A"), ("--serial_batches", None), ("--num_threads", "4"),
    ("--batch_size", "1"), ("--load_size", "286"), ("--crop_size", "256"), ("--max_dataset_size", "100"),
    ("--preprocess", "resize_and_crop"), ("--no_flip", None), ("--display_winsize", "256"),
    ("--random_scale_max", "3.0"), ("--epoch", "latest"), ("--verbose", None), ("--suffix", ""),
    ("--stylegan2_G_num_downsampling", "1"), ("--lambda_GAN", "1.0"), ("--lambda_NCE", "1.0"),
    ("--nce_idt", "False"), ("--nce_idt", None), ("--nce_layers", "0,4,8,12,16"),
    ("--nce_includes_all_negatives_from_minibatch", "False"), ("--netF", "mlp_sample"), ("--netF_nc", "256"),
    ("--nce_T", "0.07"), ("--num_patches", "256"), ("--flip_equivariance", "False"),
]
UNSB_ONLY = [("--mode", "sb"), ("--num_timesteps", "5"), ("--embedding_dim", "512"), ("--netD", "basic_cond"),
             ("--netE", "basic_cond"), ("--netG", "resnet_9blocks_cond"), ("--embedding_type", "positional"),
             ("--style_dim", "512"), ("--n_mlp", "3"), ("--std", "0.25"), ("--tau", "0.01"), ("--lmda", "0.1"),
             ("--lambda_SB", "0.1")]
CUT_ONLY = [("--CUT_mode", "CUT"), ("--netD", "basic"), ("--netG", "resnet_9blocks")]
THEIR_TRAIN_FLAGS = [
    ("--display_freq", "400"), ("--display_ncols", "4"), ("--display_id", "0"), ("--display_server", "http://localhost"),
    ("--display_env", "main"), ("--display_port", "8097"), ("--update_html_freq", "1000"), ("--print_freq", "100"),
    ("--no_html", None), ("--save_latest_freq", "5000"), ("--save_epoch_freq", "5"), ("--evaluation_freq", "5000"),
    ("--save_by_iter", None), ("--continue_train", None), ("--epoch_count", "1"), ("--phase", "train"),
    ("--pretrained_name", "other_run"), ("--n_epochs", "200"), ("--n_epochs_decay", "200"), ("--beta1", "0.5"),
    ("--beta2", "0.999"), ("--lr", "0.0002"), ("--gan_mode", "lsgan"), ("--pool_size", "50"),
    ("--lr_policy", "linear"), ("--lr_decay_iters", "50"),
]
THEIR_TEST_FLAGS = [("--results_dir", "./results/"), ("--phase", "test"), ("--eval", None), ("--num_test", "50")]


@pytest.mark.parametrize("options", [TrainOptions, TestOptions])
@pytest.mark.parametrize("model, own", [("sb", UNSB_ONLY), ("cut", CUT_ONLY)])
def test_every_flag_of_unsbs_and_cuts_parsers_is_accepted_or_refused_in_one_paragraph(options, model, own, capsys):
    phase = THEIR_TRAIN_FLAGS if options is TrainOptions else THEIR_TEST_FLAGS
    refused = []
    for flag, value in [*THEIR_FLAGS, *own, *phase]:
        capsys.readouterr()  # a note of the flag before
        try:
            options().parse(["--dataroot", "unused", "--model", model, flag, *([] if value is None else [value])])
        except SystemExit as stopped:
            err = capsys.readouterr().err.strip().splitlines()
            assert stopped.code == 2 and len(err) == 1 and err[0].startswith(f"error: argument {flag}:"), err
            refused.append(flag)
    # a run continues from its own folder here: another run's weights are refused, saying how to use them;
    # training UNSB with --no_antialias is refused: its code's branch builds no usable network
    training = options is TrainOptions
    assert refused == (["--no_antialias"] if model == "sb" and training else []) + \
        (["--pretrained_name"] if training else [])


def test_unsbs_spellings_of_direction_and_dropout_mean_ours():
    assert parse_train("--model", "sb", "--direction", "B2A").direction == "BtoA"
    assert parse_test("--model", "sb", "--direction", "A2B").direction == "AtoB"
    assert parse_train("--model", "sb").no_dropout and parse_train("--model", "sb", "--no_dropout", "True").no_dropout
    dropout = parse_train("--model", "sb", "--ngf", "4", "--no_dropout", "False")
    generator = models.networks.build_generator(dropout, 3, 3)
    assert not dropout.no_dropout and any(isinstance(layer, torch.nn.Dropout) for layer in generator.modules())
    assert not parse_train("--model", "pix2pix").no_dropout
    assert parse_train("--model", "pix2pix", "--no_dropout").no_dropout  # bare, as the reference's
    assert parse_train().beta2 == 0.999 and parse_train("--beta2", "0.99").beta2 == 0.99
