"""Corpus cases of tests/test_bad_input.py for how a refusal is given: its advice names flags of the command
that printed it (scripts/serve.py and scripts/translate.py take --checkpoint and --epoch, not test.py's
--checkpoints_dir, --name and --load_iter; scripts/demo_report.py's --compare and --texture_window are its
own), and the fix it offers works (the corpus runs it where it can); what the flags alone decide is refused
when they are parsed, before a run folder, the options table or a log is written; and only the networks a
run builds are checked (pix2pix with --lambda_GAN 0 builds no discriminator, so no discriminator's image
sizes or flags refuse it)."""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from PIL import Image

from bad_input_kit import NAME, PIX, SMALL, Case, Setup, aligned, random_pixels, run_args, suggested, train_in_process
from bad_volumes import VOLUME_RUN, volume_pairs
from bad_volumes import run_args as volume_args
from conftest import FAST_FLAGS

# test.py's flags for choosing a checkpoint, which the tools that load a run folder do not take
TEST_PY_CHECKPOINT_FLAGS = ("--checkpoints_dir", "--name ", "--load_iter")
OPTIONS_TABLE = "----------------- Options"  # train.py prints it once every check has passed
TINY_PIX = [*PIX, "--ngf", "4", "--ndf", "4"]


# ---------------------------------------------------------------------------------- advice in the command's flags
def runs_folder(work: Path, trained: bool = True) -> Path:
    """work/runs/ holding one run folder, `pix` (trained for one tiny epoch, or holding only its options)."""
    run = work / "runs" / "pix"
    if trained:
        aligned(work / "data" / "train", 2)
        train_in_process(["--dataroot", str(work / "data"), "--name", "pix", "--checkpoints_dir", str(work / "runs"),
                          *FAST_FLAGS, *SMALL, *TINY_PIX])
    else:
        run.mkdir(parents=True)
        (run / "train_opt.json").write_text("{}")  # a run that has not saved yet
    return work / "runs"


def images(work: Path) -> Path:
    (work / "in").mkdir()
    Image.fromarray(random_pixels(0, 32, 32)).save(work / "in" / "a.png")
    return work / "in"


def tool_refused(script: str, checkpoint: Callable[[Path], Path], *names: str, extra: tuple[str, ...] = (),
                 fix: tuple[str, ...] = ()) -> Callable[[Path], Setup]:
    """`script` loading the run folder `checkpoint(work)` is refused naming `names`, in its own flags; with
    `fix`, the command it suggests (those flags set as the message says) translates."""
    def build(work: Path) -> Setup:
        source = checkpoint(work)
        args = ["--checkpoint", str(source), *extra]
        if script.endswith("translate.py"):
            args = [str(images(work)), *args, "--output", str(work / "out"), "--device", "cpu"]
        else:
            args += ["--devices", "cpu", "--port", "0"]  # refused before it would listen
        return Setup(args, stderr_has=names, stderr_lacks=TEST_PY_CHECKPOINT_FLAGS,
                     suggestion=suggested(*fix) if fix else None)
    return build


def reports(work: Path) -> tuple[Path, Path]:
    """Two demo_report.json files: the first run's samples more diverse than the second's."""
    many, one = work / "many.json", work / "one.json"
    many.write_text(json.dumps({"trained": {"diversity_L1": 0.3}}))
    one.write_text(json.dumps({"trained": {"diversity_L1": 0.1}}))
    return many, one


def b_compare_with_other_flags(work: Path) -> Setup:
    """--compare reads two files and nothing else: given after a flag it used to meet "--dataroot required"."""
    many, one = reports(work)
    return Setup(["--num_test", "2", "--compare", str(many), str(one)], stderr_has=("--compare", "alone", "--num_test"),
                 suggestion=lambda args, message: args[args.index("--compare"):])


def b_compare_missing_file(work: Path) -> Setup:
    many, _ = reports(work)
    return Setup(["--compare", str(many), str(work / "none.json")], stderr_has=("--compare", "none.json",
                                                                                 "does not exist"))


def b_texture_window_with_volumes(work: Path) -> Setup:
    """--texture_window scores squares of pictures: refused when parsed with a volume mode, naming it."""
    volume_pairs(work, 1, ("testA", "testB"))
    return Setup(["--dataroot", str(work / "data"), "--name", NAME, "--checkpoints_dir", str(work / "ck"),
                  "--results_dir", str(work / "results"), *VOLUME_RUN[:-4], "--texture_window", "8"],
                 stderr_has=("--texture_window", "leave --texture_window out"), absent=(work / "results",))


ADVICE_CASES = [
    Case("serve.py given a folder of runs is refused naming --checkpoint of the run in it, not test.py's flags",
         tool_refused("scripts/serve.py", runs_folder, "--checkpoint", "runs/pix"), 2, script="scripts/serve.py"),
    Case("serve.py given a run with no weights yet is refused saying so in its own flags",
         tool_refused("scripts/serve.py", lambda work: runs_folder(work, trained=False) / "pix", "no weights yet",
                      "--checkpoint"), 2, script="scripts/serve.py"),
    Case("translate.py given a folder of runs is refused naming --checkpoint of its run, which translates",
         tool_refused("scripts/translate.py", runs_folder, "--checkpoint", fix=("--checkpoint",)), 2,
         script="scripts/translate.py"),
    Case("translate.py --epoch 7 of a run without it is refused naming the epochs saved, and --epoch latest works",
         tool_refused("scripts/translate.py", lambda work: runs_folder(work) / "pix", "7_net_G.pth", "--epoch latest",
                      extra=("--epoch", "7"), fix=("--epoch",)), 2, script="scripts/translate.py"),
    Case("demo_report.py --compare after another flag is refused naming --compare alone, which compares",
         b_compare_with_other_flags, 2, script="scripts/demo_report.py"),
    Case("demo_report.py --compare of a missing file is refused naming it", b_compare_missing_file, 2,
         script="scripts/demo_report.py"),
    Case("demo_report.py --texture_window with volumes is refused when parsed naming --texture_window",
         b_texture_window_with_volumes, 2, script="scripts/demo_report.py"),
]


# ---------------------------------------------------------------------------------- refused before writing
def refused_before_writing(data: Callable[[Path], object], *flags: str, names: tuple = (),
                           fix: tuple[str, ...] = ()) -> Callable[[Path], Setup]:
    """train.py with `flags` on `data(work)` is refused when parsed: no options table, no lock, option file
    or log in the run folder (which holds only an earlier run's checkpoints); `fix`: the suggested command
    trains."""
    def build(work: Path) -> Setup:
        data(work)
        run = work / "ck" / NAME
        return Setup(run_args(work, *flags), stderr_has=(*names,), stdout_lacks=(OPTIONS_TABLE,),
                     absent=(run / ".run.lock", run / "train_opt.txt", run / "train_opt.json", run / "loss_log.txt"),
                     suggestion=suggested(*fix) if fix else None)
    return build


def pairs(work: Path) -> None:
    aligned(work / "data" / "train", 2)


def two_domains(work: Path) -> None:
    aligned(work / "data" / "trainA", 2)
    aligned(work / "data" / "trainB", 2)


def pairs_and_domains(work: Path) -> None:
    pairs(work)
    two_domains(work)


SB = ["--model", "sb", "--ngf", "4", "--ndf", "4", "--netF_nc", "8", "--num_patches", "8", "--num_timesteps", "2"]
CUT = ["--model", "cut", "--ngf", "4", "--ndf", "4", "--netF_nc", "8", "--num_patches", "8"]

EARLY_REFUSAL_CASES = [
    Case("sb --dataset_mode aligned (no second input) is refused before anything is written, and unaligned trains",
         refused_before_writing(pairs_and_domains, *SB, "--dataset_mode", "aligned",
                                names=("--dataset_mode unaligned", "A2"), fix=("--dataset_mode",)), 2),
    Case("cycle_gan --input_nc 1 with the identity loss is refused before anything is written; its fix trains",
         refused_before_writing(two_domains, "--model", "cycle_gan", "--netG", "resnet_6blocks", "--ngf", "4",
                                "--ndf", "4", "--input_nc", "1", names=("--lambda_identity 0",),
                                fix=("--lambda_identity",)), 2),
    Case("FastCUT --input_nc 1 (a traceback at the first step) is refused before anything is written; --output_nc 1 "
         "trains", refused_before_writing(two_domains, *CUT, "--CUT_mode", "FastCUT", "--input_nc", "1",
                                          names=("--lambda_NCE", "--output_nc 1"), fix=("--output_nc",)), 2),
    Case("cut --nce_idt --input_nc 1 is refused before anything is written naming --output_nc 1",
         refused_before_writing(two_domains, *CUT, "--nce_idt", "--input_nc", "1",
                                names=("--nce_idt", "--output_nc 1")), 2),
    Case("cut --accum_steps 2 (CUT's step has no phases) is refused before anything is written; --accum_steps 1 "
         "trains", refused_before_writing(two_domains, *CUT, "--accum_steps", "2", names=("accumulation_phases",),
                                          fix=("--accum_steps",)), 2),
    Case("--save_best without --val_freq is refused before anything is written naming --val_freq 1",
         refused_before_writing(pairs, *TINY_PIX, "--save_best", "L1", names=("--save_best L1", "--val_freq 1")), 2),
]


# ---------------------------------------------------------------------------------- only what is built
def b_restoration_recipe_small_patches(work: Path) -> Setup:
    """docs/volumes.md's restoration recipe (--lambda_GAN 0) with --patch_size 8: basic_3d's 24 voxels were
    asked of a discriminator the run does not build."""
    volume_pairs(work)
    args = volume_args(work, *VOLUME_RUN, "--netD", "basic_3d", "--lambda_GAN", "0")
    return Setup(args, stdout_has=("End of epoch 1",), stderr_lacks=("basic_3d",))


def b_no_discriminator_flags(*flags: str, volumes: bool = False, trains: bool = False) -> Callable[[Path], Setup]:
    """pix2pix --lambda_GAN 0 with discriminator flags that would refuse the discriminator, were it built;
    `trains`: the case runs train.py, which trains (else only its parse)."""
    def build(work: Path) -> Setup:
        if volumes:
            return Setup(volume_args(work, *VOLUME_RUN, "--lambda_GAN", "0", *flags))
        pairs(work)
        return Setup(run_args(work, *TINY_PIX, "--lambda_GAN", "0", *flags),
                     stdout_has=("End of epoch 1",) if trains else ())
    return build


def b_discriminator_too_large(work: Path) -> Setup:
    """The same flags with a discriminator: still refused (before any model is built), naming --num_D."""
    pairs(work)
    return Setup(run_args(work, *TINY_PIX, "--netD", "multiscale", "--num_D", "3"), stderr_has=("--num_D 3", "96x96"),
                 stdout_lacks=(OPTIONS_TABLE,))


BUILT_NETWORK_CASES = [
    Case("pix2pix --lambda_GAN 0 on volumes with patches smaller than basic_3d takes trains (no D is built)",
         b_restoration_recipe_small_patches, 0),
    Case("pix2pix --lambda_GAN 0 --netD multiscale --num_D 3 on 32 px trains (no D is built)",
         b_no_discriminator_flags("--netD", "multiscale", "--num_D", "3", trains=True), 0),
    Case("pix2pix --lambda_GAN 0 --netD multiscale --gan_mode wgangp is accepted (no D to refuse them)",
         b_no_discriminator_flags("--netD", "multiscale", "--gan_mode", "wgangp"), 0, parse_only=True),
    Case("pix2pix --lambda_GAN 0 --netD basic (2-D) on volumes is accepted (no D is built)",
         b_no_discriminator_flags("--netD", "basic", volumes=True), 0, parse_only=True),
    Case("pix2pix --netD multiscale --num_D 3 on 32 px (with its D) is refused naming --num_D",
         b_discriminator_too_large, 2),
]

REFUSAL_CASES = [*ADVICE_CASES, *EARLY_REFUSAL_CASES, *BUILT_NETWORK_CASES]
