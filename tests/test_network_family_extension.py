"""A new network family is one file: a generator family that exists only in the test suite
(tests/custom_networks/dilated_net.py, which no product file knows), used as
`--netG custom_networks.dilated_net`, goes through everything a built-in one does: training in one
process and two as torchrun's workers, an exact resume, architecture.json, test.py (tiled too), the
Translator and scripts/export.py. Its own flag (--dilated_blocks) and its size rule, receptive
radius and checkpointable blocks come from its file alone."""
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

NET = "custom_networks.dilated_net"
ENV = {"PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
ARCH = ["--netG", NET, "--dilated_blocks", "3", "--ngf", "4", "--ndf", "4", "--norm", "none", "--no_dropout"]
TINY = ["--model", "pix2pix", *ARCH, "--load_size", "32", "--crop_size", "32", "--num_threads", "0"]
TRAINING = ["--display_id", "0", "--seed", "5", "--no_html", "--no_progress"]


def args(root: Path, ckpt: Path, name: str, *extra: str) -> list[str]:
    return ["--dataroot", str(root), "--checkpoints_dir", str(ckpt), "--name", name, *TINY, *TRAINING, *extra]


@pytest.fixture(scope="module")
def train():
    return load_script("train.py")


@pytest.fixture(scope="module")
def trained(train, paired_root, tmp_path_factory) -> Path:
    ckpt = tmp_path_factory.mktemp("family")
    assert train.main(args(paired_root, ckpt, "one", "--n_epochs", "1", "--n_epochs_decay", "1",
                           "--max_dataset_size", "4", "--checkpoint_activations")) == 0
    return ckpt / "one"


def generator_by_hand(run_dir: Path, blocks: int = 3) -> torch.nn.Module:
    from custom_networks.dilated_net import DilatedGenerator
    from models.networks import get_norm_layer
    net = DilatedGenerator(3, 3, 4, blocks, get_norm_layer("none"))
    net.load_state_dict(torch.load(run_dir / "latest_net_G.pth", weights_only=True))
    return net.eval()


def test_the_familys_network_trains_and_architecture_json_records_its_flags(trained):
    architecture = json.loads((trained / "architecture.json").read_text())
    assert architecture["netG"] == NET and architecture["dilated_blocks"] == 3
    state = torch.load(trained / "latest_net_G.pth", weights_only=True)
    assert {key.split(".")[1] for key in state if key.startswith("blocks.")} == {"0", "1", "2"}
    generator_by_hand(trained)  # its keys and shapes are the family's network's, strictly


def test_its_blocks_recompute_their_activations_when_asked(trained):
    from types import SimpleNamespace

    from models.networks import build_generator, family_of
    flags = SimpleNamespace(netG=NET, ngf=4, norm="none", dilated_blocks=3, init_type="normal", init_gain=0.02)
    assert family_of(NET).recomputes_activations(flags)
    plain = build_generator(flags, 3, 3)
    checkpointed = build_generator(SimpleNamespace(**vars(flags), checkpoint_activations=True), 3, 3)
    assert [block.recompute for block in checkpointed.blocks] == [True] * 3
    assert not any(block.recompute for block in plain.blocks)
    checkpointed.load_state_dict(plain.state_dict())
    x = torch.randn(2, 3, 16, 16)
    grads = []
    for net in (plain, checkpointed):
        net(x).square().mean().backward()
        grads.append([p.grad for p in net.parameters()])
    assert all(torch.allclose(a, b, rtol=0, atol=1e-6) for a, b in zip(*grads))


def test_two_processes_train_the_same_weights_as_one_with_double_batch(train, paired_root, tmp_path):
    equivalence = ["--dtype", "float64", "--n_epochs", "1", "--n_epochs_decay", "0", "--serial_batches",
                   "--no_flip", "--max_dataset_size", "4", "--norm", "instance"]
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


def test_test_py_translates_whole_and_tiled_with_the_familys_size_rule(trained, paired_root):
    test_script = load_script("test.py")
    common = ["--dataroot", str(paired_root), "--name", trained.name, "--checkpoints_dir", str(trained.parent),
              *TINY, "--num_test", "2", "--eval", "--preprocess", "none"]
    outputs = {}
    for label, extra in (("whole", []), ("tiled", ["--tile", "16", "--tile_overlap", "8"])):
        results = trained.parent / f"results_{label}"
        assert test_script.main([*common, "--results_dir", str(results), *extra]) == 0
        pages = results / trained.name / "test_latest" / "images"
        outputs[label] = sorted(pages.glob("*_fake_B.png"))
        assert len(outputs[label]) == 2
    # 8 px of overlap is below 4 x the family's receptive radius: the tiles differ from the whole image
    # along the seams only, and the page says so; the image sizes are the inputs'.
    from PIL import Image
    for whole, tiled in zip(outputs["whole"], outputs["tiled"]):
        assert Image.open(whole).size == Image.open(tiled).size


def test_the_translator_rebuilds_it_from_the_run_and_tiles_exactly_with_enough_overlap(trained):
    from models.inference.translator import Translator
    translator = Translator.load(trained, device="cpu")
    image = np.random.default_rng(1).integers(0, 256, (300, 400, 3), dtype=np.uint8)
    out = translator.translate(image)
    with torch.no_grad():
        x = torch.from_numpy(image).permute(2, 0, 1)[None].float() / 127.5 - 1.0
        expected = generator_by_hand(trained)(x)
    expected = ((expected[0].permute(1, 2, 0).clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).numpy()
    assert out.shape == (300, 400, 3) and np.abs(out.astype(int) - expected.astype(int)).max() <= 1
    # No norm: with an overlap of 4 x the family's receptive radius (30 px) tiles equal the whole image.
    tiled = translator.translate(image, tile=256, tile_overlap=4 * 30)
    assert np.abs(tiled.astype(int) - out.astype(int)).max() <= 1
    odd = translator.translate(image[:31, :37])  # padded to the family's multiple of 2 and cropped back
    assert odd.shape == (31, 37, 3)


def test_export_writes_it_with_its_size_rule(trained, tmp_path):
    result = run_script("scripts/export.py", "--name", trained.name, "--checkpoints_dir", str(trained.parent),
                        "--model", "pix2pix", *ARCH, "--export_dir", str(tmp_path), "--formats", "torchscript",
                        "--device", "cpu", env=ENV)
    assert result.returncode == 0, result.stderr[-3000:]
    scripted = torch.jit.load(str(tmp_path / "latest_net_G.pt"))
    x = torch.rand(1, 3, 34, 40) * 2 - 1
    with torch.no_grad(), torch.jit.optimized_execution(False):
        assert torch.allclose(scripted(x), generator_by_hand(trained)(x), atol=1e-5)


def test_its_weights_alone_rebuild_it_when_the_family_is_named(trained, tmp_path):
    """Without architecture.json, the family named by netG reads its own weights (blocks, widths)."""
    import shutil

    from models.inference.translator import Translator
    lone = tmp_path / "dilated.pth"
    shutil.copy(trained / "latest_net_G.pth", lone)
    translator = Translator.load(lone, device="cpu", netG=NET)
    image = np.random.default_rng(3).integers(0, 256, (16, 20, 3), dtype=np.uint8)
    assert np.array_equal(translator.translate(image), Translator.load(trained, device="cpu").translate(image))
