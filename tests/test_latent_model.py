"""Many answers per input, from a model that exists only in the test suite
(tests/custom_models/latent_model.py with tests/custom_networks/latent_net.py, which no product file
knows): a generator G(A, z) taking a latent code, an encoder E and a discriminator, declared by their
roles. It trains under DDP as one process does, its checkpoints and moving averages cover the
networks it declares, and test.py (--n_samples) and the Translator serve its signature: several
outputs per input, reproducible for a seed."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import ROOT, load_script, ranks
from helpers import ok
from helpers_weights import assert_trained_alike
from util.errors import UserError

pytestmark = pytest.mark.slow

MODEL = ["--model", "custom_models.latent_model", "--netG", "custom_networks.latent_net", "--nz", "4"]
ENV = {"PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
TINY = [*MODEL, "--ngf", "4", "--ndf", "4", "--load_size", "32", "--crop_size", "32", "--num_threads", "0"]
TRAINING = ["--display_id", "0", "--seed", "9", "--no_html", "--no_progress"]


def args(root: Path, ckpt: Path, name: str, *extra: str) -> list[str]:
    return ["--dataroot", str(root), "--checkpoints_dir", str(ckpt), "--name", name, *TINY, *TRAINING, *extra]


@pytest.fixture(scope="module")
def trained(paired_root, tmp_path_factory) -> Path:
    ckpt = tmp_path_factory.mktemp("latent")
    assert load_script("train.py").main(args(paired_root, ckpt, "one", "--n_epochs", "1", "--n_epochs_decay", "1",
                                             "--max_dataset_size", "4", "--ema_decay", "0.5")) == 0
    return ckpt / "one"


def test_checkpoints_and_moving_averages_cover_the_declared_networks(trained):
    names = {path.name for path in trained.glob("latest_*.pth")}
    assert {"latest_net_G.pth", "latest_net_E.pth", "latest_net_D.pth"} <= names
    # the generator and the encoder are averaged (both translate); the discriminator is not
    assert {"latest_ema_net_G.pth", "latest_ema_net_E.pth"} <= names and "latest_ema_net_D.pth" not in names


def test_two_processes_train_the_same_weights_as_one_with_double_batch(paired_root, tmp_path):
    """The random codes are drawn per global sample: two processes of one image each draw the codes
    one process with both images draws."""
    equivalence = ["--dtype", "float64", "--n_epochs", "1", "--n_epochs_decay", "0", "--serial_batches",
                   "--no_flip", "--max_dataset_size", "4"]
    assert load_script("train.py").main(args(paired_root, tmp_path, "one", "--batch_size", "2", *equivalence)) == 0
    ok(ranks("train.py", *args(paired_root, tmp_path, "two", "--batch_size", "1", *equivalence), env=ENV))
    assert_trained_alike(tmp_path / "one", tmp_path / "two")


def test_test_py_writes_the_encoded_output_and_n_reproducible_samples_per_input(trained, paired_root):
    test_script = load_script("test.py")
    pages = []
    for attempt in ("first", "again"):
        results = trained.parent / f"results_{attempt}"
        assert test_script.main(["--dataroot", str(paired_root), "--name", trained.name, "--checkpoints_dir",
                                 str(trained.parent), "--results_dir", str(results), *TINY, "--num_test", "2",
                                 "--n_samples", "3", "--seed", "4"]) == 0
        pages.append(results / trained.name / "test_latest")
    images = pages[0] / "images"
    encoded = sorted(images.glob("*_fake_B.png"))
    assert len(encoded) == 2
    for path in encoded:
        samples = [np.asarray(Image.open(path.with_name(path.name.replace("_fake_B.", f"_fake_B_random{k}."))))
                   for k in range(3)]
        assert not np.array_equal(samples[0], samples[1]) and not np.array_equal(samples[1], samples[2])
        for k, sample in enumerate(samples):  # the same seed, the same outputs
            again = pages[1] / "images" / path.name.replace("_fake_B.", f"_fake_B_random{k}.")
            assert np.array_equal(sample, np.asarray(Image.open(again)))
    assert "fake_B_random2" in (pages[0] / "index.html").read_text()


def test_the_translator_gives_n_outputs_per_input_reproducible_for_a_seed(trained):
    from custom_networks.latent_net import LatentGenerator
    from models.inference.translator import Translator
    from models.networks import get_norm_layer
    translator = Translator.load(trained, device="cpu")
    assert translator.latent_size == 4
    image = np.random.default_rng(2).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    outputs = translator.translate(image, n_samples=3, seed=1)
    assert len(outputs) == 3 and all(out.shape == (32, 32, 3) for out in outputs)
    assert not np.array_equal(outputs[0], outputs[1])
    assert all(np.array_equal(a, b) for a, b in zip(outputs, translator.translate(image, n_samples=3, seed=1)))
    code = [[0.5, -1.0, 2.0, 0.0]]
    [explicit] = translator.translate(image, codes=code)
    generator = LatentGenerator(3, 3, 4, 4, get_norm_layer("instance"))
    generator.load_state_dict(torch.load(trained / "latest_net_G.pth", weights_only=True))
    with torch.no_grad():
        x = torch.from_numpy(image).permute(2, 0, 1)[None].float() / 127.5 - 1.0
        expected = generator.eval()(x, torch.tensor(code))
    expected = ((expected[0].permute(1, 2, 0).clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).numpy()
    assert np.abs(explicit.astype(int) - expected.astype(int)).max() <= 1
    with pytest.raises(UserError, match="codes of shape"):
        translator.translate(image, codes=[[1.0, 2.0]])


def test_a_generator_without_a_code_refuses_samples():
    from models import networks
    from models.inference.translator import Translator
    translator = Translator.from_generator(networks.define_G(3, 3, 4, "resnet_6blocks", "instance"), "resnet_6blocks",
                                           3, 3, device="cpu")
    with pytest.raises(UserError, match="takes no latent code"):
        translator.translate(np.zeros((16, 16, 3), np.uint8), n_samples=2)
