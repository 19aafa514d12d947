"""CUT and FastCUT (--model cut): CUT's flags and per-mode defaults, its checkpoints both ways,
training with validation/best/EMA, DDP equal to one process, exact resume, any channel count.

CUT's layer structure is written out here from its published code (taesungp/contrastive-unpaired-
translation, models/networks.py: ResnetGenerator with antialiased Downsample/Upsample, and
NLayerDiscriminator with Downsample after each formerly strided convolution), not taken from ours,
so that a change of our layout fails the checkpoint tests.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import load_script, ranks, run_in_process
from helpers import CROP_OR_WHOLE, cycle_gan, how_loaded, interrupt_when_logged, ok, ramps, run_two_ranks, train_command
from helpers import CUT_TINY as TINY
from helpers import cut_args as args
from helpers_weights import assert_identical, assert_trained_alike, final_weights

pytestmark = pytest.mark.slow


TWO_EPOCHS = ["--n_epochs", "1", "--n_epochs_decay", "1"]


def cut_generator_layout(input_nc: int, output_nc: int, ngf: int, n_blocks: int = 9) -> dict[str, tuple]:
    """Key -> shape of CUT's antialiased resnet generator with instance norm (convs with bias, blur
    buffers `filt`), layer by layer as its ResnetGenerator appends them."""
    layout, index = {}, 0

    def conv(cin: int, cout: int, k: int) -> None:
        layout[f"model.{index}.weight"], layout[f"model.{index}.bias"] = (cout, cin, k, k), (cout,)

    index = 1
    conv(input_nc, ngf, 7)
    index = 4  # after pad, conv, norm, relu
    for mult in (1, 2):  # conv, norm, relu, Downsample(3x3 blur)
        conv(ngf * mult, ngf * mult * 2, 3)
        layout[f"model.{index + 3}.filt"] = (ngf * mult * 2, 1, 3, 3)
        index += 4
    for _ in range(n_blocks):  # pad, conv, norm, relu, pad, conv, norm
        for sub in (1, 5):
            layout[f"model.{index}.conv_block.{sub}.weight"] = (ngf * 4, ngf * 4, 3, 3)
            layout[f"model.{index}.conv_block.{sub}.bias"] = (ngf * 4,)
        index += 1
    for mult in (4, 2):  # Upsample(4x4 blur), conv, norm, relu
        layout[f"model.{index}.filt"] = (ngf * mult, 1, 4, 4)
        index += 1
        conv(ngf * mult, ngf * mult // 2, 3)
        index += 3
    index += 1  # pad
    conv(ngf, output_nc, 7)
    return layout


def cut_checkpoint(layout: dict[str, tuple], seed: int = 0) -> dict[str, torch.Tensor]:
    """Random weights in `layout`; the blur buffers hold CUT's fixed binomial filters."""
    gen = torch.Generator().manual_seed(seed)
    state = {}
    for key, shape in layout.items():
        if key.endswith(".filt"):
            taps = torch.tensor([1.0, 2.0, 1.0] if shape[-1] == 3 else [1.0, 3.0, 3.0, 1.0])
            filt = taps[:, None] * taps[None, :]
            gain = 1.0 if shape[-1] == 3 else 4.0
            state[key] = (filt / filt.sum() * gain).expand(shape).clone()
        else:
            state[key] = torch.randn(shape, generator=gen) * (0.3 if key.endswith("weight") else 0.05)
    return state


def cut_discriminator_layout(input_nc: int, ndf: int, n_layers: int = 3) -> dict[str, tuple]:
    """Key -> shape of CUT's antialiased PatchGAN with instance norm: conv (stride 1), LeakyReLU,
    Downsample (3x3 blur `filt`), then per layer conv, norm, LeakyReLU, Downsample; conv, norm,
    LeakyReLU; the 1-channel conv."""
    layout = {"model.0.weight": (ndf, input_nc, 4, 4), "model.0.bias": (ndf,), "model.2.filt": (ndf, 1, 3, 3)}
    index, width = 3, ndf
    for n in range(1, n_layers + 1):
        previous, width = width, ndf * min(2 ** n, 8)
        layout[f"model.{index}.weight"], layout[f"model.{index}.bias"] = (width, previous, 4, 4), (width,)
        if n < n_layers:  # the formerly strided ones
            layout[f"model.{index + 3}.filt"] = (width, 1, 3, 3)
        index += 4 if n < n_layers else 3
    layout[f"model.{index}.weight"], layout[f"model.{index}.bias"] = (1, width, 4, 4), (1,)
    return layout


def test_cuts_discriminator_has_cuts_layout_and_its_weights_load_strictly():
    from models import create_model
    from options.train_options import TrainOptions
    from util.distributed import DistContext

    opt = TrainOptions().parse(["--dataroot", "x", "--name", "parse_only", "--model", "cut", "--ndf", "4"])
    netD = create_model(opt, DistContext()).netD
    layout = cut_discriminator_layout(3, 4)
    assert {key: tuple(value.shape) for key, value in netD.state_dict().items()} == layout
    netD.load_state_dict(cut_checkpoint(layout), strict=True)
    assert netD(torch.randn(1, 3, 64, 64)).shape == (1, 1, 6, 6)


@pytest.fixture(scope="module")
def train():
    return load_script("train.py")


@pytest.fixture(scope="module")
def test_script():
    return load_script("test.py")


@pytest.fixture(scope="module")
def trained(train, paired_root, tmp_path_factory) -> Path:
    """CUT (default mode) for two epochs, validated after each on held-out pairs, keeping the best
    epoch and a moving average."""
    ckpt = tmp_path_factory.mktemp("cut")
    assert train.main(args(paired_root, ckpt, "cut", "--dataset_mode", "aligned", "--max_dataset_size", "2",
                           *TWO_EPOCHS, "--val_freq", "1", "--val_max_images", "2", "--save_best", "L1",
                           "--ema_decay", "0.5", "--print_freq", "4")) == 0
    return ckpt / "cut"


def test_cut_trains_with_cuts_defaults_validates_and_keeps_best_and_ema(trained):
    names = {path.name for path in trained.iterdir()}
    for expected in ("latest_net_G.pth", "latest_net_F.pth", "latest_net_D.pth", "latest_ema_net_G.pth",
                     "best_net_G.pth", "best.json", "latest_train_state.pth", "val_log.txt"):
        assert expected in names, expected
    options = json.loads((trained / "train_opt.json").read_text())
    # CUT's own defaults and CUT-mode defaults
    assert (options["CUT_mode"], options["nce_idt"], options["lambda_NCE"], options["flip_equivariance"]) == \
        ("CUT", True, 1.0, False)
    assert (options["init_type"], options["no_dropout"], options["pool_size"], options["norm"]) == \
        ("xavier", True, 0, "instance")
    assert "NCE_Y" in (trained / "loss_log.txt").read_text()


def test_fastcut_mode_takes_its_defaults_and_explicit_flags_win():
    from options.train_options import TrainOptions

    def parsed(*flags: str):
        return TrainOptions().parse(["--dataroot", "x", "--name", "parse_only", "--model", "cut", *flags])

    fast = parsed("--CUT_mode", "fastcut")
    assert (fast.CUT_mode, fast.nce_idt, fast.lambda_NCE, fast.flip_equivariance, fast.n_epochs, fast.n_epochs_decay) \
        == ("FastCUT", False, 10.0, True, 150, 50)
    mixed = parsed("--lambda_NCE", "2", "--CUT_mode", "FastCUT", "--nce_idt", "--normG", "batch", "--normD", "none")
    assert (mixed.lambda_NCE, mixed.nce_idt, mixed.norm, mixed.normD) == (2.0, True, "batch", "none")
    assert parsed().n_epochs == 200 and parsed("--nce_idt", "false").nce_idt is False


def test_netF_is_built_from_the_first_batch_and_resumes_with_the_rest(trained):
    state = torch.load(trained / "latest_net_F.pth", weights_only=True)
    generator = torch.load(trained / "latest_net_G.pth", weights_only=True)
    # one MLP per --nce_layers entry, its input the generator's width there (layer 0: the padded image)
    assert [state[f"mlp_{i}.0.weight"].shape[1] for i in range(5)] == [3, 8, 16, 16, 16]
    assert state["mlp_0.2.weight"].shape == (8, 8)
    assert not any(key.startswith("module.") for key in [*state, *generator])
    saved = torch.load(trained / "latest_train_state.pth", weights_only=False)
    assert "F" in saved["model"]["networks"] and "patch_rng" in saved["model"]


def test_a_checkpoint_in_cuts_layout_loads_in_test_py_and_the_translator(trained, unpaired_root, test_script,
                                                                        tmp_path):
    layout = cut_generator_layout(3, 3, 4)
    ours = torch.load(trained / "latest_net_G.pth", weights_only=True)
    assert {key: tuple(value.shape) for key, value in ours.items()} == layout  # ours is CUT's layout

    run_dir = tmp_path / "ck" / "from_cut"
    run_dir.mkdir(parents=True)
    torch.save(cut_checkpoint(layout), run_dir / "latest_net_G.pth")  # what CUT's train.py writes, no json
    outputs = {}
    for model, data in (("cut", unpaired_root), ("test", unpaired_root / "testA")):
        assert test_script.main(["--dataroot", str(data), "--name", "from_cut", "--checkpoints_dir",
                                 str(tmp_path / "ck"), "--results_dir", str(tmp_path / model), "--model", model,
                                 "--ngf", "4", "--no_dropout", "--preprocess", "none", "--num_test", "2"]) == 0
        images = tmp_path / model / "from_cut" / "test_latest" / "images"
        outputs[model] = [np.asarray(Image.open(p), dtype=int) for p in sorted(images.glob("*_fake*.png"))]
    assert len(outputs["cut"]) == len(outputs["test"]) == 2
    for a, b in zip(outputs["cut"], outputs["test"]):
        assert np.abs(a - b).max() == 0 and a.std() > 1  # the same, non-blank images

    from models.inference.translator import Translator
    translator = Translator.load(run_dir, device="cpu")  # its architecture is read from the weights
    source = sorted((unpaired_root / "testA").glob("*.png"))[0]
    translated = translator.translate(np.asarray(Image.open(source).convert("RGB")))
    assert np.abs(translated.astype(int) - outputs["cut"][0]).max() <= 1


def test_test_py_with_the_originals_layout_writes_the_folders_cuts_fid_command_reads(trained, unpaired_root,
                                                                                     test_script, tmp_path):
    """CUT's README scores a run with `python -m pytorch_fid <testB> results/<name>/test_latest/images/fake_B/`:
    --results_layout original writes images/<visual>/<image>.png for every visual, as CUT's test.py does, beside
    our own images/<image>_<visual>.png, which they equal."""
    assert test_script.main(["--dataroot", str(unpaired_root), "--name", "cut", "--checkpoints_dir",
                             str(trained.parent), "--results_dir", str(tmp_path), "--model", "cut", "--ngf", "4",
                             "--load_size", "32", "--crop_size", "32", "--num_test", "2",
                             "--results_layout", "original"]) == 0
    images = tmp_path / "cut" / "test_latest" / "images"
    listed = {folder.name: sorted(path.name for path in folder.glob("*.png"))  # pytorch-fid's listing of a folder
              for folder in images.iterdir() if folder.is_dir()}
    names = [path.name for path in sorted((unpaired_root / "testA").glob("*.png"))[:2]]  # named by the input
    assert listed == {"real_A": names, "fake_B": names, "real_B": names}
    for name in names:
        assert (images / "fake_B" / name).read_bytes() == (images / name.replace(".png", "_fake_B.png")).read_bytes()


def test_two_processes_train_as_one_with_double_batch_and_resume_bit_identical(train, unpaired_root, tmp_path):
    """FastCUT (flip coin) with the identity NCE and negatives from the whole global batch: 2 x 1 == 1 x 2
    in float64; and a 2-process run killed (SIGKILL to a worker of a real torchrun, which then ends the
    other) and continued ends as the whole one. The 2-process runs that are not killed are ranks
    started without the launcher (conftest.ranks)."""
    flags = ["--dtype", "float64", *TWO_EPOCHS, "--serial_batches", "--no_flip", "--max_dataset_size", "4",
             "--CUT_mode", "FastCUT", "--nce_idt", "--nce_includes_all_negatives_from_minibatch",
             "--print_freq", "1", "--save_latest_freq", "2"]
    assert train.main(args(unpaired_root, tmp_path, "one", "--batch_size", "2", *flags)) == 0
    ok(ranks("train.py", *args(unpaired_root, tmp_path, "two", *flags)))
    assert_trained_alike(tmp_path / "one", tmp_path / "two")

    killed = args(unpaired_root, tmp_path, "killed", *flags)
    interrupt_when_logged(train_command(killed, nproc=2), tmp_path / "killed" / "loss_log.txt", "(epoch: 2, iters: 2,",
                          victim="worker")
    assert "resuming from" in run_two_ranks(killed + ["--continue_train"]).stdout
    assert_identical(final_weights(tmp_path / "two"), final_weights(tmp_path / "killed"))


def test_a_killed_run_continued_ends_bit_identical_to_the_uninterrupted_one(train, unpaired_root, tmp_path, capsys):
    """The run killed is a process of its own (SIGKILL); the uninterrupted and the continued runs are
    run here, on one thread as the killed process, so the arithmetic is the same. It is killed in the decay
    epoch, which (--load_size 36) loads whole images at --crop_size: the continued run must too."""
    flags = [*TWO_EPOCHS, "--max_dataset_size", "2", "--print_freq", "1", "--save_latest_freq", "2",
             "--CUT_mode", "FastCUT", "--nce_idt", "--load_size", "36"]
    assert train.main(args(unpaired_root, tmp_path, "whole", *flags)) == 0
    killed = args(unpaired_root, tmp_path, "killed", *flags)
    interrupt_when_logged(train_command(killed), tmp_path / "killed" / "loss_log.txt", "(epoch: 2, iters: 1,")
    assert "resuming from" in run_in_process("train.py", *killed, "--continue_train", capsys=capsys).stdout
    assert_identical(final_weights(tmp_path / "whole"), final_weights(tmp_path / "killed"))


@pytest.mark.parametrize("model, loaded", [("cut", ["crop", "crop", "whole"]), ("cycle_gan", ["crop", "crop", "crop"])])
def test_cut_loads_whole_images_at_crop_size_once_the_learning_rate_decays_and_cyclegan_keeps_cropping(
        train, tmp_path, model, loaded):
    """CUT's recipe (its unaligned dataset: `load_size = crop_size` once the epoch passes --n_epochs): the decay
    epochs resize each image whole to --crop_size; before them, and in CycleGAN's every epoch, a random crop of
    the image at --load_size."""
    sources = ramps(tmp_path / "data", 1)
    make = args if model == "cut" else cycle_gan
    flags = [flag for flag in make(tmp_path / "data", tmp_path, model) if flag != "--no_html"]  # the page shows it
    assert train.main([*flags, "--ngf", "4", "--ndf", "4", *CROP_OR_WHOLE]) == 0
    assert [how_loaded(tmp_path / model, epoch, sources) for epoch in (1, 2, 3)] == loaded


def test_one_channel_cut_trains_and_tests(train, test_script, unpaired_root, tmp_path):
    gray = ["--input_nc", "1", "--output_nc", "1"]
    assert train.main(args(unpaired_root, tmp_path, "gray", *gray, "--max_dataset_size", "2", "--n_epochs", "1",
                           "--n_epochs_decay", "0")) == 0
    assert torch.load(tmp_path / "gray" / "latest_net_G.pth", weights_only=True)["model.30.weight"].shape[0] == 1
    assert test_script.main(["--dataroot", str(unpaired_root), "--name", "gray", "--checkpoints_dir", str(tmp_path),
                             "--results_dir", str(tmp_path / "results"), *TINY[:2], "--ngf", "4", *gray,
                             "--load_size", "32", "--crop_size", "32", "--num_test", "1"]) == 0
    fake = next((tmp_path / "results" / "gray" / "test_latest" / "images").glob("*_fake_B.png"))
    pixels = np.asarray(Image.open(fake).convert("RGB"), dtype=int)
    assert (pixels == pixels[..., :1]).all()  # one channel, previewed as gray
