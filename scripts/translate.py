"""Translate image files with a trained model, keeping their names and formats.

    python scripts/translate.py photos/ --checkpoint checkpoints/horse2zebra --output zebras/
    python scripts/translate.py "scans/*.jpg" one.png --checkpoint checkpoints/facades/latest_net_G.pth \
        --output out/ --tile 512

    python scripts/translate.py scans/ --checkpoint checkpoints/ct2mr --output mr/   # a volume run

INPUTs are files, folders (walked recursively; the output keeps the subfolders) and glob patterns; an
--output that is, lies inside or contains an input folder, or is an input file's own folder, is refused
before the model is loaded (util/safe_files.py: nothing is ever written over an input). Each image is
written to --output under its own name, in its own format and at its own precision (a
.jpg gives a .jpg at quality 95, a 16-bit PNG a 16-bit PNG, a float32 TIFF a float32 TIFF, a .npy a
.npy); where that format cannot hold the output (e.g. 6 bands from a PNG) it becomes a .tif. A TIFF too
large to hold (its float32 values over a quarter of --exact_memory) is read, translated and written by regions,
exactly, into a tiled TIFF (--tile is refused for it: models/inference/large_pictures.py); a PNG or JPEG that
large is held as its samples only and translated by regions into its own format. Float data
map to the network's values by the --data_range the model trained with. A model trained on volumes (a
3-D generator) translates the volume files among the inputs instead (.nii, .nii.gz, .npy), each whole in
sliding windows of the --patch_size it trained on (--window_overlap, --window_batch), into a file of the
same name (x.nii.gz -> OUTPUT/x.nii.gz, with the input's affine and header); the flags of pictures
(--tile, --n_samples, --codes, --reference) are refused for it, and its flags for a picture model.
Files that are not images (or volumes), cannot be decoded, declare more than the limits of data/image_io.py
or data/volume_io.py in their headers, or cannot be written are skipped; the summary lists them with the
reason, and the others are translated. Exit status 0 when at least one image was translated, 2 with one paragraph
when nothing could be (or the checkpoint is unusable). The model comes from models/inference/translator.py;
docs/inference.md explains --direction, --no_eval and the architecture flags.
"""
from __future__ import annotations

import argparse
import glob
import os
import sys
import time
from collections.abc import Callable

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from data.base_dataset import add_data_range_flag  # noqa: E402
from data.image_folder import IMG_EXTENSIONS, is_image_file  # noqa: E402
from data.image_io import TIFF_EXTENSIONS, output_extension, probe_image  # noqa: E402
from data.volume_io import VOLUME_EXTENSIONS, is_volume_file, volume_stem  # noqa: E402
from data.volume_patches import add_window_flags  # noqa: E402
from models import networks
from models.inference.translator import Translator, sample_paths  # noqa: E402
from models.inference.windows import check_tiling  # noqa: E402
from models.networks import unet_latent  # noqa: E402
from models.sb_model import NUM_TIMESTEPS  # noqa: E402
from options.inference_flags import (  # noqa: E402,E501
    add_checkpoint_flags,
    add_exact_flags,
    add_precision_flag,
    add_tile_flags,
    exact_budget,
)
from util.console import setup_logging  # noqa: E402
from util.errors import UserError, describe, exit_with_status, exits_on_user_error  # noqa: E402
from util.flag_types import (  # noqa: E402
    MAX_SAMPLES,
    Bounded,
    OneParagraphParser,
    channel_count,
    network_width,
    non_negative_float,
    sample_count,
    seed_value,
)
from util.paths import broken_link, unwritable_folder_reason  # noqa: E402
from util.safe_files import folder_overlap, refuse_output_over_inputs  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = OneParagraphParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("inputs", nargs="+", metavar="INPUT", help="image files, folders or glob patterns")
    parser = add_checkpoint_flags(parser)
    parser.add_argument("--output", required=True, help="folder for the translated images")
    parser.add_argument("--direction", choices=["AtoB", "BtoA"], default=None,
                        help="trainA -> trainB (AtoB) or back; default: the direction the model was trained in")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    parser = add_exact_flags(add_tile_flags(add_precision_flag(parser)))
    parser.add_argument("--no_eval", action="store_true",
                        help="as the reference's test.py without --eval: batch statistics of each image, dropout on "
                             "(masks drawn from --seed)")
    parser.add_argument("--seed", type=seed_value, default=0,
                        help="seed of the dropout masks with --no_eval, of the latent codes of --n_samples, and of a "
                             "bridge's noise (--model sb)")
    many = parser.add_argument_group("many answers per input", "for a generator that takes a latent code (BicycleGAN)")
    many.add_argument("--n_samples", type=sample_count, default=None,
                      help="write N answers per image, <name>_sample<k>.<ext>, from N codes drawn from --seed (the "
                           "same seed, the same images)")
    many.add_argument("--codes", default=None, metavar="FILE",
                      help="the codes to translate with: N x nz numbers in a .npy file or a text file (one code a "
                           "line); writes <name>_sample<k>.<ext>, one per code")
    many.add_argument("--reference", default=None, metavar="IMAGE",
                      help="an image of the output domain: every translation takes its look (its code from the "
                           "encoder saved with the generator)")
    steps = parser.add_argument_group("steps", "for a Schrödinger-bridge run (--model sb): noise drawn from --seed")
    steps.add_argument("--num_timesteps", type=NUM_TIMESTEPS, default=None,
                       help="steps of the bridge walked (NFE); default: the run's own --num_timesteps (its "
                            "train_opt.json, or the train_opt.txt of UNSB's code)")
    steps.add_argument("--tau", type=non_negative_float, default=None,
                       help="the bridge's entropy (noise between steps); default: the run's own --tau, as above")
    volumes = parser.add_argument_group("volumes", "for a model trained on volumes (a 3-D generator): whole volumes "
                                                   "are translated in blended sliding windows")
    add_window_flags(volumes, from_run=True)
    parser = add_data_range_flag(parser, from_run=True)
    arch = parser.add_argument_group("architecture", "only for weights without architecture.json whose file alone "
                                                     "does not say enough")
    arch.add_argument("--netG", type=networks.family_name_type(networks.GENERATOR), default=None,
                      help=f"one of {', '.join(networks.generators())}, or the module path of your own network family")
    arch.add_argument("--norm", choices=[n for n in networks.NORMS if n != "syncbatch"], default=None)
    arch.add_argument("--ngf", type=network_width, default=None)
    arch.add_argument("--input_nc", type=channel_count, default=None)
    arch.add_argument("--output_nc", type=channel_count, default=None)
    arch.add_argument("--upsample", choices=(*networks.UPSAMPLINGS, *unet_latent.UPSAMPLINGS), default=None,
                      help="transpose or resize; a latent U-Net's (BicycleGAN's): basic or bilinear")
    arch.add_argument("--no_dropout", action="store_true", default=None)
    # a generator that takes a latent code (BicycleGAN's U-Net), where its weights alone do not say enough
    arch.add_argument("--nz", type=Bounded(int, low=1, high=1024, name="nz"), default=None,
                      help="numbers in the latent code")
    arch.add_argument("--where_add", choices=unet_latent.WHERE_ADD, default=None, help="where the code joins the U-Net")
    arch.add_argument("--nl", choices=unet_latent.NONLINEARITIES, default=None, help="the activation of its way up")
    args = parser.parse_args(argv)
    # the architecture keywords of Translator.load, as the group names them
    args.architecture = {action.dest: getattr(args, action.dest) for action in arch._group_actions}
    reason = unwritable_folder_reason(args.output)
    if reason:  # refused now, not once per image after the model has been loaded
        parser.error(f"argument --output: cannot write the translations into {args.output} ({reason}); "
                     f"choose another --output")
    return args


def keep_name(source: str, destination: str) -> str:
    return destination


def list_jobs(inputs: list[str], output_dir: str, output_name: Callable[[str, str], str] = keep_name,
              accepts: Callable[[str], bool] = is_image_file, kind: str = "an image file",
              ) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(source, destination) pairs to translate, and (path, reason) pairs skipped before translating.
    Files that `accepts` refuses are skipped as not `kind` (e.g. "a volume file" with is_volume_file);
    `output_name(source, destination)` may change a destination's extension (`UserError`: skip the
    source). Hidden files and folders (".name") and anything inside `output_dir` are left out silently."""
    jobs: list[tuple[str, str]] = []
    skipped: list[tuple[str, str]] = []
    output_real = os.path.realpath(output_dir)
    destinations: dict[str, str] = {}

    def add(path: str, relative: str) -> None:
        if not accepts(path):
            extension = path[len(volume_stem(path)):] or "no extension"  # .nii.gz whole
            skipped.append((path, f"not {kind} ({extension})"))
            return
        try:
            destination = output_name(path, os.path.join(output_dir, relative))
        except UserError as err:
            skipped.append((path, describe(err).removeprefix("error: ")))
            return
        key = os.path.realpath(destination)
        if key == os.path.realpath(path):
            skipped.append((path, "its output would overwrite it; choose another --output"))
        elif key in destinations:
            skipped.append((path, f"its output {destination} is already the output of {destinations[key]}"))
        else:
            destinations[key] = path
            jobs.append((path, destination))

    def add_folder(folder: str) -> None:
        for root, dirs, files in os.walk(folder):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".")
                             and os.path.realpath(os.path.join(root, d)) != output_real)
            for name in sorted(files):
                if not name.startswith("."):
                    path = os.path.join(root, name)
                    add(path, os.path.relpath(path, folder))

    for item in inputs:
        matches = sorted(glob.glob(item, recursive=True)) if glob.has_magic(item) else [item]
        if not matches:
            skipped.append((item, "matches no file"))
        for path in matches:
            if os.path.isdir(path):
                add_folder(path)
            elif os.path.isfile(path):
                add(path, os.path.basename(path))
            else:
                skipped.append((path, broken_link(path) or "no such file or folder"))
    return jobs, skipped


def output_name(translator: Translator, source: str, destination: str) -> str:
    """`destination`, or with .tif for its extension where that format cannot hold the translation of
    `source` (the file's dtype with the generator's output channels), as test.py names its outputs.
    Raises `UserError` naming `source` when it cannot be read."""
    stem, extension = os.path.splitext(destination)
    if extension.lower() in TIFF_EXTENSIONS:  # a TIFF holds any translation, and one too large to probe
        return destination                    # whole is translated by regions (models/inference/large_pictures.py)
    kept = output_extension(extension, probe_image(source).dtype, translator.loaded.output_nc)
    return destination if kept == extension.lower() else stem + kept


def translate_all(translator: Translator, jobs: list[tuple[str, str]], tile: int, tile_overlap: int,
                  skipped: list[tuple[str, str]], **answers: object) -> int:
    """Translate each job with a progress bar (on a terminal); appends failures to `skipped`.
    `answers`: the latent code's keywords of `Translator.translate` (n_samples, codes, reference)."""
    from tqdm import tqdm

    done = 0
    unit = "volume" if translator.volumes else "image"
    for source, destination in tqdm(jobs, desc="translating", unit=unit, file=sys.stderr, disable=None):
        try:
            translator.translate_file(source, destination, tile=tile, tile_overlap=tile_overlap, **answers)
            done += 1
        except UserError as err:
            skipped.append((source, describe(err).removeprefix("error: ")))
    return done


def refuse_output_among_inputs(inputs: list[str], output: str) -> None:
    """Raise `UserError` when --output is, lies inside or contains an input folder, or is the folder of an
    input file (whose translation, of the same name, would replace it): before the model is loaded."""
    folders, files = [], []
    for item in inputs:
        for path in (sorted(glob.glob(item, recursive=True)) if glob.has_magic(item) else [item]):
            (folders if os.path.isdir(path) else files).append(path)
    apart = f"Pass an --output apart from the inputs, e.g. --output {os.path.normpath(output)}_translated."
    refuse_output_over_inputs(output, f"--output {output}", [("INPUT", folder) for folder in folders], apart)
    for path in files:
        folder = os.path.dirname(path) or "."
        if folder_overlap(output, folder) == "is":
            raise UserError(f"--output {output} is the folder of the input {path}: its translation, written under "
                            f"its own name, would replace it, so nothing was written. {apart}")


@exits_on_user_error(memory_advice="translate large pictures exactly in less memory (a lower "
                     "--exact_memory) or in tiles (--tile 512); volumes: a lower --window_batch")
def main(argv: list[str] | None = None) -> int:
    setup_logging()
    args = parse_args(argv)
    refuse_output_among_inputs(args.inputs, args.output)
    window = {name: getattr(args, name) for name in ("patch_size", "window_overlap", "window_batch")}
    given = [name for name, value in window.items() if value is not None]
    try:
        translator = Translator.load(args.checkpoint, args.direction, args.epoch, args.device, args.precision,
                                     eval_mode=not args.no_eval, seed=args.seed, data_range=args.data_range,
                                     num_timesteps=args.num_timesteps, tau=args.tau, exact=exact_budget(args),
                                     whole_volumes=args.whole_volumes,
                                     **window, **args.architecture)
    except UserError as err:  # the window of a picture run: named by this script's flags
        if given and str(err).startswith(" and ".join(given) + ":"):
            flags = " and ".join(f"--{name}" for name in given)
            raise UserError(f"{flags}: {args.checkpoint} holds a picture generator, which has no sliding window "
                            f"(that is for volume runs); drop {flags} (large pictures: --tile).") from None
        raise
    if translator.volumes:
        refuse_picture_flags(args)
        # a volume keeps its name and format: x.nii.gz -> OUTPUT/x.nii.gz
        jobs, skipped = list_jobs(args.inputs, args.output, accepts=is_volume_file, kind="a volume file")
    else:
        # once, now that the generator is known, rather than once per picture
        check_tiling(translator.loaded.netG, args.tile, args.tile_overlap, translator.loaded.architecture)
        jobs, skipped = list_jobs(args.inputs, args.output,
                                  lambda source, destination: output_name(translator, source, destination))
    if not jobs:
        raise UserError(nothing_to_translate(args.inputs, skipped, translator.volumes))
    answers = latent_answers(translator, args)
    inputs = {os.path.realpath(path): path for path, _ in (*jobs, *skipped) if os.path.isfile(path)}
    jobs = [job for job in jobs if not overwrites_an_input(job, inputs, answer_count(answers), skipped)]
    total, start = len(jobs) + len(skipped), time.perf_counter()
    done = translate_all(translator, jobs, args.tile, args.tile_overlap, skipped, **answers)
    print(f"translated {done} of {total} files into {args.output} in {time.perf_counter() - start:.1f} s "
          f"({translator})")
    if skipped:
        print(f"skipped {len(skipped)}:")
        for path, reason in skipped:
            print(f"  {path}: {reason}")
    if not done:
        raise UserError(nothing_to_translate(args.inputs, skipped, translator.volumes))
    return 0


def refuse_picture_flags(args: argparse.Namespace) -> None:
    """Raise `UserError` naming the flags of pictures given for a model that translates volumes."""
    given = [flag for flag, value in (("--tile", args.tile), ("--n_samples", args.n_samples),
                                      ("--codes", args.codes), ("--reference", args.reference)) if value]
    if given:
        flags = " and ".join(given)
        raise UserError(f"{flags}: {args.checkpoint} holds a model trained on volumes, which translates each volume "
                        f"whole, in blended sliding windows (--patch_size, --window_overlap, --window_batch), and "
                        f"gives one answer per volume; {flags} apply to pictures only: leave {flags} out.")


def latent_answers(translator: Translator, args: argparse.Namespace) -> dict:
    """`translate`'s keywords for --n_samples / --reference, checked once before any image is read."""
    given = [flag for flag, value in (("--n_samples", args.n_samples), ("--codes", args.codes),
                                      ("--reference", args.reference)) if value]
    if not given:
        return {}
    if translator.latent_size == 0:
        raise UserError(f"{' and '.join(given)}: the generator of {args.checkpoint} takes no latent code, so it gives "
                        f"one answer per image; leave {' and '.join(given)} out.")
    if len(given) > 1:
        raise UserError(f"{' and '.join(given)}: each says which codes to translate with; pass one of them.")
    if args.codes:
        return {"codes": read_codes(args.codes, translator.latent_size)}
    if args.reference:
        if not os.path.isfile(args.reference):
            raise UserError(f"--reference {args.reference} is not an image file; pass an image of the output domain.")
        translator.encode(args.reference)  # a reference that cannot be encoded fails before any image is read
        return {"reference": args.reference}
    return {"n_samples": args.n_samples, "seed": args.seed}


def answer_count(answers: dict) -> int:
    """How many `<name>_sample<k>` files each input gives (--n_samples, --codes); 0: one file of its own name."""
    if "n_samples" in answers:
        return answers["n_samples"]
    return len(answers["codes"]) if "codes" in answers else 0


def overwrites_an_input(job: tuple[str, str], inputs: dict[str, str], count: int,
                        skipped: list[tuple[str, str]]) -> bool:
    """Whether one of the `count` `<name>_sample<k>` files of `job` would overwrite one of the `inputs`
    (real path -> path given; then the job is added to `skipped`, with the reason); list_jobs already
    checked single outputs."""
    if count == 0:
        return False
    for path in sample_paths(job[1], count):
        if os.path.realpath(path) in inputs:
            skipped.append((job[0], f"its output {path} would overwrite the input {inputs[os.path.realpath(path)]}; "
                                    f"choose another --output"))
            return True
    return False


def read_codes(path: str, size: int) -> torch.Tensor:
    """--codes FILE: N x `size` numbers from a .npy file or a text file (one code a line), checked."""
    import numpy as np

    from models.inference.latent_codes import checked_latent_codes

    try:
        if path.endswith(".npy"):  # the shape its header declares, checked before the codes are loaded
            shape = np.load(path, mmap_mode="r", allow_pickle=False).shape
            if len(shape) not in (1, 2) or (len(shape) == 2 and shape[0] > MAX_SAMPLES):
                raise UserError(f"--codes {path} holds an array of shape {shape}; pass N x {size} codes, N at most "
                                f"{MAX_SAMPLES} (one answer is written per code and input).")
        codes = np.load(path, allow_pickle=False) if path.endswith(".npy") else np.loadtxt(path, ndmin=2)
    except (OSError, ValueError) as err:
        raise UserError(f"--codes {path} cannot be read ({' '.join(str(err).split())}); pass a .npy file or a text "
                        f"file with one code of {size} numbers a line.") from None
    try:
        return checked_latent_codes(codes, size)
    except UserError as err:
        raise UserError(f"--codes {path}: {err}") from None


def nothing_to_translate(inputs: list[str], skipped: list[tuple[str, str]], volumes: bool = False) -> str:
    reasons = "; ".join(f"{path}: {reason}" for path, reason in skipped[:5]) or "no files in them"
    more = f"; and {len(skipped) - 5} more" if len(skipped) > 5 else ""
    kind, extensions = ("volume", VOLUME_EXTENSIONS) if volumes else ("image", IMG_EXTENSIONS)
    return (f"nothing could be translated from {', '.join(inputs)} ({reasons}{more}). Pass {kind} files "
            f"({', '.join(extensions)}), folders holding them or glob patterns that match them.")


if __name__ == "__main__":
    exit_with_status(main())
