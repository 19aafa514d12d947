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
tests/bad_flags_and_paths.py; the image cases: tests/bad_images.py; every table in one list: tests/bad_corpus.py.
A case may also ask that its inputs stay byte-identical and nothing be written (`Setup.unchanged`,
`Setup.absent`: no tool writes over what it reads, tests/bad_tools_overwrite.py), that it run under a memory
limit so that an allocation sized by an unchecked number fails it (`Setup.memory_cap`, tests/bad_sizes.py),
and that the fix its refusal suggests be run and succeed (`Setup.suggestion`).
"""
from __future__ import annotations

import pickle
import shutil
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from bad_corpus import CASES
from bad_input_kit import PIX, SMALL, Case, execute, snapshot
from conftest import FAST_FLAGS, ROOT, run_in_process, run_script
from helpers import Payload
from util.errors import exits_on_user_error


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


# ================================================================================== the demo's arguments
def demo_sh(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, bool]:
    """`bash scripts/demo.sh args` run as a copy beside a scripts/setup.sh that only notes that it ran (and
    fails, ending the demo there): its result, and whether it went on to install."""
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    shutil.copy(ROOT / "scripts" / "demo.sh", scripts / "demo.sh")
    installed = tmp_path / "installed"
    (scripts / "setup.sh").write_text(f"touch '{installed}'\nexit 3\n")
    result = subprocess.run(["bash", str(scripts / "demo.sh"), *args], capture_output=True, text=True, timeout=60)
    return result, installed.exists()


@pytest.mark.parametrize("args, names", [
    (["sb", "--seed", "4294967296"], ("--seed 4294967296", "0 to 4294967295")),  # the issue's: one past train.py's
    (["cut", "--seed", "99999999999999999999999"], ("0 to 4294967295",)),  # past what bash's integers hold
    (["--seed", "-1"], ("--seed N",)),
    (["pix2pix", "--seed"], ("--seed N",)),
    (["cyclegan", "--epochs", "3"], ("--seed N",)),
    (["pix2pixhd"], ("unknown demo 'pix2pixhd'",)),
])
def test_demo_sh_refuses_arguments_before_installing_anything(args, names, tmp_path):
    """The demo installs, makes its dataset and trains for minutes: a seed train.py would refuse, or any
    other argument it cannot take, is refused first, in one paragraph, exit status 2."""
    result, installed = demo_sh(tmp_path, *args)
    assert_user_error(result, *names)
    assert not installed


def test_demo_sh_takes_every_seed_train_py_takes(tmp_path):
    """The largest seed train.py takes (util/flag_types.py) goes on to the installation."""
    from util.flag_types import MAX_SEED

    result, installed = demo_sh(tmp_path, "sb", "--seed", str(MAX_SEED))
    assert installed and result.returncode == 3, result.stderr


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


def test_memory_running_out_ends_an_entry_point_in_one_paragraph_naming_the_flags_that_size_it(capsys):
    # Each size flag has its own range, but their product can still exceed the machine (--ngf 4096 asked for
    # 4.8 GB in its first layer); every entry point's main goes through exits_on_user_error with its own advice.
    @exits_on_user_error(memory_advice="lower --batch_size")
    def main(error: BaseException) -> int:
        raise error

    cpu_allocator = RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
                                 "memory: you tried to allocate 4831838208 bytes. Error code 12\n(a second line)")
    in_a_worker = RuntimeError("Caught MemoryError in DataLoader worker process 0.\nOriginal Traceback (most recent "
                               "call last):\n  File \"x.py\", line 1, in f\nMemoryError: Unable to allocate 3.00 GiB")
    for error, what in ((MemoryError(), "MemoryError"), (cpu_allocator, "4831838208 bytes"),
                        (in_a_worker, "Unable to allocate 3.00 GiB")):
        assert main(error) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: out of memory") and len(err.strip().splitlines()) == 1
        assert what in err and "lower --batch_size" in err
    with pytest.raises(RuntimeError, match="a bug keeps its traceback"):
        main(RuntimeError("a bug keeps its traceback"))
