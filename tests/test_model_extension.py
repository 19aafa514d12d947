"""A new model is one file: a model that exists only in the test suite
(tests/custom_models/feature_matching_model.py, which no product file knows) goes through everything a
built-in model does -- training through train.py in one process and two as torchrun's workers, validation with
best and EMA checkpoints, an exact resume, test.py, the Translator and scripts/export.py.

Its projection netF is built from the first training batch (as CUT's head is), before DDP wraps it.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import ROOT, load_script, ranks, run_in_process, run_script
from helpers import interrupt_when_logged, ok, train_command
from helpers_weights import assert_identical, assert_trained_alike, final_weights

pytestmark = pytest.mark.slow

MODEL = "custom_models.feature_matching_model"
# Subprocesses find the model as a user's would: its folder on PYTHONPATH.
ENV = {"PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
TINY = ["--model", MODEL, "--ngf", "4", "--load_size", "32", "--crop_size", "32", "--num_threads", "0"]
TRAINING = ["--display_id", "0", "--seed", "3", "--no_html", "--no_progress"]


def args(root: Path, ckpt: Path, name: str, *extra: str) -> list[str]:
    return ["--dataroot", str(root), "--checkpoints_dir", str(ckpt), "--name", name, *TINY, *TRAINING, *extra]


@pytest.fixture(scope="module")
def train():
    return load_script("train.py")


@pytest.fixture(scope="module")
def trained(train, paired_root, tmp_path_factory) -> Path:
    """One process, two epochs, validated after each, keeping the best and the moving average."""
    ckpt = tmp_path_factory.mktemp("extension")
    assert train.main(args(paired_root, ckpt, "one", "--n_epochs", "1", "--n_epochs_decay", "1", "--val_freq", "1",
                           "--save_best", "L1", "--ema_decay", "0.5", "--print_freq", "2")) == 0
    return ckpt / "one"


def test_a_model_outside_the_project_trains_validates_and_keeps_best_and_ema(trained):
    names = {path.name for path in trained.iterdir()}
    for expected in ("latest_net_G.pth", "latest_net_F.pth", "latest_ema_net_G.pth", "best_net_G.pth",
                     "best_ema_net_G.pth", "best.json", "latest_train_state.pth", "val_log.txt"):
        assert expected in names, expected
    best = json.loads((trained / "best.json").read_text())
    assert best["metric"] == "L1"
    assert "L1" in (trained / "val_log.txt").read_text()
    assert f"model: {MODEL}" in (trained / "train_opt.txt").read_text()
    assert "G_feature" in (trained / "loss_log.txt").read_text()


def test_its_first_batch_hook_built_netF_from_the_data_before_ddp(trained):
    state = torch.load(trained / "latest_net_F.pth", weights_only=True)
    assert state["weight"].shape[1] == 3  # the aligned demo's B images: RGB
    assert not any(key.startswith("module.") for key in state)  # written from the unwrapped module


def test_two_processes_train_the_same_weights_as_one_with_double_batch(train, paired_root, tmp_path):
    equivalence = ["--dtype", "float64", "--n_epochs", "1", "--n_epochs_decay", "1", "--serial_batches",
                   "--no_flip", "--no_dropout", "--max_dataset_size", "4"]
    assert train.main(args(paired_root, tmp_path, "one", "--batch_size", "2", *equivalence)) == 0
    ok(ranks("train.py", *args(paired_root, tmp_path, "two", "--batch_size", "1", *equivalence), env=ENV))
    assert_trained_alike(tmp_path / "one", tmp_path / "two")


def test_a_killed_run_continued_ends_bit_identical_to_the_uninterrupted_one(train, paired_root, tmp_path,
                                                                          capsys):
    """The run killed is a process of its own (SIGKILL); the uninterrupted and the continued runs are
    run here, on one thread as the killed process (OMP_NUM_THREADS=1), so the arithmetic is the same."""
    flags = ["--n_epochs", "1", "--n_epochs_decay", "1", "--max_dataset_size", "4", "--print_freq", "1",
             "--save_latest_freq", "2"]
    assert train.main(args(paired_root, tmp_path, "whole", *flags)) == 0
    killed = args(paired_root, tmp_path, "killed", *flags)
    interrupt_when_logged(train_command(killed), tmp_path / "killed" / "loss_log.txt", "(epoch: 2, iters: 1,", env=ENV)
    assert "resuming from" in run_in_process("train.py", *killed, "--continue_train", capsys=capsys).stdout
    assert_identical(final_weights(tmp_path / "whole"), final_weights(tmp_path / "killed"))


def test_test_py_translates_and_scores_with_the_model_and_its_best_epoch(trained, paired_root):
    test_script = load_script("test.py")
    for epoch in ("latest", "best"):
        assert test_script.main(["--dataroot", str(paired_root), "--name", trained.name, "--checkpoints_dir",
                                 str(trained.parent), "--results_dir", str(trained.parent / "results"), *TINY,
                                 "--epoch", epoch, "--num_test", "2"]) == 0
        results = trained.parent / "results" / trained.name / f"test_{epoch}"
        assert len(list((results / "images").glob("*_fake_B.png"))) == 2
        metrics = json.loads((results / "metrics.json").read_text())
        assert metrics["images"] == 2
        assert metrics["output_L1"] < metrics["identity_L1"]  # scored through the model's scored_pairs


def test_the_translator_loads_the_run_folder_and_matches_the_trained_generator(trained):
    from models import networks
    from models.inference.translator import Translator

    translator = Translator.load(trained, device="cpu")
    image = np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    out = translator.translate(image)
    assert out.shape == (32, 32, 3) and out.dtype == np.uint8
    generator = networks.define_G(3, 3, 4, "resnet_6blocks", "instance", True)
    generator.load_state_dict(torch.load(trained / "latest_net_G.pth", weights_only=True))
    with torch.no_grad():
        expected = generator.eval()(torch.from_numpy(image).permute(2, 0, 1)[None].float() / 127.5 - 1.0)
    expected = ((expected[0].permute(1, 2, 0).clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).numpy()
    assert np.abs(out.astype(int) - expected.astype(int)).max() <= 1


def test_export_writes_the_models_generator(trained, tmp_path):
    result = run_script("scripts/export.py", "--name", trained.name, "--checkpoints_dir", str(trained.parent),
                        "--model", MODEL, "--ngf", "4", "--export_dir", str(tmp_path), "--formats", "torchscript",
                        "--device", "cpu", env=ENV)
    assert result.returncode == 0, result.stderr[-3000:]
    scripted = torch.jit.load(str(tmp_path / "latest_net_G.pt"))
    with torch.no_grad(), torch.jit.optimized_execution(False):
        assert scripted(torch.zeros(1, 3, 36, 40)).shape == (1, 3, 36, 40)


def test_a_model_reading_an_entry_the_dataset_lacks_is_refused_in_one_paragraph_before_training(train, paired_root,
                                                                                             tmp_path, monkeypatch,
                                                                                             capsys):
    (tmp_path / "user_models").mkdir()
    (tmp_path / "user_models" / "reads_mask_model.py").write_text(
        "from models.pix2pix_model import Pix2PixModel\n"
        "class ReadsMaskModel(Pix2PixModel):\n"
        "    def set_input(self, input):\n"
        "        super().set_input(input)\n"
        "        self.mask = input['mask']\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    code = train.main(["--dataroot", str(paired_root), "--checkpoints_dir", str(tmp_path), "--name", "mask",
                       "--model", "user_models.reads_mask_model", "--netG", "resnet_6blocks", *TINY[2:], *TRAINING,
                       "--n_epochs", "1", "--n_epochs_decay", "0"])
    assert code == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert all(text in line for text in ("ReadsMaskModel", "'mask'", "AlignedDataset", "'A', 'B', 'A_paths'",
                                         "__getitem__"))
    assert not list((tmp_path / "mask").glob("*.pth"))


def test_a_key_error_of_the_models_own_about_an_entry_the_batch_has_is_left_as_it_is(paired_root, tmp_path,
                                                                                    monkeypatch):
    """The first-batch check names missing batch entries only: a KeyError for a key the batch holds is the
    model's own bug (a lookup in some other dict), and stays a KeyError with its traceback."""
    from models import create_model
    from options.train_options import TrainOptions
    from util import distributed
    (tmp_path / "user_models").mkdir()
    (tmp_path / "user_models" / "own_bug_model.py").write_text(
        "from models.pix2pix_model import Pix2PixModel\n"
        "class OwnBugModel(Pix2PixModel):\n"
        "    def set_input(self, input):\n"
        "        super().set_input(input)\n"
        "        {}['A']\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    opt = TrainOptions().parse(["--dataroot", str(paired_root), "--checkpoints_dir", str(tmp_path), "--name", "bug",
                                "--model", "user_models.own_bug_model", "--netG", "resnet_6blocks", *TINY[2:],
                                *TRAINING])
    model = create_model(opt, distributed.init_distributed("cpu"))
    batch = {"A": torch.zeros(1, 3, 32, 32), "B": torch.zeros(1, 3, 32, 32), "A_paths": ["a"], "B_paths": ["b"]}
    with pytest.raises(KeyError, match="'A'"):
        model.setup(opt, first_batch=batch)
