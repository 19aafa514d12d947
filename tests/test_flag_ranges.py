"""Every numeric flag has its range, checked when it is parsed: the flags of train.py and test.py under every
built-in model, dataset mode and network family (the flags those add included), and of every script in
scripts/. A flag whose value decides how much is allocated (channels, widths, image sides, images or patches
at once, samples, windows) has an upper bound too, so that a mistyped number is refused in one paragraph
instead of asking for terabytes (tests/bad_sizes.py runs such values under a memory limit)."""
from __future__ import annotations

import argparse
import contextlib
import io

import pytest

from conftest import load_script
from util.flag_types import Bounded

# Flags that size an allocation: each must have an upper bound.
SIZES_AN_ALLOCATION = {
    "--input_nc", "--output_nc", "--ngf", "--ndf", "--nef", "--netF_nc", "--n_layers_D", "--num_D", "--num_Ds", "--nz",
    "--batch_size", "--accum_steps", "--pool_size", "--load_size", "--crop_size", "--display_winsize", "--tile",
    "--tile_overlap", "--n_samples", "--aspect_ratio", "--patches_per_volume", "--window_batch", "--num_patches",
    "--seed", "--size", "--n_train", "--n_test", "--width", "--height", "--kid_subsets",
}
# Types that check a range of their own (not `Bounded`): what each accepts is in its docstring.
OWN_RANGES = {"patch_size", "hw_sizes", "port_number"}


def numeric_actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """The flags of `parser` that take a number (by their type, or a numeric default), by option string."""
    found = {}
    for action in parser._actions:
        if not action.option_strings or action.choices is not None or action.nargs == 0:
            continue
        numeric_type = action.type in (int, float) or isinstance(action.type, Bounded)
        numeric_default = isinstance(action.default, (int, float)) and not isinstance(action.default, bool)
        if numeric_type or numeric_default or getattr(action.type, "__name__", "") in OWN_RANGES:
            found[action.option_strings[0]] = action
    return found


def option_parsers():
    """(what, parser) for train.py and test.py under every built-in model, dataset mode and network family."""
    import data
    import models
    from models import networks
    from options.test_options import TestOptions
    from options.train_options import TrainOptions

    for options in (TrainOptions(), TestOptions()):
        variants = [["--model", name] for name in models.builtin_model_names()
                    if not (options.isTrain and name == "test")]
        variants += [["--dataset_mode", name] for name in data.builtin_dataset_names()]
        variants += [["--netG", name] for name in networks.generators()]
        variants += [["--netD", name] for name in networks.discriminators()]
        for variant in variants:
            yield f"{type(options).__name__} {' '.join(variant)}", options.build_parser(["--dataroot", "x", *variant])


SCRIPTS = ["scripts/translate.py", "scripts/export.py", "scripts/evaluate.py", "scripts/make_demo_dataset.py",
           "scripts/render_html.py", "scripts/visdom_server.py", "scripts/split_dataset.py",
           "scripts/combine_A_and_B.py", "scripts/make_dataset_aligned.py", "scripts/prepare_cityscapes_dataset.py",
           "scripts/data_range.py", "scripts/plot_losses.py", "scripts/demo_report.py"]  # demo_report: test.py's too


def script_parser(script: str, monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    """The parser `script`'s main builds: the one asked to print its --help."""
    seen = []
    monkeypatch.setattr(argparse.ArgumentParser, "print_help", lambda parser, file=None: seen.append(parser))
    main = load_script(script).main
    with contextlib.redirect_stdout(io.StringIO()), pytest.raises(SystemExit):
        main(["--help"])
    return seen[-1]


def range_problems(what: str, parser: argparse.ArgumentParser) -> list[str]:
    problems = []
    for flag, action in numeric_actions(parser).items():
        own = getattr(action.type, "__name__", "") in OWN_RANGES
        if not (isinstance(action.type, Bounded) or own):
            problems.append(f"{what}: {flag} takes a number without a range (type {action.type!r})")
        elif flag in SIZES_AN_ALLOCATION and not own and action.type.high is None:
            problems.append(f"{what}: {flag} sizes an allocation but has no upper bound ({action.type.describe()})")
    return problems


def test_every_numeric_flag_of_train_and_test_under_every_model_mode_and_family_has_a_range():
    problems = sorted({problem for what, parser in option_parsers() for problem in range_problems(what, parser)})
    assert problems == []


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_numeric_flag_of_the_scripts_has_a_range(script, monkeypatch):
    assert range_problems(script, script_parser(script, monkeypatch)) == []


def test_the_sized_flags_named_here_exist():
    """A flag renamed or removed leaves SIZES_AN_ALLOCATION, rather than this test checking nothing."""
    import pytest as _pytest

    everywhere = set()
    for _, parser in option_parsers():
        everywhere.update(numeric_actions(parser))
    with _pytest.MonkeyPatch.context() as monkeypatch:
        for script in SCRIPTS:
            everywhere.update(numeric_actions(script_parser(script, monkeypatch)))
    assert SIZES_AN_ALLOCATION - everywhere == set()
