"""Corpus cases of tests/test_bad_input.py for the scripts that write files: no tool writes over what
it reads. An output folder that is, lies inside or contains an input folder (given as it is, through
a relative path or a symbolic link) is refused before anything is written (util/safe_files.py), and
the dataset tools decode every image whole before writing one, so that a PNG or JPEG cut short after
its header is named instead of ending the tool half-way with "image file is truncated"."""
from __future__ import annotations

import os
from pathlib import Path

import torch
from PIL import Image

from bad_input_kit import PIX, Case, Setup, aligned, eval_args, random_pixels, run_args, suggested

TOOL = "scripts/combine_A_and_B.py"


def pair_folders(work: Path, count: int = 2, ext: str = ".png") -> tuple[Path, Path]:
    """work/D/A/train and work/D/B/train holding `count` images of the same names (the reference's layout)."""
    for side in "AB":
        folder = work / "D" / side / "train"
        folder.mkdir(parents=True)
        for i in range(count):
            Image.fromarray(random_pixels(i + (10 if side == "B" else 0), 32, 32)).save(folder / f"{i}{ext}")
    return work / "D" / "A", work / "D" / "B"


def cut_pixels(path: Path, keep: float = 0.6) -> Path:
    """Cut `path` short after its header: its size and mode still read, its pixels do not all decode."""
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    return path


def noisy_image(path: Path, size: int = 64) -> Path:
    """An image of random pixels (they do not compress: cutting the file cuts pixel data)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(random_pixels(7, size, size)).save(path, quality=95)
    return path


# ---------------------------------------------------------------------------------- combine_A_and_B.py
def b_combine_into_fold_A(work):
    """The issue's example: --fold_AB D/A replaced every image of D/A by its A|B pair."""
    fold_A, fold_B = pair_folders(work)
    return Setup(["--fold_A", str(fold_A), "--fold_B", str(fold_B), "--fold_AB", str(fold_A)],
                 stderr_has=("--fold_AB", f"--fold_A's split {fold_A / 'train'}", "replace its files",
                             "nothing was written", f"--fold_AB {fold_A}_AB"),
                 unchanged=(work / "D",), suggestion=suggested("--fold_AB"))


def b_combine_inside_fold_B(work):
    fold_A, fold_B = pair_folders(work)
    return Setup(["--fold_A", str(fold_A), "--fold_B", str(fold_B), "--fold_AB", str(fold_B / "pairs")],
                 stderr_has=(f"--fold_AB {fold_B / 'pairs'}", "lies inside", f"--fold_B {fold_B}"),
                 unchanged=(work / "D",))


def b_combine_through_a_link(work):
    fold_A, fold_B = pair_folders(work)
    (work / "out").symlink_to(fold_B)
    return Setup(["--fold_A", str(fold_A), "--fold_B", str(fold_B), "--fold_AB", str(work / "out")],
                 stderr_has=(str(work / "out"), "symbolic link", f"--fold_B's split {fold_B / 'train'}"),
                 unchanged=(work / "D", work / "out"))


def b_combine_relative_path(work):
    fold_A, fold_B = pair_folders(work)
    relative = os.path.relpath(fold_A, os.getcwd())  # the corpus runs the tool in this process, from here
    return Setup(["--fold_A", str(fold_A), "--fold_B", str(fold_B), "--fold_AB", relative],
                 stderr_has=(f"--fold_AB {relative}", "replace its files"), unchanged=(work / "D",))


def b_combine_truncated_png(work):
    fold_A, fold_B = pair_folders(work, 3)
    for side, folder in (("A", fold_A), ("B", fold_B)):
        noisy_image(folder / "train" / "2.png")
    bad = cut_pixels(fold_B / "train" / "2.png")
    return Setup(["--fold_A", str(fold_A), "--fold_B", str(fold_B), "--fold_AB", str(work / "AB"),
                  "--no_multiprocessing"],
                 stderr_has=(bad, "truncated", "remove or replace"), unchanged=(work / "D",), absent=(work / "AB",))


def b_combine_truncated_jpeg(work):
    fold_A, fold_B = pair_folders(work, 2, ".jpg")
    noisy_image(fold_A / "train" / "1.jpg")
    bad = cut_pixels(fold_A / "train" / "1.jpg", 0.5)
    return Setup(["--fold_A", str(fold_A), "--fold_B", str(fold_B), "--fold_AB", str(work / "AB")],
                 stderr_has=(bad, "truncated"), unchanged=(work / "D",), absent=(work / "AB",))


# ---------------------------------------------------------------------------------- the other dataset tools
def cyclegan_layout(work: Path, splits: tuple[str, ...] = ("trainA", "trainB")) -> Path:
    root = work / "D"
    for split in splits:
        for i in range(2):
            (root / split).mkdir(parents=True, exist_ok=True)
            Image.fromarray(random_pixels(i, 32, 32)).save(root / split / f"{i}.png")
    return root


def b_aligned_from_folders_named_A_and_B(work):
    """Folders A/ and B/ are split "": the aligned images would go to the dataset folder itself, around them."""
    root = cyclegan_layout(work, ("A", "B"))
    return Setup(["--dataset-path", str(root)], stderr_has=(f"the output folder {root}", "contains",
                                                            root / "A", "trainA and trainB"),
                 unchanged=(root,))


def b_aligned_truncated_png(work):
    root = cyclegan_layout(work)
    noisy_image(root / "trainA" / "1.png")
    noisy_image(root / "trainB" / "1.png")
    bad = cut_pixels(root / "trainA" / "1.png")
    return Setup(["--dataset-path", str(root)], stderr_has=(bad, "truncated"), unchanged=(root,),
                 absent=(root / "train",))


def b_split_into_source(work):
    source = work / "D" / "train"
    aligned(source, 4)
    return Setup(["--source", str(source), "--dest", str(work / "D"), "--ratios", "0.5,0.5", "--splits", "train,val",
                  "--mode", "move"],
                 stderr_has=("--dest", "is the input folder --source", f"--dest {source}_split"),
                 unchanged=(work / "D",), absent=(work / "D" / "val",), suggestion=suggested("--dest"))


def cityscapes_files(work: Path) -> tuple[Path, Path]:
    for split, name in (("train", "aachen_000000_000019"), ("val", "lindau_000000_000019")):
        city = name.split("_")[0]
        for folder, suffix in (("gtFine", "_gtFine_color.png"), ("leftImg8bit", "_leftImg8bit.png")):
            noisy_image(work / folder / split / city / f"{name}{suffix}")
    return work / "gtFine", work / "leftImg8bit"


def b_cityscapes_into_gtfine(work):
    gt, photos = cityscapes_files(work)
    return Setup(["--gtFine_dir", str(gt), "--leftImg8bit_dir", str(photos), "--output_dir", str(gt)],
                 stderr_has=(f"--output_dir {gt}", "--gtFine_dir", f"--output_dir {work / 'cityscapes_prepared'}"),
                 unchanged=(gt, photos), suggestion=suggested("--output_dir"))


def b_cityscapes_truncated_label(work):
    gt, photos = cityscapes_files(work)
    bad = cut_pixels(gt / "val" / "lindau" / "lindau_000000_000019_gtFine_color.png")
    return Setup(["--gtFine_dir", str(gt), "--leftImg8bit_dir", str(photos), "--output_dir", str(work / "out")],
                 stderr_has=(bad, "truncated", "Cityscapes zip"), unchanged=(gt, photos), absent=(work / "out",))


def b_demo_over_users_folder(work):
    mine = work / "demo_pix2pix"
    aligned(mine / "train", 2)
    return Setup(["--task", "pix2pix", "--out", str(work), "--size", "16", "--n_train", "2", "--n_test", "2"],
                 stderr_has=(mine, "not made by scripts/make_demo_dataset.py", "left alone"), unchanged=(mine,),
                 suggestion=suggested("--out"))


# ---------------------------------------------------------------------------------- train.py, test.py
def b_run_folder_inside_the_data(work):
    aligned(work / "data" / "train", 2)
    args = run_args(work, *PIX) + ["--checkpoints_dir", str(work / "data" / "train" / "runs")]
    return Setup(args, stderr_has=("--checkpoints_dir", "lies inside", work / "data" / "train",
                                   f"--checkpoints_dir {work / 'data'}_checkpoints"),
                 unchanged=(work / "data",), stdout_lacks=("The number of training images",),
                 suggestion=suggested("--checkpoints_dir"))


def b_results_inside_the_data(work):
    aligned(work / "data" / "test", 2)
    args = eval_args(work) + ["--results_dir", str(work / "data" / "test")]
    return Setup(args, stderr_has=("--results_dir", "lies inside", work / "data" / "test",
                                   f"--results_dir {work / 'data'}_results"), unchanged=(work / "data",))


def b_results_in_a_single_folder(work):
    aligned(work / "photos", 2)  # --model test reads --dataroot itself, recursively
    args = eval_args(work, data=work / "photos") + ["--model", "test", "--results_dir", str(work / "photos")]
    return Setup(args, stderr_has=("--results_dir", "lies inside", work / "photos"), unchanged=(work / "photos",))


# ---------------------------------------------------------------------------------- translate.py, export.py
def pictures(folder: Path, count: int = 2) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{i}.png" for i in range(count)]
    for i, path in enumerate(paths):
        Image.fromarray(random_pixels(i, 32, 32)).save(path)
    return paths


def picture_generator(folder: Path) -> Path:
    """A lone generator's weights (resnet_6blocks, ngf 8, batch norm, 3 -> 3 channels)."""
    from models import networks

    folder.mkdir(parents=True, exist_ok=True)
    torch.save(networks.define_G(3, 3, 8, "resnet_6blocks", "batch", True).state_dict(), folder / "latest_net_G.pth")
    return folder / "latest_net_G.pth"


def b_translate_into_its_input_folder(work):
    pictures(work / "in")
    weights = picture_generator(work / "ck")
    return Setup([str(work / "in"), "--checkpoint", str(weights), "--output", str(work / "in"), "--device", "cpu"],
                 stderr_has=(f"--output {work / 'in'}", "is the input folder INPUT",
                             f"--output {work / 'in'}_translated"),
                 unchanged=(work / "in",), suggestion=suggested("--output"))


def b_translate_around_its_input_folder(work):
    pictures(work / "D" / "in")
    return Setup([str(work / "D" / "in"), "--checkpoint", str(work / "ck"), "--output", str(work / "D")],
                 stderr_has=(f"--output {work / 'D'}", "contains", work / "D" / "in"), unchanged=(work / "D",))


def b_translate_a_file_beside_itself(work):
    first, _ = pictures(work / "in")
    return Setup([str(first), "--checkpoint", str(work / "ck"), "--output", str(work / "in")],
                 stderr_has=(f"the folder of the input {first}", "would replace it"), unchanged=(work / "in",))


def b_translate_glob_into_a_link(work):
    pictures(work / "in")
    (work / "link").symlink_to(work / "in")
    return Setup([str(work / "in" / "*.png"), "--checkpoint", str(work / "ck"), "--output", str(work / "link")],
                 stderr_has=("--output", "would replace it"), unchanged=(work / "in",))


def b_export_over_its_weights(work):
    weights = picture_generator(work / "w").rename(work / "w" / "generator.pt")  # its TorchScript export's name
    return Setup(["--weights", str(weights), "--netG", "resnet_6blocks", "--ngf", "8", "--norm", "batch",
                  "--formats", "torchscript", "--check_sizes", "32x32"],
                 stderr_has=("--weights", f"the torchscript export {weights}", "overwrite the input",
                             f"--export_dir {work / 'w' / 'export'}"), unchanged=(weights.parent,),
                 suggestion=suggested("--export_dir"))


def b_plot_over_its_log(work):
    log = work / "run" / "loss_log.txt"
    log.parent.mkdir()
    log.write_text("================ Training Loss ================\n"
                   "(epoch: 1, iters: 2, time: 0.1, data: 0.0) G: 1.0 D: 0.5\n")
    return Setup([str(log.parent), "-o", str(log)], stderr_has=(log, "the plot is drawn from"),
                 unchanged=(log.parent,))


def b_plot_into_a_folder(work):
    setup = b_plot_over_its_log(work)
    setup.args[-1] = str(work)  # -o: a folder
    setup.stderr_has = (f"--output {work}", "is a folder")
    return setup


TOOL_OVERWRITE_CASES = [
    # every script that writes files: never over, into or around a folder it reads
    Case("combine_A_and_B.py --fold_AB equal to --fold_A is refused before writing, naming both", b_combine_into_fold_A,
         2, script=TOOL),
    Case("combine_A_and_B.py --fold_AB inside --fold_B is refused", b_combine_inside_fold_B, 2, script=TOOL),
    Case("combine_A_and_B.py --fold_AB through a symbolic link to --fold_B is refused naming the link",
         b_combine_through_a_link, 2, script=TOOL),
    Case("combine_A_and_B.py --fold_AB given as a relative path to --fold_A is refused", b_combine_relative_path, 2,
         script=TOOL),
    Case("make_dataset_aligned.py on folders A and B (output around them) is refused",
         b_aligned_from_folders_named_A_and_B, 2, script="scripts/make_dataset_aligned.py"),
    Case("split_dataset.py whose --dest split is --source is refused before moving a file", b_split_into_source, 2,
         script="scripts/split_dataset.py"),
    Case("prepare_cityscapes_dataset.py --output_dir equal to --gtFine_dir is refused", b_cityscapes_into_gtfine, 2,
         script="scripts/prepare_cityscapes_dataset.py"),
    Case("make_demo_dataset.py never replaces a folder it did not make", b_demo_over_users_folder, 2,
         script="scripts/make_demo_dataset.py"),
    Case("train.py with the run folder inside the training images is refused before training",
         b_run_folder_inside_the_data, 2, parse_only=True),
    Case("test.py --results_dir inside the test images is refused", b_results_inside_the_data, 2, script="test.py",
         parse_only=True),
    Case("test.py --results_dir equal to the folder --model test reads is refused", b_results_in_a_single_folder, 2,
         script="test.py", parse_only=True),
    Case("translate.py --output equal to an input folder is refused before loading the model",
         b_translate_into_its_input_folder, 2, script="scripts/translate.py"),
    Case("translate.py --output around an input folder is refused", b_translate_around_its_input_folder, 2,
         script="scripts/translate.py"),
    Case("translate.py --output equal to an input file's folder is refused", b_translate_a_file_beside_itself, 2,
         script="scripts/translate.py"),
    Case("translate.py --output through a link to the folder a glob reads is refused", b_translate_glob_into_a_link,
         2, script="scripts/translate.py"),
    Case("export.py of generator.pt beside itself is refused before exporting", b_export_over_its_weights, 2,
         script="scripts/export.py", parse_only=False),
    Case("plot_losses.py -o naming the log it reads is refused", b_plot_over_its_log, 2,
         script="scripts/plot_losses.py"),
    Case("plot_losses.py -o naming a folder is refused in one paragraph", b_plot_into_a_folder, 2,
         script="scripts/plot_losses.py"),
    # the dataset tools decode every image before writing one
    Case("combine_A_and_B.py with a png cut short after its header is refused naming it, nothing written",
         b_combine_truncated_png, 2, script=TOOL),
    Case("combine_A_and_B.py with a jpeg cut short after its header is refused naming it", b_combine_truncated_jpeg,
         2, script=TOOL),
    Case("make_dataset_aligned.py with a png cut short after its header is refused naming it", b_aligned_truncated_png,
         2, script="scripts/make_dataset_aligned.py"),
    Case("prepare_cityscapes_dataset.py with a label png cut short is refused naming it, nothing written",
         b_cityscapes_truncated_label, 2, script="scripts/prepare_cityscapes_dataset.py"),
]
