"""UNSB (--model sb): its networks in its code's key layout, its bridge's schedule, training and sampling
in steps (test.py, the Translator, reproducible by seed), DDP equal to one process in float64, exact
resume, its command lines, and one-paragraph errors.

UNSB's layouts and schedule are written out here from its published code (cyclomon/UNSB:
models/ncsn_networks.py ResnetGenerator_ncsn, ResnetBlock_cond, NLayerDiscriminator_ncsn,
TimestepEmbedding; models/sb_model.py's times), not taken from ours, so that a change of ours fails.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import load_script, ranks, run_in_process
from helpers import CROP_OR_WHOLE, how_loaded, interrupt_when_logged, ok, ramps, train_command
from helpers import SB_TINY as TINY
from helpers import sb_args as args
from helpers_weights import assert_identical, assert_trained_alike, final_weights
from models.inference.translator import Translator
from models.losses import bridge
from models.networks import build_discriminator, build_generator, recognise_network
from options.train_options import TrainOptions
from util.errors import UserError

TWO_EPOCHS = ["--n_epochs", "1", "--n_epochs_decay", "1"]


@pytest.fixture(scope="module")
def train():
    return load_script("train.py")


# ----------------------------------------------------------------------------- UNSB's layouts and schedule
def unsb_generator_layout(input_nc: int, output_nc: int, ngf: int, blocks: int = 9) -> dict[str, tuple]:
    """Key -> shape of UNSB's ResnetGenerator_ncsn with instance norm, antialiased, no dropout, n_mlp 3."""
    layout = {"model.1.weight": (ngf, input_nc, 7, 7), "model.1.bias": (ngf,)}
    index = 4
    for mult in (1, 2):  # conv, norm, relu, Downsample
        layout[f"model.{index}.weight"] = (ngf * mult * 2, ngf * mult, 3, 3)
        layout[f"model.{index}.bias"] = (ngf * mult * 2,)
        layout[f"model.{index + 3}.filt"] = (ngf * mult * 2, 1, 3, 3)
        index += 4
    dim, width = ngf * 4, ngf * 4
    for block in range(blocks):  # conv_block: pad, conv, norm; conv_fin: relu, pad, conv, norm
        prefix = f"model_res.{block}."
        layout.update({prefix + "conv_block.1.weight": (dim, dim, 3, 3), prefix + "conv_block.1.bias": (dim,),
                       prefix + "adaptive.style_net.weight": (dim * 2, width),
                       prefix + "adaptive.style_net.bias": (dim * 2,),
                       prefix + "conv_fin.2.weight": (dim, dim, 3, 3), prefix + "conv_fin.2.bias": (dim,),
                       prefix + "Dense_time.weight": (dim, width), prefix + "Dense_time.bias": (dim,),
                       prefix + "style.weight": (dim * 2, width), prefix + "style.bias": (dim * 2,)})
    index = 0
    for mult in (4, 2):  # Upsample, conv, norm, relu
        layout[f"model_upsample.{index}.filt"] = (ngf * mult, 1, 4, 4)
        layout[f"model_upsample.{index + 1}.weight"] = (ngf * mult // 2, ngf * mult, 3, 3)
        layout[f"model_upsample.{index + 1}.bias"] = (ngf * mult // 2,)
        index += 4
    layout[f"model_upsample.{index + 1}.weight"] = (output_nc, ngf, 7, 7)
    layout[f"model_upsample.{index + 1}.bias"] = (output_nc,)
    for k in (1, 3, 5, 7):  # PixelNorm, then 4 x (Linear, LeakyReLU)
        layout[f"z_transform.{k}.weight"], layout[f"z_transform.{k}.bias"] = (width, width), (width,)
    layout["time_embed.0.weight"], layout["time_embed.0.bias"] = (width, ngf), (width,)
    layout["time_embed.2.weight"], layout["time_embed.2.bias"] = (width, width), (width,)
    return layout


def unsb_discriminator_layout(input_nc: int, ndf: int) -> dict[str, tuple]:
    """Key -> shape of UNSB's NLayerDiscriminator_ncsn (n_layers 3, instance norm): 4 ConvBlock_cond."""
    layout, width = {}, 4 * ndf
    for block, (cin, cout) in enumerate([(input_nc, ndf), (ndf, 2 * ndf), (2 * ndf, 4 * ndf), (4 * ndf, 8 * ndf)]):
        prefix = f"model_main.{block}."
        layout.update({prefix + "conv1.weight": (cout, cin, 4, 4), prefix + "conv1.bias": (cout,),
                       prefix + "down.filt": (cout, 1, 3, 3), prefix + "dense.weight": (cout, width),
                       prefix + "dense.bias": (cout,)})
    layout["final_conv.weight"], layout["final_conv.bias"] = (1, 8 * ndf, 4, 4), (1,)
    for k in (0, 2):
        layout[f"t_embed.main.{k}.weight"], layout[f"t_embed.main.{k}.bias"] = (width, width), (width,)
    return layout


def sb_options(*extra: str):
    return TrainOptions().parse(["--dataroot", "unused", *TINY, *extra])


def test_the_networks_have_unsbs_keys_and_shapes_and_its_weights_are_recognised():
    opt = sb_options()  # the channels are build_generator's (a run refuses unequal ones: its bridge mixes them)
    generator = build_generator(opt, 1, 3)
    assert {k: tuple(v.shape) for k, v in generator.state_dict().items()} == unsb_generator_layout(1, 3, 4)
    discriminator = build_discriminator(opt, 3)
    assert {k: tuple(v.shape) for k, v in discriminator.state_dict().items()} == unsb_discriminator_layout(3, 4)
    seen = recognise_network(generator.state_dict())
    assert seen == {"netG": "resnet_9blocks_cond", "norm": "instance", "ngf": 4, "input_nc": 1, "output_nc": 3,
                    "no_dropout": True}


def test_the_bridge_times_are_unsbs_harmonic_schedule():
    for steps in (2, 3, 5):  # sb_model.py's forward, in numpy as it computes them
        incs = np.array([0] + [1 / (i + 1) for i in range(steps - 1)])
        times = np.cumsum(incs)
        times = times / times[-1]
        times = 0.5 * times[-1] + 0.5 * times
        expected = np.concatenate([np.zeros(1), times])
        np.testing.assert_allclose(bridge.bridge_times(steps).numpy(), expected, rtol=0, atol=1e-15)
    assert bridge.bridge_times(1).tolist() == [0.0, 1.0]


def test_a_walk_feeds_each_step_its_index_a_fresh_code_and_the_bridges_noise():
    calls = []

    def generator(x, t, z):
        calls.append((x.clone(), t.clone(), z.clone()))
        return torch.full_like(x, float(t[0]) + 1)  # "the target", step by step

    x = torch.zeros(2, 1, 4, 4)
    guesses, state = bridge.walk(generator, x, 3, 0.0, 5, bridge.SeededNoise(0))
    assert [int(t[0]) for _, t, _ in calls] == [0, 1, 2] and all(len(t) == 2 for _, t, _ in calls)
    assert not torch.equal(calls[0][2], calls[1][2]) and calls[0][2].shape == (2, 5)
    times = bridge.bridge_times(3)
    towards = float((times[1] - times[0]) / (1 - times[0]))  # tau 0: no noise, the mean of the bridge
    assert torch.allclose(calls[1][0], torch.full_like(x, towards * 1.0))
    assert torch.equal(guesses[-1], torch.full_like(x, 3.0)) and torch.equal(state, calls[2][0])


# ----------------------------------------------------------------------------- training and sampling
@pytest.mark.slow
def test_sb_trains_and_test_py_writes_every_steps_output_which_the_translator_reproduces_by_seed(
        train, unpaired_root, tmp_path, capsys):
    assert train.main(args(unpaired_root, tmp_path, "sb", *TWO_EPOCHS, "--max_dataset_size", "4")) == 0
    run = tmp_path / "sb"
    assert {"latest_net_G.pth", "latest_net_D.pth", "latest_net_E.pth", "latest_net_F.pth"} <= {
        p.name for p in run.iterdir()}
    result = run_in_process("test.py", "--dataroot", str(unpaired_root), "--name", "sb", "--checkpoints_dir",
                            str(tmp_path), "--results_dir", str(tmp_path / "results"), "--model", "sb", "--ngf", "4",
                            "--load_size", "32", "--crop_size", "32", "--num_test", "2", "--num_timesteps", "3",
                            "--seed", "5", capsys=capsys)
    assert result.returncode == 0, result.stderr[-3000:]
    images = tmp_path / "results" / "sb" / "test_latest" / "images"
    first = sorted(images.glob("*_real_A.png"))[0].name.replace("_real_A.png", "")
    steps = [np.asarray(Image.open(images / f"{first}_fake_{k}.png"), dtype=int) for k in (1, 2, 3)]
    final = np.asarray(Image.open(images / f"{first}_fake_B.png"), dtype=int)
    assert np.array_equal(steps[-1], final) and not np.array_equal(steps[0], steps[-1])
    translator = Translator.load(run, device="cpu", seed=5)
    assert translator.bridge == (3, 0.01, 16)  # the run's --num_timesteps and --tau, from train_opt.json
    source = sorted((unpaired_root / "testA").glob("*.png"))[0]
    assert source.stem == first
    again = translator.translate(str(source))
    assert np.abs(again.astype(int) - final).max() <= 1  # test.py's own rounding of the same numbers
    assert np.array_equal(translator.translate(str(source)), again)  # the same seed, the same output
    assert not np.array_equal(translator.translate(str(source), seed=6), again)
    # scripts/translate.py walks the steps asked for, with the Translator's noise for --seed
    result = run_in_process("scripts/translate.py", str(source), "--checkpoint", str(run), "--output",
                            str(tmp_path / "two_steps"), "--num_timesteps", "2", "--seed", "5", "--device", "cpu",
                            capsys=capsys)
    assert result.returncode == 0, result.stderr[-3000:]
    written = np.asarray(Image.open(tmp_path / "two_steps" / source.name), dtype=int)
    two_steps = Translator.load(run, device="cpu", seed=5, num_timesteps=2).translate(str(source))
    assert np.array_equal(written, two_steps.astype(int)) and not np.array_equal(written, again)
    # a call may ask for its own number of steps (the server's steps option): the same walk
    assert np.array_equal(translator.translate(str(source), steps=2), two_steps)
    with pytest.raises(UserError, match="steps=0"):
        translator.translate(str(source), steps=0)


def test_one_exported_step_walked_by_the_caller_gives_the_translators_output(tmp_path, capsys):
    onnxruntime = pytest.importorskip("onnxruntime")
    from models import create_model
    from options.base_options import save_options
    from util.distributed import DistContext
    # weights far from the usual N(0, 0.02) start, so that a wrong image, code or noise shows in every pixel (the
    # generator reads no step number, as UNSB's: the test sees only that the step input is there)
    flags = ["--model", "sb", "--ngf", "4", "--netF_nc", "8", "--num_timesteps", "3", "--init_type", "xavier",
             "--init_gain", "1.0"]
    opt = TrainOptions().parse(["--dataroot", "unused", "--name", "sb", "--checkpoints_dir", str(tmp_path),
                                "--display_id", "0", *flags])
    save_options(opt)
    torch.manual_seed(0)
    create_model(opt, DistContext()).save_networks("latest")
    result = run_in_process("scripts/export.py", "--name", "sb", "--checkpoints_dir", str(tmp_path), *flags,
                            "--formats", "onnx", "--check_sizes", "32x32", capsys=capsys)
    assert result.returncode == 0, result.stderr[-3000:]
    session = onnxruntime.InferenceSession(str(tmp_path / "sb" / "export" / "latest_net_G.onnx"))
    assert [i.name for i in session.get_inputs()] == ["input", "step", "code"]

    def exported_step(state: torch.Tensor, step: torch.Tensor, code: torch.Tensor) -> torch.Tensor:
        feeds = {"input": state.float().numpy(), "step": step.numpy(), "code": code.float().numpy()}
        return torch.from_numpy(session.run(None, feeds)[0]).double()

    image = torch.rand(3, 28, 36, generator=torch.Generator().manual_seed(1)) * 2 - 1
    translator = Translator.load(tmp_path / "sb", device="cpu")
    for seed in (4, 5):
        # the caller's loop: models/losses/bridge.py's walk (docs/export.md), its noise drawn as the Translator draws it
        guesses, _ = bridge.walk(exported_step, image[None].double(), 3, translator.bridge[1], translator.bridge[2],
                                 bridge.SeededNoise(seed))
        wanted = translator.translate(image, seed=seed)
        # float32 in both, the same operations in another runtime: rounding (~1e-7 per step, the export's own
        # check), carried through 3 steps, against differences of order 0.1 for a wrong step or noise
        assert (guesses[-1][0].float() - wanted).abs().max() < 1e-4


@pytest.fixture(scope="module")
def batch_norm_run(train, unpaired_root, tmp_path_factory):
    """A tiny UNSB run with batch norm in G (one epoch on 2 images), whose running statistics are not one
    image's: test.py in training mode would give other outputs than in eval mode. Weights far from the usual
    N(0, 0.02) start, so that another noise shows in the 8-bit outputs."""
    ckpt = tmp_path_factory.mktemp("sb_batch_norm")
    assert train.main(args(unpaired_root, ckpt, "bn", "--normG", "batch", "--n_epochs", "1", "--n_epochs_decay",
                           "0", "--max_dataset_size", "2", "--batch_size", "2", "--init_gain", "1.0")) == 0
    return ckpt


def sb_test_outputs(root, ckpt, results, capsys, *extra: str) -> dict[str, np.ndarray]:
    """test.py's final translation (fake_B) of every image of root/testA by the run `bn` in `ckpt`, by name."""
    result = run_in_process("test.py", "--dataroot", str(root), "--name", "bn", "--checkpoints_dir", str(ckpt),
                            "--results_dir", str(results), "--model", "sb", "--ngf", "4", "--normG", "batch",
                            "--load_size", "32", "--crop_size", "32", "--num_timesteps", "3", "--seed", "5", *extra,
                            capsys=capsys)
    assert result.returncode == 0, result.stderr[-3000:]
    images = results / "bn" / "test_latest" / "images"
    return {path.name.replace("_fake_B.png", ""): np.asarray(Image.open(path), dtype=int)
            for path in images.glob("*_fake_B.png")}


def test_sb_test_py_runs_the_generator_in_eval_mode_without_eval_as_unsbs_test(
        batch_norm_run, unpaired_root, tmp_path, capsys):
    plain = sb_test_outputs(unpaired_root, batch_norm_run, tmp_path / "plain", capsys, "--num_test", "2")
    evaluated = sb_test_outputs(unpaired_root, batch_norm_run, tmp_path / "eval", capsys, "--num_test", "2", "--eval")
    assert len(plain) == 2 and plain.keys() == evaluated.keys()
    for name in plain:
        assert np.array_equal(plain[name], evaluated[name]), name
    # the running statistics show: batch norm in training mode (each image's own statistics) gives another output
    source = sorted((unpaired_root / "testA").glob("*.png"))[0]
    training_mode = Translator.load(batch_norm_run / "bn", device="cpu", seed=5, eval_mode=False)
    assert np.abs(training_mode.translate(str(source)).astype(int) - plain[source.stem]).max() > 1


def test_sb_test_py_with_the_originals_layout_writes_the_folders_unsbs_fid_command_reads(
        batch_norm_run, unpaired_root, tmp_path, capsys):
    """UNSB's README scores each step count k with `python -m pytorch_fid <images/fake_k> <real B>` over
    results/<name>/test_latest/: --results_layout original writes those folders (and images/real/, its input),
    one <image>.png each, beside our own files, which they equal."""
    ours = sb_test_outputs(unpaired_root, batch_norm_run, tmp_path, capsys, "--num_test", "2",
                           "--results_layout", "original")
    images = tmp_path / "bn" / "test_latest" / "images"
    listed = {folder.name: sorted(path.name for path in folder.glob("*.png"))  # pytorch-fid's listing of a folder
              for folder in images.iterdir() if folder.is_dir()}
    names = sorted(f"{name}.png" for name in ours)
    assert len(names) == 2
    assert listed == {folder: names for folder in ("real", "fake_1", "fake_2", "fake_3", "fake_B", "real_B")}
    for name, fake in ours.items():
        assert np.array_equal(np.asarray(Image.open(images / "fake_3" / f"{name}.png"), dtype=int), fake)
        assert (images / "real" / f"{name}.png").read_bytes() == (images / f"{name}_real_A.png").read_bytes()


def test_sb_every_test_image_walks_its_own_noise_the_same_whatever_else_is_in_the_run(
        batch_norm_run, unpaired_root, tmp_path, capsys):
    sources = sorted((unpaired_root / "testA").glob("*.png"))
    twins, others = tmp_path / "twins", tmp_path / "others"
    for root, names in ((twins, {"one.png": sources[0], "two.png": sources[0]}),  # one picture under two names
                        (others, {"one.png": sources[0], "three.png": sources[1], "four.png": sources[2]})):
        for domain in ("testA", "testB"):
            (root / domain).mkdir(parents=True)
        for name, source in names.items():
            (root / "testA" / name).write_bytes(source.read_bytes())
            (root / "testB" / name).write_bytes(source.read_bytes())
    first = sb_test_outputs(twins, batch_norm_run, tmp_path / "first", capsys)
    second = sb_test_outputs(others, batch_norm_run, tmp_path / "second", capsys)
    assert not np.array_equal(first["one"], first["two"])  # the same picture, another image: other noise
    assert np.array_equal(first["one"], second["one"])  # the same image and seed, other company: the same walk
    translator = Translator.load(batch_norm_run / "bn", device="cpu", seed=5)
    assert np.abs(translator.translate(str(twins / "testA" / "two.png")).astype(int) - first["two"]).max() <= 1


@pytest.mark.slow
def test_two_processes_train_as_one_with_double_batch_and_a_killed_run_continues_bit_identical(
        train, unpaired_root, tmp_path, capsys):
    """2 x 1 == 1 x 2 in float64 (the step, noise and codes per image of the global batch, the SB loss's
    log-sum-exp over all of it), FastCUT's flip coin and the identity NCE on; and a run killed and
    continued ends as the whole one. --load_size 36: epoch 1 crops, epoch 2 (the decay) loads whole at 32, in every
    process and in the continued half of epoch 2 too."""
    flags = ["--dtype", "float64", *TWO_EPOCHS, "--serial_batches", "--no_flip", "--max_dataset_size", "4",
             "--mode", "fastcut", "--nce_idt", "--print_freq", "1", "--save_latest_freq", "2", "--load_size", "36"]
    assert train.main(args(unpaired_root, tmp_path, "one", "--batch_size", "2", *flags)) == 0
    ok(ranks("train.py", *args(unpaired_root, tmp_path, "two", *flags)))
    assert_trained_alike(tmp_path / "one", tmp_path / "two")

    killed = args(unpaired_root, tmp_path, "killed", "--batch_size", "2", *flags)
    interrupt_when_logged(train_command(killed), tmp_path / "killed" / "loss_log.txt", "(epoch: 2, iters: 2,")
    assert "resuming from" in run_in_process("train.py", *killed, "--continue_train", capsys=capsys).stdout
    assert_identical(final_weights(tmp_path / "one"), final_weights(tmp_path / "killed"))


@pytest.mark.parametrize("processes", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_sb_loads_whole_images_at_crop_size_from_the_first_decay_epoch_in_one_process_and_two(
        train, tmp_path, processes):
    """UNSB's recipe (its unaligned dataset's, as CUT's): the epochs after --n_epochs resize each image whole to
    --crop_size, the ones before crop it at --load_size; with one process and with two (each rank loads its own
    share; rank 0's page shows its first input)."""
    sources = ramps(tmp_path / "data", 2)
    flags = [flag for flag in args(tmp_path / "data", tmp_path, "sb", *CROP_OR_WHOLE) if flag != "--no_html"]
    if processes == 1:
        assert train.main(flags) == 0
    else:
        ok(ranks("train.py", *flags))
    assert [how_loaded(tmp_path / "sb", epoch, sources) for epoch in (1, 2, 3)] == ["crop", "crop", "whole"]


# ----------------------------------------------------------------------------- run folders of UNSB's code
def write_unsb_run(run, *flags: str, options: dict[str, tuple[str, str | None]] | None = None) -> None:
    """A run folder as UNSB's train.py leaves it: latest_net_G.pth with its keys (saved from its wrapped
    network: 'module.' before each) and no architecture.json, and train_opt.txt as its print_options writes it
    (each `name: value` right-aligned to 25 and padded to 30, then a tab and `[default: ...]` where it differs,
    between two rulers); `options` name -> (value, default or None). Weights far from the N(0, 0.02) start, so
    that another noise or dropout shows in 8-bit outputs."""
    generator = build_generator(sb_options("--init_type", "xavier", "--init_gain", "1.0", *flags), 3, 3)
    run.mkdir(parents=True)
    torch.save({"module." + key: value for key, value in generator.state_dict().items()}, run / "latest_net_G.pth")
    write_unsb_options(run, options or {})


def write_unsb_options(run, options: dict[str, tuple[str, str | None]]) -> None:
    """run/train_opt.txt as UNSB's print_options writes it (write_unsb_run)."""
    lines = ["----------------- Options ---------------"]
    for name, (value, default) in sorted(options.items()):
        lines.append(f"{name:>25}: {value:<30}" + (f"\t[default: {default}]" if default is not None else ""))
    (run / "train_opt.txt").write_text("\n".join([*lines, "----------------- End -------------------"]) + "\n")


# what UNSB's train_opt.txt says of a run trained with `--ngf 4 --no_dropout False --num_timesteps 3 --tau 0.05`
UNSB_OPTIONS = {"gpu_ids": ("0", None), "model": ("sb", None), "mode": ("sb", None),
                "name": ("h2z_SB", "experiment_name"), "nce_layers": ("0,4,8,12,16", None), "ngf": ("4", "64"),
                "no_dropout": ("False", "True"), "num_timesteps": ("3", "5"), "tau": ("0.05", "0.01"),
                "lambda_SB": ("1.0", "0.1")}


def test_a_unsb_checkpoint_trained_with_dropout_loads_in_test_py_and_gives_the_translators_output(
        unpaired_root, tmp_path, capsys):
    """UNSB's `--no_dropout False` puts a dropout layer in each residual block (its keys shift from conv_fin.2 to
    conv_fin.3); test.py builds it when told so, as UNSB's test.py, and otherwise names the flag; test.py (without
    --eval) translates in eval mode as UNSB's test, and the Translator reads the steps and tau of the run's
    train_opt.txt: both give the same walk for a seed."""
    run = tmp_path / "ckpt" / "h2z_SB"
    write_unsb_run(run, "--no_dropout", "False", options=UNSB_OPTIONS)
    layout = {key.replace(".conv_fin.2.", ".conv_fin.3."): shape
              for key, shape in unsb_generator_layout(3, 3, 4).items()}
    saved = torch.load(run / "latest_net_G.pth")
    assert {key.removeprefix("module."): tuple(value.shape) for key, value in saved.items()} == layout
    command = ["--dataroot", str(unpaired_root), "--name", "h2z_SB", "--checkpoints_dir", str(tmp_path / "ckpt"),
               "--results_dir", str(tmp_path / "results"), "--model", "sb", "--ngf", "4", "--load_size", "32",
               "--crop_size", "32", "--num_test", "1", "--num_timesteps", "3", "--tau", "0.05", "--seed", "5"]
    refused = run_in_process("test.py", *command, capsys=capsys)
    errors = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert refused.returncode == 2 and len(errors) == 1 and "built with --no_dropout False; pass that" in errors[0]
    assert not (tmp_path / "results").exists()  # refused before writing anything
    result = run_in_process("test.py", *command, "--no_dropout", "False", capsys=capsys)
    assert result.returncode == 0, result.stderr[-3000:]
    source = sorted((unpaired_root / "testA").glob("*.png"))[0]
    written = np.asarray(Image.open(tmp_path / "results" / "h2z_SB" / "test_latest" / "images" /
                                    f"{source.stem}_fake_B.png"), dtype=int)
    translator = Translator.load(run, device="cpu", seed=5)
    assert translator.bridge == (3, 0.05, 16)  # the run's --num_timesteps and --tau, from its train_opt.txt
    assert np.abs(translator.translate(str(source)).astype(int) - written).max() <= 1  # test.py's own rounding
    # dropout on (training mode) gives another output: test.py's equal one is eval mode's, without --eval
    dropping = Translator.load(run, device="cpu", seed=5, eval_mode=False)
    assert np.abs(dropping.translate(str(source)).astype(int) - written).max() > 1


def test_the_translator_reads_the_steps_and_tau_of_a_train_opt_txt_by_their_flags_types_and_refuses_by_name(
        unpaired_root, tmp_path, capsys):
    """A folder trained by UNSB's code has train_opt.txt and no train_opt.json: its --num_timesteps and --tau are
    the walk's; the text is untrusted (parsed by the flags' types, a bad value refused naming the file and line);
    without them the Translator refuses, naming what it looked for, rather than walk defaults, and the keywords
    (scripts/translate.py's flags) it names work."""
    run = tmp_path / "unsb"
    options = {**UNSB_OPTIONS, "no_dropout": ("True", None), "num_timesteps": ("2", "5"), "tau": ("0.2", "0.01")}
    write_unsb_run(run, options=options)
    assert Translator.load(run, device="cpu").bridge == (2, 0.2, 16)
    assert Translator.load(run, device="cpu", num_timesteps=4, tau=0.0).bridge == (4, 0.0, 16)  # keywords win
    for name, bad in [("tau", "__import__('os').remove('x')"), ("tau", "-0.5"), ("num_timesteps", "0"),
                      ("num_timesteps", "2.5")]:
        write_unsb_options(run, {**options, name: (bad, None)})
        line = 2 + sorted(options).index(name)  # after the ruler, in print_options' sorted order
        with pytest.raises(UserError, match=rf"train_opt.txt, line {line} \(`{name}: .*--{name} there is not one"):
            Translator.load(run, device="cpu")
    (run / "train_opt.txt").write_text("----------------- Options ---------------\n"
                                       "                      ngf: 4\n----------------- End -------------------\n")
    with pytest.raises(UserError, match=r"train_opt.txt has no `num_timesteps:` or `tau:` line.*num_timesteps=N, "
                                        r"tau=T to Translator.load"):
        Translator.load(run, device="cpu")
    (run / "train_opt.txt").unlink()
    with pytest.raises(UserError, match="no train_opt.json or train_opt.txt lies beside"):
        Translator.load(run, device="cpu")
    given = Translator.load(run, device="cpu", num_timesteps=3, tau=0.3, seed=5)
    assert given.bridge == (3, 0.3, 16)
    source = sorted((unpaired_root / "testA").glob("*.png"))[0]
    result = run_in_process("scripts/translate.py", str(source), "--checkpoint", str(run), "--output",
                            str(tmp_path / "out"), "--num_timesteps", "3", "--tau", "0.3", "--seed", "5", "--device",
                            "cpu", capsys=capsys)
    assert result.returncode == 0, result.stderr[-3000:]
    assert np.array_equal(np.asarray(Image.open(tmp_path / "out" / source.name)), given.translate(str(source)))


def test_a_run_of_ours_that_lost_its_train_opt_json_reads_the_same_options_from_its_train_opt_txt(tmp_path):
    """train.py writes both files; the text one, in the originals' format, says the same to the Translator."""
    from options.base_options import save_options

    write_unsb_run(tmp_path / "ours")
    save_options(TrainOptions().parse(["--dataroot", "unused", "--name", "ours", "--checkpoints_dir", str(tmp_path),
                                       *TINY, "--num_timesteps", "2", "--tau", "0.2", "--data_range", "0", "2"]))
    from_json = Translator.load(tmp_path / "ours", device="cpu")
    (tmp_path / "ours" / "train_opt.json").unlink()
    from_text = Translator.load(tmp_path / "ours", device="cpu")
    assert from_text.bridge == from_json.bridge == (2, 0.2, 16)
    assert from_text.loaded.input_range == from_json.loaded.input_range == (0.0, 2.0)


# ----------------------------------------------------------------------------- command lines and errors
def test_unsbs_command_line_without_model_trains_sb_with_a_note(capsys):
    opt = TrainOptions().parse(["--dataroot", "unused", "--mode", "sb", "--lambda_SB", "1.0", "--lambda_NCE", "1.0"])
    assert opt.model == "sb" and opt.nce_idt and opt.lambda_SB == 1.0 and opt.num_timesteps == 5 and opt.tau == 0.01
    assert "--mode without --model is UNSB's command line" in capsys.readouterr().err
    fast = TrainOptions().parse(["--dataroot", "unused", "--model", "sb", "--mode", "FastCut"])
    assert not fast.nce_idt and fast.lambda_NCE == 10.0 and fast.flip_equivariance and fast.n_epochs == 150


@pytest.mark.parametrize("flags, named", [
    (["--num_timesteps", "0"], "--num_timesteps"),
    (["--netG", "resnet_9blocks"], "--netG"),
    (["--netE", "basic"], "--netE"),
    (["--n_mlp", "2"], "--n_mlp"),
    (["--dataset_mode", "aligned_volume", "--patch_size", "16"], "--dataset_mode"),
])
def test_a_bad_value_is_refused_in_one_paragraph_naming_its_flag(flags, named, capsys):
    with pytest.raises(SystemExit) as stopped:
        TrainOptions().parse(["--dataroot", "unused", "--model", "sb", *flags])
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and named in err[0]
