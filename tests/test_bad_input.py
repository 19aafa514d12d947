"""Bad input makes train.py/test.py exit with status 2 and one clear paragraph on stderr that
names the offending path or flag -- never a traceback -- and leaves existing checkpoints alone;
input that is merely unusual (other channel counts, bit depths, tiny images that get resized)
trains normally. A diverging run (e.g. a far too high --lr) stops at the first non-finite loss
without overwriting the last good checkpoint.

`test_bad_input_corpus` is the table of cases: each builds a small dataset (and checkpoint) in
its own folder, runs the script and checks the exit status, the message and the checkpoint already
in the run folder. A case runs the script's main(argv) in the test process (`run_in_process`: the
same exit status, output and files, without ~2 s of interpreter start-up each); a case refused by
the option parser (`parse_only`) runs only its parse(argv), the scripts' first step. A few run as
`python <script>`, as a user would (`own_process`): those whose environment matters, the second run
beside a first one, and representatives that keep the real scripts' stderr proven to be the one
paragraph and nothing else -- in the test process Python warnings go to pytest, not to stderr:
a test.py refusal and a run that proceeds with a warning in the corpus, and a train.py refusal met
in a DataLoader worker process (`test_truncated_jpeg_found_during_training...`).
What a case is and how it runs: tests/bad_input_kit.py; the flag and path cases:
tests/bad_flags_and_paths.py; the image cases are here. A case may also ask that its inputs stay
byte-identical and nothing be written (`Setup.unchanged`, `Setup.absent`: no tool writes over what it
reads, tests/bad_tools_overwrite.py), that it run under a memory limit so that an allocation sized by an
unchecked number fails it (`Setup.memory_cap`, tests/bad_sizes.py), and that the fix its refusal suggests
be run and succeed (`Setup.suggestion`).
"""
from __future__ import annotations

import os
import pathlib
import pickle
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from bad_augment import AUGMENT_CASES
from bad_data_and_env import DATA_AND_ENV_CASES
from bad_cut import CUT_CASES
from bad_damaged_files import DAMAGED_FILE_CASES
from bad_flags_and_paths import FLAG_AND_PATH_CASES
from bad_resume_flags import RESUME_FLAG_CASES
from bad_hires import HIRES_CASES
from bad_empty_epochs import EMPTY_EPOCH_CASES
from bad_flag_combinations import FLAG_COMBINATION_CASES
from bad_sizes import SIZE_CASES
from bad_tools_overwrite import TOOL_OVERWRITE_CASES
from bad_volumes import VOLUME_CASES
from bad_visdom_server import VISDOM_SERVER_CASES
from bad_input_kit import (CYCLE, NAME, PIX, SMALL, Case, Setup, random_pixels, aligned, eval_args, execute, mode_of,
                           run_args, snapshot, train_in_process)
from conftest import FAST_FLAGS, ROOT, run_in_process, run_script


def assert_user_error(result, *must_name: str) -> str:
    """Exit 2, no traceback, a single paragraph on stderr naming everything in `must_name`."""
    err = result.stderr
    assert result.returncode == 2, f"exit {result.returncode}\nstdout:\n{result.stdout[-3000:]}\nstderr:\n{err[-3000:]}"
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err  # one paragraph, nothing else
    assert lines[0].startswith("error: "), err
    for text in must_name:
        assert str(text) in lines[0], (text, err)
    return lines[0]


def train(root: Path, ckpt: Path, *extra: str, name: str = "bad"):
    return run_script("train.py", "--dataroot", str(root), "--name", name, *FAST_FLAGS, *SMALL,
                      "--checkpoints_dir", str(ckpt), *extra)


def write_aligned(folder: Path, count: int, ext: str = ".png") -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    paths = []
    for i in range(count):
        path = folder / f"{i:04d}{ext}"
        Image.fromarray(rng.integers(0, 256, (32, 64, 3), dtype=np.uint8)).save(path)
        paths.append(path)
    return paths


def preexisting_checkpoint(ckpt: Path, name: str = "bad", net: str = "G") -> tuple[Path, bytes]:
    """A checkpoint from an earlier run in the run folder, which a failing run must not touch."""
    path = ckpt / name / f"latest_net_{net}.pth"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"weight": torch.arange(6.0)}, path)
    return path, path.read_bytes()


# ================================================================================== the corpus
# ---------------------------------------------------------------------------------- image inputs
def with_bad_file(work: Path, content: bytes, index: int = 0, count: int = 3) -> Path:
    paths = aligned(work / "data" / "train", count)
    paths[index].write_bytes(content)
    return paths[index]


def truncated_jpeg(work: Path) -> Path:
    # The header is intact, so nothing is noticed before training; the first image is read
    # before the loop starts, so the broken one is the last and is met inside the epoch.
    paths = aligned(work / "data" / "train", 4, ext=".jpg")
    data = paths[-1].read_bytes()
    paths[-1].write_bytes(data[: len(data) // 2])
    return paths[-1]


def b_empty_dataroot(work):
    (work / "data").mkdir()
    return Setup(run_args(work, *CYCLE), stderr_has=(work / "data",))


def b_missing_trainB(work):
    for i in range(2):
        (work / "data" / "trainA").mkdir(parents=True, exist_ok=True)
        Image.fromarray(random_pixels(i, 32, 32)).save(work / "data" / "trainA" / f"{i}.png")
    return Setup(run_args(work, *CYCLE), stderr_has=(work / "data" / "trainB", "--dataroot"))


def b_zero_byte(work):
    bad = with_bad_file(work, b"")
    return Setup(run_args(work, *PIX), stderr_has=(bad, "empty (0 bytes)", "remove or replace"))


def b_text_named_png(work):
    bad = with_bad_file(work, b"this is not an image\n", index=1)
    return Setup(run_args(work, *PIX), stderr_has=(bad, "not an image", "this is not an image"))


def b_git_lfs_pointer(work):
    bad = with_bad_file(work, b"version https://git-lfs.github.com/spec/v1\noid sha256:0123\nsize 4711\n", index=2)
    return Setup(run_args(work, *PIX), stderr_has=(bad, "git lfs pull"))


def b_unreadable_header(work):
    png = (work / "probe.png")
    Image.fromarray(random_pixels(0)).save(png)
    bad = with_bad_file(work, png.read_bytes()[:40], index=1)  # signature and part of the IHDR chunk
    return Setup(run_args(work, *PIX), stderr_has=(bad, "cannot read image"))


def b_zero_byte_skipped(work):
    bad = with_bad_file(work, b"", index=2)
    return Setup(run_args(work, *PIX, "--skip_bad_images"), stderr_has=("warning", bad, "--skip_bad_images"))


def b_truncated_jpeg(work):
    bad = truncated_jpeg(work)
    return Setup(run_args(work, *PIX), stderr_has=(bad, "truncated"),
                 stdout_has=("The number of training images = 4",))


def b_truncated_jpeg_skipped(work):
    bad = truncated_jpeg(work)
    return Setup(run_args(work, *PIX, "--skip_bad_images"), stderr_has=("warning", bad, "truncated"),
                 stdout_has=("The number of training images = 4",))


def tiny_pair(work: Path) -> Path:
    """A 2x1 A|B image: A and B are one pixel each."""
    paths = aligned(work / "data" / "train", 3)
    Image.new("RGB", (2, 1), (200, 30, 30)).save(paths[1])
    return paths[1]


def b_one_pixel_resized(work):
    tiny = tiny_pair(work)
    return Setup(run_args(work, *PIX), stderr_lacks=(tiny,))  # resize_and_crop scales it to 32x32


def b_one_pixel_preprocess_none(work):
    tiny = tiny_pair(work)
    return Setup(run_args(work, *PIX, "--preprocess", "none"),
                 stderr_has=(tiny, "1x1", "--preprocess none", "--netG resnet_6blocks", "resize_and_crop"))


def b_mixed_sizes_in_a_batch(work):
    paths = aligned(work / "data" / "train", 3)
    Image.fromarray(random_pixels(9, 48, 96)).save(paths[2])  # A and B 48x48 instead of 32x32
    return Setup(run_args(work, *PIX, "--preprocess", "none", "--batch_size", "2"),
                 stderr_has=(paths[0], paths[2], "--batch_size 2", "32x32", "48x48"))


def b_odd_width(work):
    paths = aligned(work / "data" / "train", 3)
    Image.fromarray(random_pixels(5, 32, 63)).save(paths[1])
    return Setup(run_args(work, *PIX), stderr_has=(paths[1], "63x32", "even width", f"re-save {paths[1]} as A|B"))


def b_rgba(work):
    def make(i):
        px = random_pixels(i, channels=4)
        px[:8, :, 3] = 0  # a fully transparent band
        return Image.fromarray(px)
    paths = aligned(work / "data" / "train", 2, make)
    assert mode_of(paths[0]) == "RGBA"
    return Setup(run_args(work, *PIX), stderr_lacks=(paths[0],))


def b_16bit(work):
    def make(i):
        return Image.fromarray(np.random.default_rng(i).integers(0, 65536, (32, 64), dtype=np.uint16))
    paths = aligned(work / "data" / "train", 2, make)
    assert mode_of(paths[0]).startswith("I")  # I;16 (or I in older Pillow)
    return Setup(run_args(work, *PIX), stderr_lacks=(paths[0],))


def b_gray_with_input_nc_3(work):
    paths = aligned(work / "data" / "train", 2, lambda i: Image.fromarray(random_pixels(i)).convert("L"))
    return Setup(run_args(work, *PIX, "--input_nc", "3", "--output_nc", "3"), stderr_lacks=(paths[0],))


def b_other_modes(work):
    makers = [lambda i: Image.fromarray(random_pixels(i)).convert("P"),     # palette
              lambda i: Image.fromarray(random_pixels(i, channels=4)).convert("LA"),  # gray + alpha
              lambda i: Image.fromarray(random_pixels(i)).convert("1")]     # 1 bit
    paths = aligned(work / "data" / "train", 3, lambda i: makers[i](i))
    cmyk = work / "data" / "train" / "0003.jpg"
    Image.fromarray(random_pixels(3)).convert("CMYK").save(cmyk)
    return Setup(run_args(work, *PIX, "--input_nc", "1"), stderr_lacks=(*paths, cmyk))


def b_wrong_direction(work):
    aligned(work / "data" / "train", 2)
    return Setup(run_args(work, *PIX, "--direction", "AB"), stderr_has=("--direction", "invalid choice", "AtoB", "BtoA"))


def b_unet_256_crop_100(work):
    aligned(work / "data" / "train", 2)
    return Setup(run_args(work, "--model", "pix2pix", "--netG", "unet_256", "--load_size", "100", "--crop_size", "100"),
                 stderr_has=("--netG unet_256", "--crop_size", "100"))


def b_checkpoint_not_weights(work):
    aligned(work / "data" / "test", 1)
    ckpt = work / "ck" / NAME / "latest_net_G.pth"
    ckpt.parent.mkdir(parents=True)
    torch.save({"epoch": 3, "lr": 0.0002, "note": "a training log, not network weights"}, ckpt)
    return Setup(eval_args(work), stderr_has=(ckpt, "network weights"))


def b_checkpoint_of_other_netG(work):
    aligned(work / "data" / "train", 2)
    aligned(work / "data" / "test", 1)
    train_in_process(run_args(work, *PIX))  # a real run writes weights + architecture.json
    ckpt = work / "ck" / NAME / "latest_net_G.pth"
    return Setup(eval_args(work, "--netG", "resnet_9blocks"),
                 stderr_has=(ckpt, "--netG resnet_6blocks", "--netG resnet_9blocks"))


LOSS_LINE = re.compile(r"\(epoch: \d+, iters: \d+")


def b_second_concurrent_run(work):
    """A first run that trains "forever" holds the run folder; the second must leave it alone."""
    aligned(work / "data" / "train", 2)
    run_dir = work / "ck" / NAME
    out = work / "first.out"
    never = ["--n_epochs", "100000", "--print_freq", "1", "--save_epoch_freq", "100000",
             "--save_latest_freq", "100000000", "--display_freq", "100000000", "--update_html_freq", "100000000"]
    with open(out, "w") as log:
        first = subprocess.Popen([sys.executable, str(ROOT / "train.py"), *run_args(work, *PIX), *never],
                                 cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                 env={**os.environ, "OMP_NUM_THREADS": "1"})

    def stop_first():
        if first.poll() is None:
            first.send_signal(signal.SIGKILL)  # not SIGTERM: that would make it save a checkpoint
        first.wait(timeout=60)

    deadline = time.monotonic() + 150
    while not ((run_dir / ".run.lock").exists() and LOSS_LINE.search(out.read_text())):
        if first.poll() is not None or time.monotonic() > deadline:
            stop_first()
            raise AssertionError(f"the first run did not start training:\n{out.read_text()[-3000:]}")
        time.sleep(0.1)
    lock_text = (run_dir / ".run.lock").read_text()
    options = (run_dir / "train_opt.txt").read_bytes()
    assert f"pid {first.pid}" in lock_text

    def after():
        assert first.poll() is None, "the second run disturbed the first one"
        assert (run_dir / ".run.lock").read_text() == lock_text
        assert (run_dir / "train_opt.txt").read_bytes() == options  # the second run's options differ

    return Setup(run_args(work, *PIX, "--lr", "0.001"), stderr_has=(run_dir, "another training run", f"pid {first.pid}"),
                 after=after, cleanup=[stop_first])


CASES = [
    # dataset folders
    Case("empty dataroot folder is refused naming it", b_empty_dataroot, 2),
    Case("unaligned data without trainB is refused naming trainB", b_missing_trainB, 2),
    # files that are not readable images: refused before training, naming the file
    Case("zero-byte png is refused naming the file", b_zero_byte, 2),
    Case("text file named png is refused naming the file and showing its text", b_text_named_png, 2),
    Case("git-lfs pointer named png is refused suggesting git lfs pull", b_git_lfs_pointer, 2),
    Case("png cut off inside its header is refused naming the file", b_unreadable_header, 2),
    Case("zero-byte file with --skip_bad_images proceeds with a warning naming it", b_zero_byte_skipped, 0),
    # damage behind an intact header: found during training
    Case("truncated jpeg found during training is refused naming it", b_truncated_jpeg, 2),
    Case("truncated jpeg with --skip_bad_images proceeds with a warning naming it", b_truncated_jpeg_skipped, 0,
         own_process=True),  # the representative of a run that proceeds with a warning
    # sizes
    Case("1-px image is resized by resize_and_crop and proceeds", b_one_pixel_resized, 0),
    Case("1-px image with --preprocess none is refused naming its size and the flag", b_one_pixel_preprocess_none, 2),
    Case("differently sized images with --preprocess none and --batch_size 2 are refused naming both",
         b_mixed_sizes_in_a_batch, 2),
    Case("odd-width aligned image is refused naming it and how to re-save it", b_odd_width, 2),
    # channel counts and bit depths are converted, not refused
    Case("rgba png proceeds", b_rgba, 0),
    Case("16-bit png proceeds", b_16bit, 0),
    Case("grayscale images with --input_nc 3 proceed", b_gray_with_input_nc_3, 0),
    Case("palette, gray+alpha, 1-bit and cmyk images with --input_nc 1 proceed", b_other_modes, 0),
    # flags
    Case("wrong --direction value is refused listing AtoB and BtoA", b_wrong_direction, 2),
    Case("unet_256 with --crop_size 100 is refused naming --crop_size", b_unet_256_crop_100, 2),
    # checkpoints for test.py
    Case("non-weights pickle as checkpoint is refused by test.py naming it", b_checkpoint_not_weights, 2,
         script="test.py", own_process=True),  # the representative of test.py's refusals
    Case("checkpoint of another --netG is refused by test.py naming the file and the --netG to use",
         b_checkpoint_of_other_netG, 2, script="test.py"),
    # the run folder
    Case("second concurrent run on the same --name is refused by the run lock naming the folder",
         b_second_concurrent_run, 2, own_process=True),  # two processes on one folder, as two terminals
    *FLAG_AND_PATH_CASES,
    *RESUME_FLAG_CASES,
    *DATA_AND_ENV_CASES,
    *DAMAGED_FILE_CASES,
    *HIRES_CASES,
    *AUGMENT_CASES,
    *CUT_CASES,
    *TOOL_OVERWRITE_CASES,
    *VISDOM_SERVER_CASES,
    *EMPTY_EPOCH_CASES,
    *VOLUME_CASES,
    *SIZE_CASES,
    *FLAG_COMBINATION_CASES,
]


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[case.id.replace(" ", "_") for case in CASES])
def test_bad_input_corpus(case: Case, capsys, tmp_path):
    outcome = execute(case, tmp_path, capsys)
    result, setup = outcome.result, outcome.setup
    out, err = result.stdout, result.stderr
    context = f"exit {result.returncode}\nstdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}"
    assert result.returncode == case.exit, context
    assert "Traceback" not in err, context
    for text in setup.stderr_has:
        assert str(text) in err, (str(text), context)
    for text in setup.stdout_has:
        assert str(text) in out, (str(text), context)
    for text in setup.stderr_lacks:
        assert str(text) not in err, (str(text), context)
    for text in setup.stdout_lacks:
        assert str(text) not in out, (str(text), context)
    assert snapshot(setup.unchanged) == outcome.inputs_before, f"an input was changed or added to\n{context}"
    for path in setup.absent:
        assert not Path(path).exists(), f"{path} was written\n{context}"
    if case.exit == 0:
        assert not any(line.startswith("error:") for line in err.splitlines()), context
        if case.own_process:  # a representative: a real process's stderr is the warning and nothing else
            lines = err.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("warning: "), context
        return
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), context
    for path, before in outcome.guards.items():
        assert path.read_bytes() == before, f"{path} was changed by a refused run"
    if setup.suggestion is not None:  # the fix the message offers works
        fixed = run_in_process(case.script, *setup.suggestion(setup.args, lines[0]), capsys=capsys)
        assert fixed.returncode == 0 and "error:" not in fixed.stderr, \
            f"the suggested command {fixed.args} failed: exit {fixed.returncode}\n{fixed.stderr[-3000:]}"


# ================================================================================== other cases
# ---------------------------------------------------------------------------------- dataset folders
def test_missing_dataroot_exits_2_naming_the_path(tmp_path, capsys):
    missing = tmp_path / "no_such_dataset"
    result = run_in_process("train.py", "--dataroot", str(missing), "--name", "bad", "--checkpoints_dir", str(tmp_path),
                            "--num_threads", "0", capsys=capsys)
    assert_user_error(result, missing, "--dataroot")


@pytest.mark.parametrize("script", ["test.py"])  # single layout; train.py's (unaligned) is in the corpus
def test_empty_dataroot_exits_2_naming_the_path(script, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run_in_process(script, "--dataroot", str(empty), "--name", "bad", "--checkpoints_dir", str(tmp_path),
                            "--num_threads", "0", capsys=capsys)
    assert_user_error(result, empty)


# ---------------------------------------------------------------------------------- unreadable images
@pytest.mark.slow
@pytest.mark.parametrize("num_threads", ["2"])  # in a DataLoader worker; with "0" it is a corpus case
def test_truncated_jpeg_found_during_training_exits_2_naming_it_and_keeps_checkpoints(num_threads, tmp_path):
    # The first image is read before training starts; the truncated one is the last, so it is
    # only met inside the epoch loop -- in a DataLoader worker process when num_threads > 0. A real
    # `python train.py`: workers forked from the test process would inherit its threads and capture,
    # and this is the representative of train.py's refusals, its stderr the one paragraph.
    paths = write_aligned(tmp_path / "facades" / "train", 4, ".jpg")
    data = paths[-1].read_bytes()
    paths[-1].write_bytes(data[: len(data) // 2])
    ckpt = tmp_path / "ck"
    old, old_bytes = preexisting_checkpoint(ckpt)
    result = train(tmp_path / "facades", ckpt, *PIX, "--num_threads", num_threads)
    assert "The number of training images = 4" in result.stdout  # training had started
    assert_user_error(result, paths[-1])
    assert old.read_bytes() == old_bytes


# ---------------------------------------------------------------------------------- checkpoints for test.py
class Payload:
    """Unpickling this runs code (touches a marker file); a weights file must never do that."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return pathlib.Path.touch, (pathlib.Path(self.marker),)


@pytest.mark.parametrize("writer", ["torch.save", "pickle.dump"])
def test_checkpoint_that_is_not_plain_weights_is_refused_without_running_it(writer, paired_root, tmp_path, capsys):
    marker = tmp_path / "code_was_run"
    ckpt_file = tmp_path / "ck" / "bad" / "latest_net_G.pth"
    ckpt_file.parent.mkdir(parents=True)
    with open(ckpt_file, "wb") as f:
        if writer == "torch.save":
            torch.save({"weight": Payload(marker)}, f)
        else:
            pickle.dump(Payload(marker), f)
    before = ckpt_file.read_bytes()
    # In the test process, where unpickling the payload would touch the marker as it would in a script's.
    result = run_in_process("test.py", "--dataroot", str(paired_root), "--name", "bad", *PIX, "--ngf", "8",
                            "--num_threads", "0", "--load_size", "32", "--crop_size", "32",
                            "--checkpoints_dir", str(tmp_path / "ck"), "--results_dir", str(tmp_path / "res"),
                            capsys=capsys)
    assert_user_error(result, ckpt_file)
    assert not marker.exists()
    assert ckpt_file.read_bytes() == before


def test_missing_checkpoint_for_test_py_names_the_file_and_epoch_flag(paired_root, tmp_path, capsys):
    run_dir = tmp_path / "ck" / "facades"
    run_dir.mkdir(parents=True)
    (run_dir / "latest_net_G.pth").write_bytes(b"placeholder")
    result = run_in_process("test.py", "--dataroot", str(paired_root), "--name", "facades", *PIX, "--ngf", "8",
                            "--num_threads", "0", "--load_size", "32", "--crop_size", "32", "--epoch", "7",
                            "--checkpoints_dir", str(tmp_path / "ck"), "--results_dir", str(tmp_path / "res"),
                            capsys=capsys)
    message = assert_user_error(result, run_dir / "7_net_G.pth", "--epoch")
    assert "latest_net_G.pth" in message  # and says which checkpoints do exist


# ================================================================================== a diverging run
def finite_weights(path) -> bool:
    return all(torch.isfinite(t).all() for t in torch.load(path, weights_only=True).values() if t.is_floating_point())


@pytest.mark.slow
def test_diverging_run_stops_with_one_message_and_keeps_the_last_finite_checkpoint(unpaired_root, tmp_path, capsys):
    common = ["--dataroot", str(unpaired_root), "--name", "dv", "--checkpoints_dir", str(tmp_path), *FAST_FLAGS,
              "--load_size", "32", "--crop_size", "32", "--netG", "resnet_6blocks",
              "--no_html", "--no_progress", "--print_freq", "1000", "--model", "cycle_gan", "--save_epoch_freq", "1"]
    good = run_in_process("train.py", *common, "--n_epochs", "1", "--n_epochs_decay", "0", capsys=capsys)
    assert good.returncode == 0, good.stderr[-3000:]
    run_dir = tmp_path / "dv"
    saved = {p.name: p.read_bytes() for p in run_dir.glob("latest_*.pth")}
    assert len(saved) == 5  # four networks and the training state

    # Continue from those weights (the reference's way: --epoch_count) with a learning rate that
    # blows the weights up at once: the losses of the second step are no longer finite. A save is
    # due right after that step (--save_latest_freq 2), before any loss is printed: it must be refused.
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    bad = run_in_process("train.py", *common, "--continue_train", "--epoch_count", "2", "--n_epochs", "3",
                         "--n_epochs_decay", "0", "--lr", "1e30", "--save_latest_freq", "2", capsys=capsys)
    assert bad.returncode == 2, bad.stderr[-3000:]
    # ended by an error, train.main (called from Python) gives the caller's Ctrl-C and SIGTERM back
    assert {signum: signal.getsignal(signum) for signum in handlers} == handlers
    assert "Traceback" not in bad.stderr
    message = [line for line in bad.stderr.splitlines() if line.startswith("error: ")]
    assert len(message) == 1, bad.stderr
    assert "training diverged" in message[0] and "epoch 2, iteration 2 " in message[0], message[0]
    assert "G_A" in message[0] and "--lr" in message[0] and "1e+30" in message[0]
    assert {p.name: p.read_bytes() for p in run_dir.glob("latest_*.pth")} == saved
    assert all(finite_weights(run_dir / name) for name in saved if "_net_" in name)
    assert not (run_dir / "2_net_G_A.pth").exists()


# ================================================================================== epochs without a step
def test_an_epoch_without_a_step_is_judged_by_each_processs_share_under_any_launcher(tmp_path):
    """The refusal of an empty epoch (tests/bad_empty_epochs.py) counts the processes as the sampler deals the
    samples out: 4 samples on 2 processes are 2 each, too few for BicycleGAN's --batch_size 4."""
    import train
    from bad_empty_epochs import BICYCLE
    from options.train_options import TrainOptions
    from util.distributed import DistContext
    from util.errors import UserError

    common = ["--dataroot", str(tmp_path / "data"), "--checkpoints_dir", str(tmp_path / "ck"), "--load_size", "128",
              "--crop_size", "128"]
    bicycle = TrainOptions().parse([*common, *BICYCLE, "--batch_size", "4"])
    two = DistContext(world_size=2)
    with pytest.raises(UserError) as refused:
        train.check_epoch_has_steps(bicycle, two, 4)
    for text in ("holds 4 sample(s)", "each of the 2 process(es) takes 2", "--batch_size 4", "--batch_size 2",
                 "fewer processes"):
        assert text in str(refused.value), (text, str(refused.value))
    train.check_epoch_has_steps(bicycle, two, 8)  # 4 each: one step
    train.check_epoch_has_steps(bicycle, DistContext(), 4)  # one process takes all 4
    pix2pix = TrainOptions().parse([*common, "--model", "pix2pix", "--batch_size", "4"])
    train.check_epoch_has_steps(pix2pix, two, 1)  # an incomplete batch is trained on


# ================================================================================== NIfTI under a picture mode
def test_the_volume_mode_a_nifti_refusal_names_reads_the_same_folders(tmp_path, capsys):
    """The refusal of tests/bad_volumes.py ("NIfTI volumes for pix2pix's aligned mode ...") names a mode that
    reads those very files: its dataset is built from them (8-bit volumes: no --data_range needed)."""
    import numpy as np

    from bad_volumes import save_volume, volume
    from data import create_dataset
    from options.train_options import TrainOptions

    for side in "AB":
        for i in range(2):
            save_volume(tmp_path / "data" / f"train{side}" / f"{i}.nii.gz", (volume(i) * 255).astype(np.uint8))
    common = ["--dataroot", str(tmp_path / "data"), "--checkpoints_dir", str(tmp_path / "ck"), "--model", "pix2pix"]
    refused = run_in_process("train.py", *common, "--num_threads", "0", capsys=capsys)
    message = assert_user_error(refused, "--dataset_mode aligned_volume", f"--dataroot {tmp_path / 'data'}")
    mode = message.split("pass --dataset_mode ", 1)[1].split()[0]
    opt = TrainOptions().parse([*common, "--dataset_mode", mode, "--patch_size", "8", "--input_nc", "1",
                                "--output_nc", "1"])
    dataset = create_dataset(opt, 0).dataset
    assert len(dataset) == 2 and dataset[0]["A"].shape == (1, 8, 8, 8)
