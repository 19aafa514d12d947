"""Corpus cases of tests/test_bad_input.py for silence where a user needs a word (issue 58):

- a training run whose every loss weight for the generator is 0 would run to its end and save an untrained
  generator: each model that has such weights (its `loss_weights`) refuses it when parsed, naming all of
  them and a weight that trains; a model whose generator always has a loss (CycleGAN's adversarial one),
  or a run with one weight left, trains;
- advice that names a flag names one that works in the run at hand, and the corpus runs it: --ada_target
  without --diff_augment where the run cannot augment (no discriminator, volumes) says to drop it rather
  than to add --diff_augment, and a --patch_size a 3-D network cannot take is answered with the largest one
  below it that it takes, which still fits the volumes (a larger one might not: a 24-slice volume takes no
  32-voxel patch).

Every refusal is one paragraph, exit status 2, before anything is written."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from bad_empty_epochs import BICYCLE, pairs_128
from bad_input_kit import CYCLE, NAME, PIX, Case, Setup, aligned, run_args, suggested
from bad_volumes import run_args as volume_run_args
from bad_volumes import save_volume, volume

BEFORE_TRAINING = ("The number of training images",)  # in stdout once the dataset is read
CUT = ["--model", "cut", "--dataset_mode", "aligned", "--netF_nc", "8", "--num_patches", "16"]
SB = ["--model", "sb", "--dataset_mode", "unaligned", "--netF_nc", "8", "--num_patches", "16", "--num_timesteps", "2"]
TEMPLATE = ["--model", "template", "--dataset_mode", "aligned"]
UNET16_VOLUMES = ["--model", "pix2pix", "--dataset_mode", "aligned_volume", "--input_nc", "1", "--output_nc", "1",
                  "--netG", "unet_16_3d", "--ngf", "4", "--netD", "pixel_3d", "--ndf", "4", "--n_epochs", "1",
                  "--n_epochs_decay", "0"]


def dropped(*args_dropped: str) -> Callable[[list[str], str], list[str]]:
    """The command a "drop --flag" refusal suggests: the arguments without `args_dropped` (a flag and its value)."""
    def command(args: list[str], message: str) -> list[str]:
        assert f"drop {args_dropped[0]}" in message, (args_dropped, message)
        at = args.index(args_dropped[0])
        assert args[at:at + len(args_dropped)] == list(args_dropped)
        return args[:at] + args[at + len(args_dropped):]
    return command


def training_pairs(work: Path, data_128: bool) -> list[str]:
    """Two training pairs in `work` (128 px ones with `data_128`); the size flags they need."""
    if data_128:
        pairs_128(work, 2)
        return ["--load_size", "128", "--crop_size", "128"]
    aligned(work / "data" / "train", 2)
    return []


def trains_nothing(model_flags: list[str], *weights: str, fixed: bool = False, data_128: bool = False) -> Case:
    """`model_flags` with every one of `weights` 0: refused when parsed naming each; with `fixed`, the weight
    the refusal suggests is run and trains."""
    zeros = [part for weight in weights for part in (weight, "0")]

    def build(work: Path) -> Setup:
        size = training_pairs(work, data_128)
        return Setup(run_args(work, *model_flags, *zeros, *size), stderr_has=(*(f"{w} 0" for w in weights),
                     "would learn nothing", "e.g. " + weights[0]), stdout_lacks=BEFORE_TRAINING,
                     absent=(work / "ck" / NAME / "train_opt.txt",),
                     suggestion=suggested(weights[0]) if fixed else None)
    model = model_flags[model_flags.index("--model") + 1]
    return Case(f"--model {model} {' '.join(zeros)} trains nothing and is refused naming every weight", build, 2,
                parse_only=not fixed)


def trains(model_flags: list[str], *flags: str, why: str) -> Case:
    """A run with one loss left for the generator (or one no flag weighs): accepted."""
    def build(work: Path) -> Setup:
        aligned(work / "data" / "train", 2)
        return Setup(run_args(work, *model_flags, *flags))
    return Case(f"{' '.join(model_flags[:2])} {' '.join(flags)} is accepted: {why}", build, 0, parse_only=True)


def ada_without_augment(model_flags: list[str], *flags: str, names: tuple = (), fix_drops: tuple = (),
                        data_128: bool = False) -> Callable[[Path], Setup]:
    """--ada_target 0.6 (and `flags`) where the run cannot take --diff_augment: the refusal says to drop what
    cannot work, not to add what would be refused next; with `fix_drops`, that command is run and trains."""
    def build(work: Path) -> Setup:
        size = training_pairs(work, data_128)
        return Setup(run_args(work, *model_flags, *flags, "--ada_target", "0.6", *size),
                     stderr_has=("--ada_target", *names), stderr_lacks=("add --diff_augment",),
                     stdout_lacks=BEFORE_TRAINING, suggestion=dropped(*fix_drops) if fix_drops else None)
    return build


def b_ada_target_for_volumes(work):
    for i in range(2):
        save_volume(work / "data" / "trainA" / f"{i}.nii.gz", volume(i))
        save_volume(work / "data" / "trainB" / f"{i}.nii.gz", volume(10 + i))
    return Setup(volume_run_args(work, *UNET16_VOLUMES[:-4], "--patch_size", "8", "--ada_target", "0.6"),
                 stderr_has=("--ada_target 0.6", "volumes take none", "drop --ada_target"),
                 stderr_lacks=("add --diff_augment",))


def unet16_patch(script: str) -> Callable[[Path], Setup]:
    """The issue's example: --netG unet_16_3d with --patch_size 24 on volumes of 24 slices. The fix the refusal
    names (the largest patch below that unet_16_3d takes) trains (train.py) or translates (translate.py)."""
    def build(work: Path) -> Setup:
        shape = (24, 16, 16)  # 24 slices: a 32-voxel patch would not fit them
        if script == "train.py":
            for i in range(2):
                save_volume(work / "data" / "trainA" / f"{i}.nii.gz", volume(i, shape))
                save_volume(work / "data" / "trainB" / f"{i}.nii.gz", volume(10 + i, shape))
            args = volume_run_args(work, *UNET16_VOLUMES, "--patch_size", "24,16,16")
            absent: tuple = (work / "ck" / NAME / "train_opt.txt",)
        else:
            from models import networks

            weights = work / "w" / "latest_net_G.pth"
            weights.parent.mkdir()
            torch.save(networks.define_G(1, 1, 4, "unet_16_3d").state_dict(), weights)
            save_volume(work / "in" / "scan.nii.gz", volume(1, shape))
            args = [str(work / "in"), "--checkpoint", str(weights), "--netG", "unet_16_3d", "--output",
                    str(work / "out"), "--patch_size", "24", "--data_range", "0", "1", "--device", "cpu"]
            absent = (work / "out",)
        return Setup(args, stderr_has=("unet_16_3d", "multiples of 16", "e.g. --patch_size 16"),
                     stderr_lacks=("--patch_size 32",), absent=absent, suggestion=suggested("--patch_size"))
    return build


SILENCE_CASES = [
    # every loss weight 0: the example (its fix trained), and each model that has such weights
    trains_nothing(PIX, "--lambda_L1", "--lambda_GAN", fixed=True),
    trains_nothing(CUT, "--lambda_GAN", "--lambda_NCE"),
    trains_nothing(SB, "--lambda_GAN", "--lambda_NCE", "--lambda_SB"),
    trains_nothing(BICYCLE, "--lambda_L1", "--lambda_GAN", "--lambda_GAN2", "--lambda_z", data_128=True),
    trains_nothing(TEMPLATE, "--lambda_regression"),
    trains(PIX, "--lambda_L1", "0", why="D's judgement alone trains G"),
    trains(CYCLE, "--lambda_A", "0", "--lambda_B", "0", "--lambda_identity", "0",
           why="the adversarial losses weigh 1 always"),
    # --ada_target where --diff_augment would be refused: drop it (the example, its fix trained)
    Case("pix2pix --lambda_GAN 0 --ada_target 0.6 is refused saying to drop --ada_target, which trains",
         ada_without_augment(PIX, "--lambda_GAN", "0", names=("builds no discriminator", "drop --ada_target"),
                             fix_drops=("--ada_target", "0.6")), 2),
    Case("bicycle_gan without D and D2 and with --ada_target 0.6 is refused saying to drop --ada_target",
         ada_without_augment(BICYCLE, "--lambda_GAN", "0", "--lambda_GAN2", "0", names=("builds neither D nor D2",),
                             data_128=True), 2, parse_only=True),
    Case("pix2pix --lambda_GAN 0 --diff_augment color --ada_target 0.6 is refused saying to drop both",
         ada_without_augment(PIX, "--lambda_GAN", "0", "--diff_augment", "color",
                             names=("--diff_augment color", "drop --diff_augment and --ada_target")), 2,
         parse_only=True),
    Case("--ada_target 0.6 for volumes is refused saying to drop it (--diff_augment is 2-D)", b_ada_target_for_volumes,
         2, parse_only=True),
    # a --patch_size the network cannot take: the advice fits the volumes too (the example, and test time)
    Case("--netG unet_16_3d --patch_size 24 on 24-slice volumes is refused naming --patch_size 16, which trains",
         unet16_patch("train.py"), 2),
    Case("translate.py --patch_size 24 for a unet_16_3d generator is refused naming --patch_size 16, which "
         "translates", unet16_patch("scripts/translate.py"), 2, script="scripts/translate.py"),
]
