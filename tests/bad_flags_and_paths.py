"""Corpus cases of tests/test_bad_input.py for flags and paths: numbers out of range, flags that do
not fit together, folders that cannot be written, checkpoints of another run, and what the
reference writes or documents (module.-prefixed checkpoints, --norm sync_batch/sync_instance)."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from PIL import Image

from bad_input_kit import CYCLE, NAME, PIX, Case, Setup, aligned, eval_args, random_pixels, run_args, train_in_process


def flag_refused(*flags: str, names: tuple = (), script: str = "train.py") -> Callable[[Path], Setup]:
    """Valid input except `flags`; the refusal must name the flag (and `names`)."""
    def build(work: Path) -> Setup:
        aligned(work / "data" / ("train" if script == "train.py" else "test"), 2)
        args = run_args(work, *PIX, *flags) if script == "train.py" else eval_args(work, *flags)
        return Setup(args, stderr_has=(flags[0], *names))
    return build


def flag_case(*flags: str, names: tuple = (), script: str = "train.py", parse_only: bool = True) -> Case:
    return Case(f"{' '.join(flags)} is refused by {script} naming {flags[0]}",
                flag_refused(*flags, names=names, script=script), 2, script=script, parse_only=parse_only)


def b_save_best_no_metric(work: Path) -> Setup:
    aligned(work / "data" / "train", 2)
    aligned(work / "data" / "val", 2)
    return Setup(run_args(work, *PIX, "--val_freq", "1", "--save_best", "LPIPS_Q"),
                 stderr_has=("--save_best LPIPS_Q", "PSNR (higher is better)"))


def a_file(work: Path) -> Path:
    path = work / "notes.txt"
    path.write_text("a regular file where a folder is expected\n")
    return path


def b_checkpoints_dir_under_a_file(work):
    aligned(work / "data" / "train", 2)
    args = run_args(work, *PIX) + ["--checkpoints_dir", str(a_file(work) / "ck")]
    return Setup(args, stderr_has=("--checkpoints_dir", a_file(work), "is a file"))


def b_results_dir_under_a_file(work):
    aligned(work / "data" / "test", 1)
    args = eval_args(work) + ["--results_dir", str(a_file(work) / "results")]
    return Setup(args, stderr_has=("--results_dir", a_file(work), "is a file"))


def b_dataroot_is_a_file(work):
    return Setup(run_args(work, *PIX, data=a_file(work)), stderr_has=("--dataroot", a_file(work), "is a file"))


def b_gpu_ids_without_cuda(work):
    aligned(work / "data" / "train", 2)
    setup = Setup(run_args(work, *PIX, "--gpu_ids", "0"), stderr_has=("--gpu_ids 0", "no CUDA GPU"),
                  stderr_lacks=("--device cuda",), env={"CUDA_VISIBLE_DEVICES": ""})  # no GPU on any machine
    return setup


def b_continue_train_without_checkpoint(work):
    aligned(work / "data" / "train", 2)
    return Setup(run_args(work, *PIX, "--continue_train", "--name", "never_trained"),
                 stderr_has=("--continue_train", work / "ck" / "never_trained"))


def trained_pix2pix(work: Path) -> None:
    """A real (tiny) pix2pix run in the case's run folder: weights, training state, architecture.json."""
    aligned(work / "data" / "train", 2)
    train_in_process(run_args(work, *PIX))


def b_resume_with_another_model(work):
    from models.training.training_state import FORMAT_VERSION, STATE_SUFFIX
    run_dir = work / "ck" / NAME
    run_dir.mkdir(parents=True)
    torch.save({"format": FORMAT_VERSION, "progress": {"epoch": 1, "images_done": 1, "total_iters": 1}, "seed": 0,
                "world_size": 1, "model": {"networks": {"G": {}, "D": {}}}, "ranks": []},  # a pix2pix run's
               run_dir / f"latest{STATE_SUFFIX}")
    for domain in ("trainA", "trainB"):
        (work / "data" / domain).mkdir(parents=True)
        for i in range(2):
            Image.fromarray(random_pixels(i, 32, 32)).save(work / "data" / domain / f"{i}.png")
    return Setup(run_args(work, *CYCLE, "--continue_train"), stderr_has=("--model cycle_gan", "D, G", "another model"))


def b_resume_with_another_netG(work):
    trained_pix2pix(work)
    return Setup(run_args(work, "--model", "pix2pix", "--netG", "resnet_9blocks", "--continue_train"),
                 stderr_has=("train_state.pth", "--netG resnet_6blocks", "--netG resnet_9blocks"))


def b_checkpoint_saved_from_ddp_wrapper(work):
    from models import networks  # here, not at import: the corpus builds it in its own folder
    aligned(work / "data" / "test", 1)
    net = networks.define_G(3, 3, 8, "resnet_6blocks", "batch", True)  # eval_args: pix2pix's defaults
    ckpt = work / "ck" / NAME / "latest_net_G.pth"
    ckpt.parent.mkdir(parents=True)
    torch.save({f"module.{key}": value for key, value in net.state_dict().items()}, ckpt)
    return Setup(eval_args(work), stdout_has=(f"note: {ckpt}", "'module.'"))


def b_reference_norm_name(norm: str) -> Callable[[Path], Setup]:
    def build(work):
        aligned(work / "data" / "train", 2)
        return Setup(run_args(work, *PIX, "--norm", norm), stdout_has=(f"norm: {NORM_MEANS[norm]}",))
    return build


NORM_MEANS = {"sync_batch": "syncbatch", "sync_instance": "instance"}  # what opt.txt shows


FLAG_AND_PATH_CASES = [
    # numbers out of range, refused when parsed, naming the flag and the allowed range
    flag_case("--batch_size", "0", names=(">= 1",), parse_only=False),
    flag_case("--amp", "bf16", "--dtype", "float64", names=("bfloat16", "--dtype float64")),
    Case("--save_best LPIPS_Q (no metric) is refused naming --save_best", b_save_best_no_metric, 2),
    flag_case("--max_dataset_size", "0", names=(">= 1",)),
    flag_case("--load_size", "0", "--crop_size", "0", names=(">= 1",)),
    flag_case("--crop_size", "-32", names=(">= 1",)),
    flag_case("--ngf", "0"),
    flag_case("--num_threads", "-1", names=(">= 0",)),
    flag_case("--lr", "-1", names=("> 0",)),
    flag_case("--lr", "1e300", names=("more than float32 holds",)),
    flag_case("--lr", "3e38", names=("/ (1 - --beta1 0.5) = 6e+38", "lower --lr")),
    flag_case("--beta1", "1.5", names=("< 1",)),
    flag_case("--save_epoch_freq", "0"),
    flag_case("--lr_decay_iters", "0", "--lr_policy", "step"),
    flag_case("--warmup_epochs", "-1", names=(">= 0",)),
    flag_case("--warmup_epochs", "3", "--n_epochs", "1", "--n_epochs_decay", "1", names=("longer than the run",)),
    flag_case("--scale_lr", "cubic", names=("linear", "sqrt")),
    flag_case("--display_port", "70000", names=("65535",)),
    flag_case("--display_ncols", "-1"),
    flag_case("--ddp_timeout", "0"),
    flag_case("--lambda_L1", "-100"),
    flag_case("--n_epochs", "0", "--n_epochs_decay", "0", names=("no epoch",)),
    flag_case("--epoch_count", "5", names=("past the last epoch",)),
    flag_case("--suffix", "{nosuch}", names=("nosuch",)),
    flag_case("--gpu_ids", "zero"),
    flag_case("--dataset_mode", "single", names=("aligned", "unaligned")),
    flag_case("--display_winsize", "0", script="test.py"),
    flag_case("--num_test", "0", script="test.py", parse_only=False),
    flag_case("--aspect_ratio", "0", script="test.py"),
    flag_case("--load_iter", "-1", script="test.py"),
    flag_case("--tile", "-5", script="test.py"),
    flag_case("--results_layout", "folders", names=("ours", "original"), script="test.py"),
    Case("--gpu_ids 0 without a GPU is refused naming --gpu_ids, not --device", b_gpu_ids_without_cuda, 2),
    # paths
    Case("--checkpoints_dir under a regular file is refused naming it", b_checkpoints_dir_under_a_file, 2,
         parse_only=True),
    Case("--results_dir under a regular file is refused by test.py naming it", b_results_dir_under_a_file, 2,
         script="test.py", parse_only=True),
    Case("--dataroot naming a regular file is refused saying it is a file", b_dataroot_is_a_file, 2),
    Case("--continue_train without any checkpoint is refused naming the run folder",
         b_continue_train_without_checkpoint, 2),
    Case("--continue_train with another --model is refused naming the models", b_resume_with_another_model, 2),
    Case("--continue_train with another --netG is refused naming the --netG it was trained with",
         b_resume_with_another_netG, 2),
    # what the reference writes or documents, accepted
    Case("checkpoint saved from a DDP wrapper (module. keys) loads in test.py with a note",
         b_checkpoint_saved_from_ddp_wrapper, 0, script="test.py"),
    Case("--norm sync_batch from the reference README trains (as syncbatch)", b_reference_norm_name("sync_batch"), 0),
    Case("--norm sync_instance from the reference README trains (as instance)", b_reference_norm_name("sync_instance"),
         0),
]
