"""BicycleGAN (`--model bicycle_gan`): many answers per input for paired data. Its networks take
BicycleGAN's checkpoints (dev/compare_bicyclegan.py checks them against its own code); here: it
trains under DDP as one process does, a killed run continues bit-identically, test.py writes the
encoded output and N reproducible samples per input, the Translator gives test.py's images for
the same codes, its samples differ more across codes than pix2pix's across dropout masks on a task
with many right answers, and its bad values are refused in one paragraph.

One tiny shared run (BicycleGAN's 128 px networks, 4 filters wide) serves the inference tests."""
from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import demo_data, load_script, ranks, run_in_process
from helpers import BICYCLE_GAN_TINY as TINY
from helpers import bicycle_gan_args as args
from helpers import interrupt_when_logged, ok, train_command
from helpers_weights import assert_identical, assert_trained_alike, final_weights, weights

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trained(paired_root, tmp_path_factory) -> Path:
    ckpt = tmp_path_factory.mktemp("bicycle")
    assert load_script("train.py").main(args(paired_root, ckpt, "one", "--n_epochs", "1", "--n_epochs_decay", "0",
                                             "--max_dataset_size", "4", "--ema_decay", "0.5", "--val_freq", "1",
                                             "--save_best", "L1")) == 0
    return ckpt / "one"


def test_checkpoints_hold_its_four_networks_the_averages_of_g_and_e_and_the_best_validated_ones(trained):
    names = {path.name for path in trained.glob("*.pth")}
    assert {"latest_net_G.pth", "latest_net_E.pth", "latest_net_D.pth", "latest_net_D2.pth"} <= names
    assert {"latest_ema_net_G.pth", "latest_ema_net_E.pth"} <= names
    assert not {"latest_ema_net_D.pth", "latest_ema_net_D2.pth"} & names
    # validation scores the encoded output against B on the val split; --save_best keeps G and E
    best = json.loads((trained / "best.json").read_text())["best"]
    assert best["epoch"] == 1 and 0 < best["metrics"]["L1"] < 2
    assert {"best_net_G.pth", "best_net_E.pth"} <= names
    # BicycleGAN's own parameter names (its G adds the code at every level: down/submodule/up)
    state = torch.load(trained / "latest_net_G.pth", weights_only=True)
    assert "model.down.0.weight" in state and "model.submodule.down.1.weight" in state
    assert state["model.down.0.weight"].shape[1] == 3 + 3  # the image's channels and the code's


def reordered_copy(paired_root: Path, folder: Path, order: tuple[int, ...]) -> Path:
    """The first training pairs of `paired_root`, renamed so that --serial_batches reads them in `order`."""
    pairs = sorted((paired_root / "train").glob("*.png"))
    (folder / "train").mkdir(parents=True)
    for position, index in enumerate(order):
        shutil.copy(pairs[index], folder / "train" / f"{position}.png")
    return folder


def test_two_processes_accumulating_two_micro_batches_train_what_one_process_does_with_the_global_batch(
        paired_root, tmp_path):
    """Two processes of --batch_size 2 --accum_steps 2 over p0..p7: the sampler deals p0..p3 to the first
    micro-batches (p0 p2 to rank 0, p1 p3 to rank 1), so the encoded halves are p0 p1 p4 p5 and the
    random ones p2 p3 p6 p7, and the step's codes are drawn for all eight: what one process with
    --batch_size 8 trains on the order p0 p1 p4 p5 p2 p3 p6 p7 (float64)."""
    equivalence = ["--dtype", "float64", "--n_epochs", "1", "--n_epochs_decay", "0", "--serial_batches", "--no_flip"]
    accumulated = reordered_copy(paired_root, tmp_path / "micro", tuple(range(8)))
    whole = reordered_copy(paired_root, tmp_path / "whole", (0, 1, 4, 5, 2, 3, 6, 7))
    assert load_script("train.py").main(args(whole, tmp_path, "one", "--batch_size", "8", *equivalence)) == 0
    ok(ranks("train.py", *args(accumulated, tmp_path, "two", "--batch_size", "2", "--accum_steps", "2",
                                  *equivalence)))
    one, two = weights(tmp_path / "one"), weights(tmp_path / "two")
    assert {"latest_net_G.pth", "latest_net_E.pth", "latest_net_D.pth", "latest_net_D2.pth"} <= set(one) == set(two)
    assert_trained_alike(tmp_path / "one", tmp_path / "two")


def test_accumulated_micro_batches_train_what_one_batch_of_their_halves_does(paired_root, tmp_path):
    """--batch_size 2 --accum_steps 2 over images p0 p1 p2 p3 encodes p0 and p2 and draws random
    codes for p1 and p3: what --batch_size 4 trains on the order p0 p2 p1 p3 (float64)."""
    for name, order in (("micro", (0, 1, 2, 3)), ("whole", (0, 2, 1, 3))):
        reordered_copy(paired_root, tmp_path / name, order)
    same = ["--dtype", "float64", "--n_epochs", "2", "--n_epochs_decay", "0", "--serial_batches", "--no_flip"]
    train = load_script("train.py").main
    assert train(args(tmp_path / "micro", tmp_path, "accumulated", "--batch_size", "2", "--accum_steps", "2",
                      *same)) == 0
    assert train(args(tmp_path / "whole", tmp_path, "one_batch", "--batch_size", "4", *same)) == 0
    one_batch = weights(tmp_path / "one_batch")
    assert {"latest_net_G.pth", "latest_net_E.pth", "latest_net_D.pth", "latest_net_D2.pth"} <= set(one_batch)
    assert_trained_alike(tmp_path / "accumulated", tmp_path / "one_batch")


def test_a_killed_run_continued_ends_bit_identical_to_the_uninterrupted_one(paired_root, tmp_path, capsys):
    """The run killed is a process of its own (SIGKILL); the uninterrupted and the continued runs are
    run here, on one thread as the killed process, so the arithmetic is the same."""
    flags = ["--n_epochs", "1", "--n_epochs_decay", "1", "--max_dataset_size", "4", "--print_freq", "2",
             "--save_latest_freq", "2"]
    assert load_script("train.py").main(args(paired_root, tmp_path, "whole", *flags)) == 0
    killed = args(paired_root, tmp_path, "killed", *flags)
    interrupt_when_logged(train_command(killed), tmp_path / "killed" / "loss_log.txt", "(epoch: 2, iters: 2,")
    assert "resuming from" in run_in_process("train.py", *killed, "--continue_train", capsys=capsys).stdout
    assert_identical(final_weights(tmp_path / "whole"), final_weights(tmp_path / "killed"))


def run_test_py(trained: Path, paired_root: Path, results: Path, *extra: str) -> Path:
    assert load_script("test.py").main(["--dataroot", str(paired_root), "--name", trained.name, "--checkpoints_dir",
                                        str(trained.parent), "--results_dir", str(results), *TINY, "--phase", "test",
                                        "--num_test", "2", *extra]) == 0
    return results / trained.name / "test_latest" / "images"


def read(path: Path) -> np.ndarray:
    return np.asarray(Image.open(path)).astype(int)


def test_test_py_writes_the_encoded_output_and_five_distinct_samples_reproducible_with_a_seed(trained, paired_root):
    first = run_test_py(trained, paired_root, trained.parent / "results_first", "--seed", "4")
    again = run_test_py(trained, paired_root, trained.parent / "results_again", "--seed", "4")
    other = run_test_py(trained, paired_root, trained.parent / "results_other", "--seed", "5")
    encoded = sorted(first.glob("*_fake_B.png"))
    assert len(encoded) == 2  # one per input, from the code E encodes from its target
    for path in encoded:
        samples = [read(path.with_name(path.name.replace("_fake_B.", f"_fake_B_random{k}."))) for k in range(5)]
        assert not (first / path.name.replace("_fake_B.", "_fake_B_random5.")).exists()  # BicycleGAN's default: 5
        assert all(not np.array_equal(a, b) for i, a in enumerate(samples) for b in samples[i + 1:])
        assert all(not np.array_equal(read(path), sample) for sample in samples)
        for k, sample in enumerate(samples):
            name = path.name.replace("_fake_B.", f"_fake_B_random{k}.")
            assert np.array_equal(sample, read(again / name))  # the same seed, the same samples
            assert not np.array_equal(sample, read(other / name))


@pytest.fixture(scope="module")
def synced_pages(trained, paired_root) -> Path:
    """test.py --eval with the codes of seed 3 for every input (--sync), 3 samples each: its images
    (the encoded output, from the mean of E's code, and the samples) are what the Translator gives."""
    return run_test_py(trained, paired_root, trained.parent / "results_sync", "--seed", "3", "--sync",
                       "--n_samples", "3", "--eval")


def test_the_translator_gives_test_pys_images_for_the_same_codes(trained, synced_pages, paired_root):
    from models.inference.translator import Translator
    translator = Translator.load(trained, device="cpu")
    assert translator.latent_size == 3
    source = sorted((paired_root / "test").glob("*.png"))[0]
    pair = Image.open(source).convert("RGB")
    image = np.asarray(pair.crop((0, 0, pair.width // 2, pair.height)).resize((128, 128), Image.BICUBIC))  # as test.py
    outputs = translator.translate(image, n_samples=3, seed=3)  # --sync: the codes of seed 3
    for k, output in enumerate(outputs):
        written = read(synced_pages / f"{source.stem}_fake_B_random{k}.png")
        assert np.abs(output.astype(int) - written).max() <= 1


@pytest.mark.parametrize("flags, says", [
    (["--batch_size", "3"], ["--batch_size 3", "even", "--batch_size 4"]),
    (["--nz", "0"], ["--nz 0", "latent code"]),
    (["--netE", "resnet_256"], ["--netE resnet_256", "256 to 511", "--netE resnet_128"]),
    (["--where_add", "middle"], ["--where_add middle", "all"]),
    (["--netG", "resnet_6blocks"], ["--netG resnet_6blocks", "unet_256"]),
], ids=["odd_batch", "no_code", "encoder_too_big_for_the_crop", "where_add_middle", "generator_without_code"])
def test_bad_values_are_refused_in_one_paragraph_before_anything_is_written(paired_root, tmp_path, capsys, flags,
                                                                            says):
    result = run_in_process("train.py", *args(paired_root, tmp_path, "bad", "--max_dataset_size", "2", *flags),
                            capsys=capsys)
    assert result.returncode == 2, result.stderr
    err = result.stderr.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    for text in says:
        assert text in err, (text, err)
    written = {path.name for path in (tmp_path / "bad").glob("*")} if (tmp_path / "bad").exists() else set()
    assert not written - {".run.lock"}, written  # no checkpoint, options or log


def test_its_samples_differ_more_across_codes_than_pix2pixs_across_dropout_masks_in_three_seeds(tmp_path):
    # The demo's task (label maps -> scenes turned by a random hue: many right answers per input) and its
    # recipe (BicycleGAN with --norm none, pix2pix with its dropout) at the suite's scale: 8 pairs, networks
    # 8 filters wide, 24 steps at twice the default rate. pix2pix learns to give one answer whatever its
    # dropout mask (diversity_L1 0.008 to 0.010 seen); BicycleGAN, trained as long on the same pairs, gives
    # another one for each code (0.20 to 0.21 seen). A generator that ignored its code would score its
    # untrained self's 0.0001.
    training = ["--display_id", "0", "--no_html", "--no_progress", "--batch_size", "2", "--lr", "0.0004",
                "--n_epochs", "3", "--n_epochs_decay", "3"]
    models = {"bicycle_gan": ["--netE", "resnet_128", "--nef", "8", "--netD", "basic_128_multi", "--netD2",
                              "basic_128_multi", "--norm", "none"],
              "pix2pix": []}
    for seed in ("0", "1", "2"):
        root = demo_data.make_bicyclegan_demo(tmp_path / f"task{seed}", 128, int(seed), 8, 2, 4)
        common = ["--dataroot", str(root), "--checkpoints_dir", str(tmp_path), "--netG", "unet_128", "--ngf", "8",
                  "--ndf", "8", "--load_size", "128", "--crop_size", "128", "--seed", seed, "--num_threads", "0"]
        diversity = {}
        for model, model_flags in models.items():
            flags = [*common, "--name", f"{model}{seed}", "--model", model, *model_flags]
            assert load_script("train.py").main([*flags, *training]) == 0
            report = run_in_process("scripts/demo_report.py", *flags, "--phase", "test", "--num_test", "4",
                                    "--n_samples", "5", "--results_dir", str(tmp_path / "results"))
            assert report.returncode == 0, report.stdout + report.stderr  # and each beats its untrained model
            report_file = tmp_path / "results" / f"{model}{seed}" / "test_latest" / "demo_report.json"
            diversity[model] = json.loads(report_file.read_text())["trained"]["diversity_L1"]
        assert diversity["bicycle_gan"] > diversity["pix2pix"], (seed, diversity)


def test_an_epoch_whose_first_batch_is_skipped_logs_and_shows_nothing_rather_than_failing(paired_root, tmp_path,
                                                                                            capsys):
    """A resumed epoch may start where only an incomplete batch is left, which BicycleGAN skips: nothing has
    been trained in this process yet, so a print or display point there has no losses or images to show
    (this was an AttributeError with a small --print_freq)."""
    import train
    from options.train_options import TrainOptions
    from util.distributed import DistContext
    from util.position import Position

    opt = TrainOptions().parse(args(paired_root, tmp_path, "skip", "--max_dataset_size", "3", "--batch_size", "2",
                                    "--print_freq", "1", "--display_freq", "1", "--n_epochs", "1",
                                    "--n_epochs_decay", "0"))
    run, _ = train.set_up(opt, DistContext())
    try:
        progress = Position(epoch=1, images_done=2, total_iters=2)  # 2 of the 3 images done: 1 left
        assert train.train_one_epoch(run, progress)
        assert not run.engine.has_stepped
        assert "(epoch: 1" not in capsys.readouterr().out  # no loss line without a step
        train.train_one_epoch(run, Position(epoch=1))  # a whole epoch: one step of 2, the last image skipped
        assert run.engine.has_stepped and "loss_G_L1" in vars(run.model)
    finally:
        run.visualizer.close()
        run.stop.uninstall()


def test_test_py_scores_the_samples_diversity_and_realism_beside_the_encoded_outputs_fidelity(
        trained, paired_root, inception_torch_home, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(inception_torch_home))
    monkeypatch.setenv("IMG2IMG_OFFLINE", "1")
    pages = run_test_py(trained, paired_root, trained.parent / "results_scored", "--n_samples", "3", "--eval_metrics")
    metrics = json.loads((pages.parent / "metrics.json").read_text())
    assert {"output_L1", "output_PSNR", "output_SSIM"} <= set(metrics)  # the encoded output against B
    assert metrics["samples_per_input"] == 3
    # the samples differ (mean pairwise L1 of the saved images, within 8-bit rounding)
    names = sorted(pages.glob("*_fake_B.png"))
    expected = np.mean([np.mean([np.abs(read(a) - read(b)).mean() / 127.5 for a, b in itertools.combinations(
        [path.with_name(path.name.replace("_fake_B.", f"_fake_B_random{k}.")) for k in range(3)], 2)])
        for path in names])
    assert metrics["diversity_L1"] > 0 and abs(metrics["diversity_L1"] - expected) < 0.01
    assert metrics["diversity_LPIPS"] > 0  # LPIPS on the seeded stand-in AlexNet
    assert {"FID_random", "KID_random"} <= set(metrics)  # the random samples against the real B images


def test_lpips_without_its_weights_is_left_out_saying_where_to_put_them(trained, paired_root, tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "empty"))
    monkeypatch.setenv("IMG2IMG_OFFLINE", "1")
    pages = run_test_py(trained, paired_root, tmp_path / "results", "--n_samples", "2", "--eval_metrics")
    metrics = json.loads((pages.parent / "metrics.json").read_text())
    assert "diversity_L1" in metrics and "diversity_LPIPS" not in metrics
    assert "alexnet-owt-7be5be79.pth" in metrics["diversity_LPIPS_skipped"]
    assert str(tmp_path / "empty" / "hub" / "checkpoints") in metrics["diversity_LPIPS_skipped"]


def test_a_reference_image_gives_test_pys_encoded_output_in_the_translator_and_translate_py(trained, synced_pages,
                                                                                             paired_root, tmp_path):
    from models.inference.translator import Translator
    source = sorted((paired_root / "test").glob("*.png"))[0]
    pair = Image.open(source).convert("RGB")
    halves = [pair.crop((x, 0, x + pair.width // 2, pair.height)).resize((128, 128), Image.BICUBIC)
              for x in (0, pair.width // 2)]  # as test.py resizes A and B
    translator = Translator.load(trained, device="cpu")
    encoded = translator.translate(np.asarray(halves[0]), reference=np.asarray(halves[1]))
    # the encoded output: from the mean of E's code, whatever codes the samples took
    assert np.abs(encoded.astype(int) - read(synced_pages / f"{source.stem}_fake_B.png")).max() <= 1
    # scripts/translate.py: the same with --reference, N files with --n_samples
    halves[0].save(tmp_path / "a.png")
    halves[1].save(tmp_path / "look.png")
    translate = load_script("scripts/translate.py").main
    assert translate([str(tmp_path / "a.png"), "--checkpoint", str(trained), "--output", str(tmp_path / "like"),
                      "--reference", str(tmp_path / "look.png")]) == 0
    assert np.array_equal(read(tmp_path / "like" / "a.png"), encoded.astype(int))
    assert translate([str(tmp_path / "a.png"), "--checkpoint", str(trained), "--output", str(tmp_path / "many"),
                      "--n_samples", "2", "--seed", "7"]) == 0
    samples = translator.translate(np.asarray(halves[0]), n_samples=2, seed=7)
    for k, sample in enumerate(samples):
        assert np.array_equal(read(tmp_path / "many" / f"a_sample{k}.png"), sample.astype(int))


def test_export_takes_the_code_as_a_second_input(trained, paired_root, tmp_path):
    export = load_script("scripts/export.py").main
    assert export(["--name", trained.name, "--checkpoints_dir", str(trained.parent), *TINY,
                   "--export_dir", str(tmp_path), "--formats", "torchscript", "--check_sizes", "128x128"]) == 0
    scripted = torch.jit.load(str(tmp_path / "latest_net_G.pt"))
    from models.inference.translator import Translator
    translator = Translator.load(trained, device="cpu")
    x = torch.rand(2, 3, 128, 128) * 2 - 1
    codes = torch.randn(2, 3)
    with torch.no_grad():
        assert torch.allclose(scripted(x, codes), translator.generator.eval()(x, codes), atol=1e-5)
        assert not torch.allclose(scripted(x, codes), scripted(x, codes.flip(0)), atol=1e-3)  # the code matters


@pytest.fixture
def input_image(paired_root, tmp_path) -> Path:
    pair = Image.open(sorted((paired_root / "test").glob("*.png"))[0]).convert("RGB")
    pair.crop((0, 0, pair.width // 2, pair.height)).resize((128, 128), Image.BICUBIC).save(tmp_path / "a.png")
    return tmp_path / "a.png"


def test_translate_py_translates_with_the_codes_of_a_file(trained, input_image, tmp_path):
    from models.inference.translator import Translator
    codes = np.array([[0.5, -1.0, 2.0], [0.0, 0.0, 0.0]])
    np.savetxt(tmp_path / "codes.txt", codes)
    assert load_script("scripts/translate.py").main([str(input_image), "--checkpoint", str(trained), "--output",
                                                     str(tmp_path / "out"),
                                                     "--codes", str(tmp_path / "codes.txt")]) == 0
    expected = Translator.load(trained, device="cpu").translate(np.asarray(Image.open(input_image)), codes=codes)
    for k, image in enumerate(expected):
        assert np.array_equal(read(tmp_path / "out" / f"a_sample{k}.png"), image.astype(int))


@pytest.mark.parametrize("extra, says", [
    (["--n_samples", "2", "--reference", "{image}"], ["--n_samples and --reference", "pass one of them"]),
    (["--codes", "{codes}"], ["--codes", "codes of 3 finite numbers"]),
    (["--reference", "{missing}"], ["--reference", "not an image file"]),
], ids=["two_sources_of_codes", "codes_of_the_wrong_size", "missing_reference"])
def test_translate_py_refuses_bad_code_options_in_one_paragraph(trained, input_image, tmp_path, capsys, extra, says):
    np.savetxt(tmp_path / "codes.txt", np.zeros((2, 5)))
    values = {"image": str(input_image), "codes": str(tmp_path / "codes.txt"), "missing": str(tmp_path / "no.png")}
    argv = [str(input_image), "--checkpoint", str(trained), "--output", str(tmp_path / "out"),
            *(word.format(**values) for word in extra)]
    assert load_script("scripts/translate.py").main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    for text in says:
        assert text in err, (text, err)
    assert not (tmp_path / "out").exists()


def test_a_bicyclegan_checkpoint_folder_without_our_files_encodes_references_as_its_run_folder_does(
        trained, input_image, paired_root, tmp_path):
    """BicycleGAN's own folders hold only latest_net_{G,E,D,D2}.pth: the generator and the encoder are
    recognised from their weights (the encoder's normalisation, which leaves no weights, tried)."""
    from models.inference.translator import Translator
    for name in ("G", "E", "D", "D2"):
        shutil.copy(trained / f"latest_net_{name}.pth", tmp_path / f"latest_net_{name}.pth")
    reference = np.asarray(Image.open(sorted((paired_root / "test").glob("*.png"))[1]).convert("RGB").crop(
        (32, 0, 64, 32)))  # a 32 px B: resized to the 128 px the encoder takes
    image = np.asarray(Image.open(input_image))
    ours = Translator.load(trained, device="cpu")
    theirs = Translator.load(tmp_path, device="cpu")
    assert theirs.latent_size == 3 and theirs.encoder is not None
    assert np.array_equal(theirs.translate(image, reference=reference), ours.translate(image, reference=reference))
    assert np.allclose(theirs.encode(reference), ours.encode(reference))


def test_translate_py_never_writes_a_sample_over_an_input(trained, input_image, tmp_path, capsys):
    """out/sub/a_sample0.png is an input too: in/sub/a.png's first sample would overwrite it, so a.png is
    skipped. (An --output that is an input file's own folder is refused before anything is written.)"""
    (tmp_path / "in" / "sub").mkdir(parents=True)
    (tmp_path / "out" / "sub").mkdir(parents=True)
    for name in ("a.png", "b.png"):
        shutil.copy(input_image, tmp_path / "in" / "sub" / name)
    shutil.copy(input_image, tmp_path / "out" / "sub" / "a_sample0.png")
    before = (tmp_path / "out" / "sub" / "a_sample0.png").read_bytes()
    result = run_in_process("scripts/translate.py", str(tmp_path / "in"),
                            str(tmp_path / "out" / "sub" / "a_sample0.png"), "--checkpoint", str(trained), "--output",
                            str(tmp_path / "out"), "--n_samples", "2", capsys=capsys)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "sub" / "a_sample0.png").read_bytes() == before
    assert f"its output {tmp_path / 'out' / 'sub' / 'a_sample0.png'} would overwrite the input" in result.stdout
    assert not (tmp_path / "out" / "sub" / "a_sample1.png").exists()
    assert (tmp_path / "out" / "sub" / "b_sample0.png").exists() \
        and (tmp_path / "out" / "sub" / "b_sample1.png").exists()
