"""--compile keeps compiling only where it is faster: the first steps are timed eagerly and compiled,
the faster goes on, the user is told what was measured, and a continued run keeps the choice.

The decision is tested with a fake clock; train.py's wiring with a "compiler" that makes every
network slower (no inductor needed), so that what a user on a slow-compiling CPU sees is shown.
"""
from __future__ import annotations

import time

import pytest
import torch
from torch import nn

from conftest import load_script
from models import create_model, networks
from models.training.compile_probe import COMPILING_STEPS, CompileProbe, keep_compiled
from models.training.engine import TrainingEngine
from options.train_options import TrainOptions
from util.distributed import DistContext


class FakeClock:
    """Steps take `eager` or `compiled` seconds."""

    def __init__(self, eager: float, compiled: float) -> None:
        self.eager, self.compiled, self.now = eager, compiled, 0.0

    def __call__(self) -> float:
        return self.now


def probe_run(eager: float, compiled: float, probe_steps: int = 3, steps: int = 12):
    """`steps` training steps driven as the training engine drives the probe: each runs the networks
    `compiled_next()` names and takes that variant's time. Returns the probe, its messages and which
    variant each step ran."""
    messages = []
    clock = FakeClock(eager, compiled)
    probe = CompileProbe.for_run(True, probe_steps, None, messages.append)
    probe.clock = clock
    ran_compiled = []
    for _ in range(steps):
        compiled_now = probe.compiled_next()
        ran_compiled.append(compiled_now)
        start = probe.clock()
        clock.now += clock.compiled if compiled_now else clock.eager
        probe.record(probe.clock() - start)
    return probe, messages, ran_compiled


def test_a_compiled_step_slower_than_eager_sends_the_run_on_eagerly_and_says_why():
    probe, messages, ran_compiled = probe_run(eager=4.67, compiled=10.6)
    first_compiled = 1 + 3
    decided_after = first_compiled + COMPILING_STEPS + 3
    assert ran_compiled[:first_compiled] == [False] * first_compiled  # one untimed step, 3 timed
    assert ran_compiled[first_compiled:decided_after] == [True] * (decided_after - first_compiled)
    assert ran_compiled[decided_after:] == [False] * (len(ran_compiled) - decided_after)
    assert probe.choice is False
    assert len(messages) == 1
    assert "10.600 s against 4.670 s eager" in messages[0] and "0.44x" in messages[0]
    assert "without compiling" in messages[0] and "--compile_probe 0" in messages[0]


@pytest.mark.parametrize("compiled", [0.5, 1.04])
def test_a_compiled_step_as_fast_or_faster_keeps_the_run_compiled(compiled):
    probe, messages, ran_compiled = probe_run(eager=1.0, compiled=compiled)
    assert probe.choice is True
    assert all(ran_compiled[1 + 3:])
    assert "the run stays compiled" in messages[0]


def test_the_noise_margin_is_five_percent():
    assert keep_compiled(1.0, 1.05) and not keep_compiled(1.0, 1.06)


def test_without_compile_with_probe_zero_or_a_recorded_choice_nothing_is_timed():
    without = CompileProbe.for_run(False, 3, None, print)
    assert without.finished and without.choice is None and not without.compiled_next()
    at_once = CompileProbe.for_run(True, 0, None, print)
    assert at_once.finished and at_once.choice is True and at_once.compiled_next()
    continued = CompileProbe.for_run(True, 3, False, print)  # the choice of the training state it continues
    assert continued.finished and not continued.compiled_next()


class SlowWrapper(nn.Module):
    """Stands in for torch.compile on a CPU where compiling makes every network slower."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self._orig_mod = net

    def forward(self, *args, **kwargs):
        time.sleep(0.05)
        return self._orig_mod(*args, **kwargs)


def test_use_compiled_switches_every_network_and_the_choice_is_saved_and_restored(tmp_path, monkeypatch):
    monkeypatch.setattr(networks, "compile_network", lambda net, name: SlowWrapper(net))
    opt = TrainOptions().parse(["--dataroot", "unused", "--model", "pix2pix", "--netG", "resnet_6blocks", "--ngf", "4",
                                "--ndf", "4", "--compile", "--compile_probe", "0", "--checkpoints_dir", str(tmp_path),
                                "--name", "c"])
    model = create_model(opt, DistContext())
    model.setup(opt)
    engine = TrainingEngine(model, opt, DistContext())
    plain = dict(model.named_networks())
    assert all(isinstance(engine.variants.views()[name], SlowWrapper) for name in ("G", "D"))
    engine.variants.use_compiled(False)
    assert dict(engine.variants.views()) == plain  # eager: the model's own networks (no DDP in one process)
    assert dict(model.named_networks()) == plain  # the model's attributes never change
    state = {**engine.shared_training_state(), "compile_choice": False}  # as saved by a run that chose eager
    continued = create_model(opt, DistContext())
    continued.setup(opt, resume_state={"model": state, "options": None})
    resumed = TrainingEngine(continued, opt, DistContext(), {"model": state, "options": None})
    # eager from the start (a run continued at an epoch's end validates before its first step), no probing
    assert resumed.compile_choice is False and resumed.probe.finished
    assert dict(resumed.variants.views()) == dict(continued.named_networks())
    with resumed.inference_networks() as nets:
        assert not isinstance(nets.D, SlowWrapper) and not isinstance(nets.G.net, SlowWrapper)
    # continued without --compile, the run keeps the choice it made, for a later --compile continuation
    plain_opt = TrainOptions().parse(["--dataroot", "unused", "--model", "pix2pix", "--netG", "resnet_6blocks",
                                      "--ngf", "4", "--ndf", "4", "--checkpoints_dir", str(tmp_path), "--name", "c"])
    uncompiled = create_model(plain_opt, DistContext())
    uncompiled.setup(plain_opt, resume_state={"model": state, "options": None})
    assert TrainingEngine(uncompiled, plain_opt, DistContext(), {"model": state}).shared_training_state()[
        "compile_choice"] is False


def test_train_py_measures_keeps_the_faster_and_a_continued_run_keeps_the_choice(paired_root, tmp_path, monkeypatch,
                                                                                capsys):
    monkeypatch.setattr(networks, "compile_network", lambda net, name: SlowWrapper(net))
    train = load_script("train.py")
    args = ["--dataroot", str(paired_root), "--checkpoints_dir", str(tmp_path), "--name", "probe",
            "--model", "pix2pix", "--netG", "resnet_6blocks", "--ngf", "4", "--ndf", "4", "--load_size", "32",
            "--crop_size", "32", "--num_threads", "0", "--display_id", "0", "--no_html", "--no_progress",
            "--n_epochs", "1", "--n_epochs_decay", "1", "--compile", "--compile_probe", "1"]
    assert train.main(args) == 0
    out = capsys.readouterr().out
    assert out.count("--compile: a compiled training step took") == 1
    assert "slower on this machine), so the run goes on without compiling" in out
    state = torch.load(tmp_path / "probe" / "latest_train_state.pth", weights_only=True)
    assert state["model"]["compile_choice"] is False
    assert train.main(args[:-5] + ["--n_epochs_decay", "2", "--compile", "--continue_train"]) == 0
    assert "--compile: a compiled training step took" not in capsys.readouterr().out
