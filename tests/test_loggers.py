"""Your own logger without forking (`train.py --logger MODULE`): it receives every event the built-in
back ends receive, and a bad --logger value stops the run before anything is written."""
from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from recording_logger import EVENTS, RecordingLogger

TINY = ["--model", "pix2pix", "--direction", "BtoA", "--netG", "resnet_6blocks", "--ngf", "4", "--ndf", "4",
        "--load_size", "32", "--crop_size", "32", "--max_dataset_size", "4", "--n_epochs", "1", "--n_epochs_decay",
        "1", "--num_threads", "0", "--seed", "0", "--display_id", "0"]


def comparable(value):
    """`value` with arrays, tensors and dataclasses turned into things `==` compares fully."""
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, torch.Tensor):
        return ("tensor", value.tolist())
    if dataclasses.is_dataclass(value):
        return (type(value).__name__, comparable({f.name: getattr(value, f.name) for f in dataclasses.fields(value)}))
    if isinstance(value, Mapping):
        return tuple((key, comparable(item)) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(comparable(item) for item in value)
    return value


def spy_on(monkeypatch, backend_class: type, received: dict[str, list]) -> None:
    """Record every event an instance of `backend_class` receives, under the class's name."""
    for event in EVENTS:
        original = getattr(backend_class, event)

        def recording(self, *args, _original=original, _event=event):
            received.setdefault(type(self).__name__, []).append((_event, args))
            return _original(self, *args)

        monkeypatch.setattr(backend_class, event, recording)


@pytest.mark.slow
def test_logger_given_by_flag_receives_every_event_the_built_in_back_ends_receive(paired_root, tmp_path, monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    import train
    from util.display.console_backend import ConsoleBackend
    from util.display.html_backend import HtmlBackend
    from util.display.tensorboard_backend import TensorBoardBackend
    from util.display.wandb_backend import WandbBackend

    received: dict[str, list] = {}
    built_in = (ConsoleBackend, TensorBoardBackend, WandbBackend, HtmlBackend)
    for backend_class in built_in:
        spy_on(monkeypatch, backend_class, received)
    for name, value in {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": str(tmp_path / "wb")}.items():
        monkeypatch.setenv(name, value)
    RecordingLogger.instances.clear()
    code = train.main(["--dataroot", str(paired_root), "--name", "rec", "--checkpoints_dir", str(tmp_path), *TINY,
                       "--logger", "recording_logger", "--use_tensorboard", "--use_wandb", "--print_freq", "1",
                       "--display_freq", "2", "--update_html_freq", "2", "--val_freq", "1", "--no_progress"])
    assert code == 0
    (logger,) = RecordingLogger.instances
    assert logger.run.run_dir == str(tmp_path / "rec")
    assert [event for event in EVENTS if event not in {e for e, _ in logger.events}] == []  # it saw every kind
    for backend_class in built_in:  # the same events, in the same order, with the same arguments
        assert comparable(received[backend_class.__name__]) == comparable(logger.events), backend_class.__name__

    # ... and they are what the built-in back ends wrote: TensorBoard's points, the loss lines, the HTML images
    steps = [args[0].total_iters for event, args in logger.events if event == "log_step"]
    assert steps == list(range(1, 9))  # 2 epochs x 4 images, printed after each
    events = EventAccumulator(str(tmp_path / "rec" / "tensorboard"), size_guidance={"scalars": 0, "images": 0})
    events.Reload()
    assert [s.step for s in events.Scalars("loss/G_L1")] == steps
    assert [s.value for s in events.Scalars("loss/G_L1")] == pytest.approx(
        [args[1]["G_L1"] for event, args in logger.events if event == "log_step"])
    validations = [args for event, args in logger.events if event == "log_validation"]
    assert [s.value for s in events.Scalars("val/L1")] == pytest.approx([r.scores["L1"] for _, r, _ in validations])
    images = [args for event, args in logger.events if event == "log_images"]
    assert [im.step for im in events.Images("visuals")] == [p.total_iters for p, _, _ in images] == [2, 4, 6, 8]
    last_kept = {position.epoch: previews for position, previews, save_html in images if save_html}
    assert sorted(last_kept) == [1, 2]
    for epoch, previews in last_kept.items():  # the page keeps each epoch's last kept display
        for label, preview in previews.items():
            saved = np.asarray(Image.open(tmp_path / "rec" / "web" / "images" / f"epoch{epoch:03d}_{label}.png"))
            assert preview.dtype == np.uint8 and preview.shape == (32, 32, 3) and np.array_equal(saved, preview)
    log = (tmp_path / "rec" / "loss_log.txt").read_text()
    messages = [args[0] for event, args in logger.events if event == "message"]
    assert all(text in log for text in messages) and any(text.startswith("End of epoch 2 / 2") for text in messages)
    assert len(re.findall(r"^\(epoch: \d, iters: \d, time: ", log, re.M)) == len(steps)


def parse_train(tmp_path: Path, *argv: str):
    from options.train_options import TrainOptions
    return TrainOptions().parse(["--dataroot", str(tmp_path), "--name", "v", "--checkpoints_dir",
                                 str(tmp_path / "ck"), *argv])


@pytest.mark.filterwarnings("ignore:Unable to enable fault handler")  # torch's record_errors under capsys
def test_bad_logger_values_exit_2_naming_the_flag_and_every_problem_before_anything_is_written(tmp_path, capsys):
    import train
    with pytest.raises(SystemExit) as exc:
        train.main(["--dataroot", str(tmp_path), "--name", "v", "--checkpoints_dir", str(tmp_path / "ck"),
                    "--logger", "no_such_logger_module", "--logger", "util.html", "--logger", "recording_logger"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: argument --logger: "), err
    assert "no_such_logger_module: no module of that name can be imported" in err
    assert re.search(r"util\.html: the module \S+ must define exactly one subclass of util\.display\.backend\."
                     r"LoggerBackend \(imported ones do not count\), but defines none", err), err
    assert "recording_logger:" not in err  # a good value among bad ones is not a problem
    assert not (tmp_path / "ck").exists()


def test_a_logger_adds_flags_of_its_own_which_train_py_takes_with_that_logger_only(tmp_path, capsys):
    opt = parse_train(tmp_path, "--logger", "recording_logger", "--recording_label", "run 7")
    assert opt.recording_label == "run 7"
    assert opt._flag_classes["recording_label"] == "silent"  # as tests/recording_logger.py declares it
    with pytest.raises(SystemExit) as exc:
        parse_train(tmp_path, "--recording_label", "run 7")
    assert exc.value.code == 2 and "--recording_label" in capsys.readouterr().err


def test_logger_can_be_a_python_file_holding_one_backend_class(tmp_path, capsys):
    from util.display.user_loggers import logger_class
    from util.errors import UserError
    (tmp_path / "csv_logger.py").write_text(
        "from util.display.backend import LoggerBackend\n"
        "class CsvLogger(LoggerBackend):\n"
        "    def log_step(self, position, losses, lr, seconds_per_image, data_seconds):\n"
        "        pass\n")
    assert logger_class(str(tmp_path / "csv_logger.py")).__name__ == "CsvLogger"
    opt = parse_train(tmp_path, "--logger", str(tmp_path / "csv_logger.py"), "--logger", "recording_logger")
    assert opt.logger == [str(tmp_path / "csv_logger.py"), "recording_logger"]
    (tmp_path / "two_loggers.py").write_text(
        "from util.display.backend import LoggerBackend\n"
        "class A(LoggerBackend):\n    pass\n"
        "class B(LoggerBackend):\n    pass\n")
    with pytest.raises(UserError, match=r"exactly one subclass of util\.display\.backend\.LoggerBackend .*, "
                                        r"but defines A, B;"):
        logger_class(str(tmp_path / "two_loggers.py"))
    with pytest.raises(UserError, match=r"no such file"):
        logger_class(str(tmp_path / "missing.py"))


def test_a_missing_logger_package_refuses_the_run_before_any_logger_writes_a_file(paired_root, tmp_path, monkeypatch,
                                                                                    capsys):
    import train

    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` fails as if it were not installed
    code = train.main(["--dataroot", str(paired_root), "--name", "n", "--checkpoints_dir", str(tmp_path), *TINY,
                       "--use_tensorboard", "--use_wandb"])
    assert code == 2
    assert "--use_wandb needs the wandb package" in capsys.readouterr().err
    assert not (tmp_path / "n" / "tensorboard").exists()  # TensorBoard was asked first, and built nothing


def test_a_logger_that_raises_is_named_once_and_switched_off_while_training_goes_on(paired_root, tmp_path, capsys):
    import train
    (tmp_path / "flaky_logger.py").write_text(
        "from util.display.backend import LoggerBackend\n"
        "class FlakyLogger(LoggerBackend):\n"
        "    steps = 0\n"
        "    def log_step(self, position, losses, lr, seconds_per_image, data_seconds):\n"
        "        type(self).steps += 1\n"
        "        raise ValueError('the dashboard is down')\n")
    code = train.main(["--dataroot", str(paired_root), "--name", "n", "--checkpoints_dir", str(tmp_path), *TINY,
                       "--print_freq", "1", "--logger", str(tmp_path / "flaky_logger.py")])
    assert code == 0 and (tmp_path / "n" / "latest_net_G.pth").is_file()  # the run trained to its end
    out = capsys.readouterr()
    warnings = [line for line in (out.out + out.err).splitlines() if "FlakyLogger" in line]
    assert len(warnings) == 1, warnings  # once, though log_step comes at every printed step
    assert all(text in warnings[0] for text in ("FlakyLogger.log_step", "ValueError: the dashboard is down",
                                                "flaky_logger.py, line 6", "switched off", "--continue_train"))
    assert sys.modules[next(name for name in sys.modules if name.endswith("flaky_logger"))].FlakyLogger.steps == 1


def test_a_logger_whose_constructor_raises_stops_the_run_in_one_paragraph_before_training(paired_root, tmp_path,
                                                                                           capsys):
    import train
    (tmp_path / "broken_logger.py").write_text(
        "from util.display.backend import LoggerBackend\n"
        "class BrokenLogger(LoggerBackend):\n"
        "    def __init__(self, run):\n"
        "        raise KeyError('API_TOKEN')\n")
    code = train.main(["--dataroot", str(paired_root), "--name", "n", "--checkpoints_dir", str(tmp_path), *TINY,
                       "--logger", str(tmp_path / "broken_logger.py")])
    assert code == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert "BrokenLogger raised KeyError: 'API_TOKEN'" in line and "drop that --logger" in line
    assert not list((tmp_path / "n").glob("*.pth"))
