"""Every network family against every model: the pairing trains a step, or the options refuse it while
they parse (exit 2, one paragraph naming the flag and the network), never a TypeError at the first
forward after training has begun. A family declares what its forward takes beside the image (a time
index, a code: `takes`), a model how it calls the network of each flag (`network_calls`); a refusal
names the models the network runs in and the choices that run in this one, and each is accepted there.

One process, no files: the families a model accepts are built and stepped once each (paired up, one
step for a generator and a discriminator), at the smallest size their networks take, with 4 filters and
one image (two for BicycleGAN, which halves its batch)."""
from __future__ import annotations

import contextlib
import io
import math
import re

import torch

import models
from conftest import inference_nets, run_in_process, train_on
from helpers import save_run
from models import networks
from options.test_options import TestOptions
from options.train_options import TrainOptions
from util.distributed import DistContext
from util.seeding import seed_everything

SMALL = ["--dataroot", "unused", "--ngf", "4", "--ndf", "4"]
# Each model's own widths and counts at their smallest; BicycleGAN encodes half of each batch and samples
# the other half; its encoder and U-Net at 128 px
EXTRA = {"bicycle_gan": ["--batch_size", "2", "--nef", "4", "--netE", "resnet_128", "--netG", "unet_128"],
         "cut": ["--netF_nc", "8", "--num_patches", "16"],
         "sb": ["--netF_nc", "8", "--num_patches", "16", "--num_timesteps", "2"]}
VOLUMES = ["--dataset_mode", "aligned_volume", "--data_range", "-1", "1"]
_parses: dict[tuple, tuple[object | None, str]] = {}


def parsed(options: type, *args: str) -> tuple[object | None, str]:
    """The options `args` parse into, or None and the refusal printed (argparse's exit 2 is required)."""
    key = (options, *args)
    if key not in _parses:
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                _parses[key] = options().parse([*SMALL, *args]), ""
        except SystemExit as stop:
            assert stop.code == 2, err.getvalue()
            _parses[key] = None, err.getvalue().strip()
    return _parses[key]


def families(role: str) -> list[str]:
    """One name for each family of `role`: the one taking the smallest images (on a tie the last listed,
    the shallower); and for generators, two of the test suite's own: one that declares nothing (the image
    alone), one that takes a latent code."""
    opt, _ = parsed(TrainOptions)
    by_family: dict[type, list[str]] = {}
    for name, family in networks.builtin_families()[role].items():
        by_family.setdefault(family, []).append(name)
    chosen = [min(reversed(names), key=lambda name: networks.family_of(name, role).size_rule(opt).minimum)
              for names in by_family.values()]
    own = ["custom_networks.dilated_net", "custom_networks.latent_net"] if role == networks.GENERATOR else []
    return chosen + own


def model_args(model: str, *context: str) -> list[str]:
    return ["--model", model, *EXTRA.get(model, []), *context]


def smallest_size(opt) -> int:
    """The smallest side that every network the model calls takes."""
    calls = models.find_model_using_name(opt.model).network_calls
    rules = [networks.family_of(getattr(opt, flag), call.role).size_rule(opt) for flag, call in calls.items()]
    multiple = math.lcm(*(rule.multiple for rule in rules))
    return math.ceil(max(rule.minimum for rule in rules) / multiple) * multiple


def batch(opt) -> dict:
    """One batch of random images (volumes) of the smallest size, with the channels the options say."""
    generator = torch.Generator().manual_seed(0)
    shape = (smallest_size(opt),) * (3 if "volume" in opt.dataset_mode else 2)

    def image(channels: int) -> torch.Tensor:
        return torch.rand(opt.batch_size, channels, *shape, generator=generator) * 2 - 1
    # A2: UNSB's second, independent input; each model reads what it needs
    return {"A": image(opt.input_nc), "B": image(opt.output_nc), "A2": image(opt.input_nc),
            "A_paths": ["a.png"] * opt.batch_size, "B_paths": ["b.png"] * opt.batch_size}


def train_one_step(opt) -> dict[str, float]:
    seed_everything(0)
    with contextlib.redirect_stdout(io.StringIO()):
        model = models.create_model(opt, DistContext())
        first = batch(opt)
        model.setup(opt, first_batch=first)
        train_on(model, first)
    return model.get_current_losses()


def translate_once(opt) -> dict[str, torch.Tensor]:
    with contextlib.redirect_stdout(io.StringIO()):
        model = models.create_model(opt, DistContext())
        model.set_input(batch(opt))
        model.test(inference_nets(model))
    return model.get_current_visuals()


def walk(options: type, walked: list[str], *context: str, run=train_one_step) -> tuple[list[tuple], dict]:
    """Every family of each role against each flag of that role that the models `walked` call (at test
    time their generators' and encoders'), in `context`: the families accepted, paired up across a model's
    flags so that each runs once (`run`: a training step, or a translation), and the refusals by (model,
    flag, name). Returns the networks run, as (model, (flag, name), ...), and the refusals."""
    ran, refused = [], {}
    for model in walked:
        calls = {flag: call for flag, call in models.find_model_using_name(model).network_calls.items()
                 if options is TrainOptions or call.role in (networks.GENERATOR, networks.ENCODER)}
        accepted = {}
        for flag, call in calls.items():
            accepted[flag] = []
            for name in families(call.role):
                opt, refusal = parsed(options, *model_args(model, *context), f"--{flag}", name)
                if opt is None:
                    refused[model, flag, name] = refusal
                else:
                    accepted[flag].append(name)
        for i in range(max(map(len, accepted.values()))):
            chosen = [(flag, names[i % len(names)]) for flag, names in accepted.items() if names]
            opt, refusal = parsed(options, *model_args(model, *context), *[arg for flag, name in chosen
                                                                            for arg in (f"--{flag}", name)])
            assert opt is not None, f"each accepted alone, {chosen} together are refused: {refusal}"
            outcome = run(opt)
            assert outcome and all(torch.isfinite(torch.as_tensor(value)).all() for value in outcome.values())
            ran.append((model, *chosen))
    return ran, refused


def listed(names: str) -> list[str]:
    return [name for part in names.split(", ") for name in part.split(" or ")]


def choices_offered(refusal: str) -> list[str]:
    """The networks a refusal offers instead: "choose --netG a, b or c" or "choose a 3-D generator: a, b"."""
    found = re.search(r"choose --\w+ (.+?), or a family", refusal) or \
        re.search(r"choose a \d-D \w+: (.+?) \(docs", refusal)
    return listed(found.group(1)) if found else []


def models_named(refusal: str, flag: str) -> list[tuple[str, list[str]]]:
    """The models a refusal says the network runs in, each with its flags that take it: "runs in --model
    a, b or c", the same flag; "--model sb (as --netD or --netE)", others."""
    found = re.search(r" runs in --model (.+?)\. ", refusal)
    named = []
    for entry in re.split(r", | or (?![^()]*\))", found.group(1)) if found else []:
        model, _, flags = entry.partition(" (as ")
        named.append((model, re.findall(r"--(\w+)", flags) or [flag]))
    return named


def assert_refused_by_name(refused: dict[tuple, str], options: type, *context: str) -> None:
    """Each refusal is one paragraph naming the flag and the network; what it offers instead and the
    models it names are each accepted where it says."""
    for (model, flag, name), refusal in refused.items():
        (line,) = refusal.splitlines()
        assert line.startswith(f"error: argument --{flag}: --{flag} {name} "), line
        for choice in choices_offered(line):
            opt, again = parsed(options, *model_args(model, *context), f"--{flag}", choice)
            assert opt is not None, f"{line}\noffers {choice}, which is refused:\n{again}"
        for other, flags in models_named(line, flag):
            for other_flag in flags:
                opt, again = parsed(options, *model_args(other, *context), f"--{other_flag}", name)
                assert opt is not None, f"{line}\nnames --model {other} --{other_flag}, which refuses it:\n{again}"


def networks_run(ran: list[tuple]) -> set[tuple[str, str, str]]:
    return {(model, flag, name) for model, *chosen in ran for flag, name in chosen}


TRAINED = [name for name in models.builtin_model_names() if name != "test"]  # test.py's model trains nothing


def test_every_family_trains_a_step_in_every_model_or_is_refused_by_name_while_parsing():
    ran, refused = walk(TrainOptions, TRAINED)
    assert_refused_by_name(refused, TrainOptions)
    run = networks_run(ran)
    assert {model for model, _, _ in run} == set(TRAINED)
    # what ended in a TypeError at the first step: UNSB's time-conditioned networks where the image comes alone
    for model in ("cut", "pix2pix", "cycle_gan", "bicycle_gan"):
        assert "time index" in refused[model, "netG", "resnet_9blocks_cond"]
        assert "--model sb" in refused[model, "netD", "basic_cond"]
    assert {("sb", "netG", "resnet_9blocks_cond"), ("sb", "netD", "basic_cond"), ("sb", "netE", "basic_cond"),
            ("bicycle_gan", "netG", "custom_networks.latent_net"), ("pix2pix", "netG", "custom_networks.dilated_net")
            } <= run
    assert any(model == "bicycle_gan" and flag == "netE" for model, flag, _ in run)  # its encoder family
    assert "latent code" in refused["pix2pix", "netG", "custom_networks.latent_net"]
    assert "layers" in refused["cut", "netG", "unet_128"]  # PatchNCE reads the generator's layers


def test_every_3d_family_trains_a_step_on_volumes_in_every_model_that_takes_volumes():
    takes_volumes = [model for model in TRAINED if parsed(TrainOptions, *model_args(model, *VOLUMES))[0] is not None]
    assert {"cut", "cycle_gan", "pix2pix"} <= set(takes_volumes)
    ran, refused = walk(TrainOptions, takes_volumes, *VOLUMES)
    assert_refused_by_name(refused, TrainOptions, *VOLUMES)
    opt, _ = parsed(TrainOptions, *VOLUMES)
    three_d = {name for role in (networks.GENERATOR, networks.DISCRIMINATOR) for name in families(role)
               if networks.family_of(name, role).size_rule(opt).dims == 3}
    assert three_d == {name for _, _, name in networks_run(ran)} & three_d


def test_test_py_translates_with_every_generator_it_accepts_and_refuses_the_others_by_name(tmp_path):
    """test.py's options refuse a generator its model cannot call, as train.py's do (UNSB's under --model
    test and --model cut among them); every one they accept translates an image."""
    context = ["--checkpoints_dir", str(tmp_path)]
    ran, refused = walk(TestOptions, models.builtin_model_names(), *context, run=translate_once)
    assert_refused_by_name(refused, TestOptions, *context)
    assert {model for model, _, _ in networks_run(ran)} == set(models.builtin_model_names())
    for model in ("test", "cut"):
        assert "--model sb" in refused[model, "netG", "resnet_9blocks_cond"]


def test_test_py_names_the_model_a_checkpoint_needs_so_that_passing_the_flags_it_names_translates(
        unpaired_root, tmp_path, capsys):
    """A UNSB run tested with --model cut: its generator takes a time index, which CUT never gives, so the
    flags test.py names (architecture.json's) include --model sb, and with them the run translates."""
    save_run(tmp_path, "unsb", ["--model", "sb", "--ngf", "4", "--netF_nc", "8", "--num_timesteps", "2"])
    command = ["--dataroot", str(unpaired_root), "--checkpoints_dir", str(tmp_path), "--name", "unsb",
               "--results_dir", str(tmp_path / "results"), "--load_size", "32", "--crop_size", "32", "--num_test", "1",
               "--model", "cut"]
    refused = run_in_process("test.py", *command, capsys=capsys)
    assert refused.returncode == 2
    advice = re.search(r"It was trained with (.+?); pass the same flags", refused.stderr).group(1).split()
    assert advice[:2] == ["--model", "sb"] and "resnet_9blocks_cond" in advice
    assert run_in_process("test.py", *command, *advice, capsys=capsys).returncode == 0


def test_export_takes_a_unsb_generators_weights_whatever_the_model_as_it_calls_the_generator_itself(
        tmp_path, capsys):
    """scripts/export.py calls the generator as its family says (a step and a code beside the image), never a
    model: test.py's --model test, which gives the image alone, does not refuse UNSB's generator there."""
    run = save_run(tmp_path, "unsb", ["--model", "sb", "--ngf", "4", "--netF_nc", "8", "--num_timesteps", "2"])
    exported = run_in_process("scripts/export.py", "--weights", str(run / "latest_net_G.pth"), "--netG",
                              "resnet_9blocks_cond", "--ngf", "4", "--no_dropout", "--formats", "torchscript",
                              "--check_sizes", "32x32", capsys=capsys)
    assert exported.returncode == 0, exported.stderr
    assert (run / "latest_net_G.pt").is_file()
