"""Corpus cases of tests/test_bad_input.py for flags whose bad values used to reach the code: every numeric
flag has its range (a value outside it is refused when parsed, naming the range), every combination that
cannot work is named when the options are parsed (a model says what it cannot work with:
`BaseModel.check_flags`), and the fix a refusal offers is a command that works (the corpus runs it)."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import torch
from PIL import Image

from bad_empty_epochs import BICYCLE, pairs_128
from bad_input_kit import Case, Setup, random_pixels, run_args, suggested

BICYCLE_128 = [*BICYCLE, "--load_size", "128", "--crop_size", "128"]


def bicycle_refused(*flags: str, names: tuple = (), drop: tuple[str, ...] = (), fixed_by: tuple[str, ...] = ()):
    def build(work: Path) -> Setup:
        pairs_128(work, 4)
        fix = suggested(*fixed_by, drop=drop) if drop or fixed_by else None
        return Setup(run_args(work, *BICYCLE_128, *flags), stderr_has=(flags[0], *names),
                     stdout_lacks=("The number of training images",), suggestion=fix)
    return build


def pix2pix_without_D(*flags: str, names: tuple = ()):
    """pix2pix --lambda_GAN 0 (no discriminator) with a flag that acts on the discriminator; its fix
    (a weight for D) trains."""
    def build(work: Path) -> Setup:
        from bad_input_kit import PIX, aligned

        aligned(work / "data" / "train", 2)
        return Setup(run_args(work, *PIX, "--lambda_GAN", "0", *flags), stderr_has=(flags[0], "--lambda_GAN 0", *names),
                     stdout_lacks=("The number of training images",), suggestion=suggested("--lambda_GAN"))
    return build


def b_bicycle_upsample_basic_as_its_docs_say(work):
    """docs/bicyclegan.md: --upsample basic|bilinear under this model (the flag parsed before the model
    widened its choices was refused)."""
    pairs_128(work, 2)
    return Setup(run_args(work, *BICYCLE_128, "--upsample", "bilinear"))


def latent_generator_weights(folder: Path, where_add: str = "all") -> Path:
    """A lone BicycleGAN generator's weights: unet_128, ngf 4, a code of 3 numbers (`where_add`)."""
    from models import networks

    flags = SimpleNamespace(ngf=4, norm="instance", no_dropout=True, upsample="basic", nz=3, where_add=where_add,
                            nl="relu")
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(networks.family_of("unet_128").build(flags, 3, 3).state_dict(), folder / "latest_net_G.pth")
    return folder / "latest_net_G.pth"


def suggested_architecture(args: list[str], message: str) -> list[str]:
    """export.py's advice "...; pass --model bicycle_gan --netG unet_128 ... --where_add all." as its command."""
    flags = message.split("; pass ", 1)[1].split(". PyTorch says")[0].split()
    return [args[0], args[1], *flags, *args[args.index("--export_dir"):]]


def b_export_bicycle_generator_with_wrong_flags(work):
    """The issue's example: export.py's advice for a BicycleGAN generator named flags export.py rejects."""
    weights = latent_generator_weights(work / "w")
    return Setup(["--weights", str(weights), "--netG", "unet_128", "--ngf", "8", "--export_dir", str(work / "out"),
                  "--formats", "torchscript"],
                 stderr_has=(weights, "--model bicycle_gan", "--upsample basic", "--nz 3", "--where_add all"),
                 suggestion=suggested_architecture)


def b_translate_where_add_input_with_its_flags(work):
    """docs/bicyclegan.md: a generator of --where_add input looks like a pix2pix U-Net with more input channels:
    pass --nz, --where_add input and the image's --input_nc with it (translate.py takes them)."""
    weights = latent_generator_weights(work / "w", "input")
    (work / "in").mkdir()
    Image.fromarray(random_pixels(0, 128, 128)).save(work / "in" / "a.png")
    return Setup([str(work / "in"), "--checkpoint", str(weights), "--output", str(work / "out"), "--netG", "unet_128",
                  "--ngf", "4", "--input_nc", "3", "--nz", "3", "--where_add", "input", "--upsample", "basic",
                  "--no_dropout", "--n_samples", "2", "--device", "cpu"], stdout_has=("translated 1 of 1",),
                 after=lambda: [(work / "out" / f"a_sample{k}.png").stat() for k in range(2)])


def flag_out_of_range(*flags: str, names: tuple = (), script: str = "train.py") -> Case:
    def build(work: Path) -> Setup:
        from bad_input_kit import PIX, aligned, eval_args

        aligned(work / "data" / ("train" if script == "train.py" else "test"), 2)
        args = run_args(work, *PIX, *flags) if script == "train.py" else eval_args(work, *flags)
        return Setup(args, stderr_has=(flags[0], *names))
    return Case(f"{' '.join(flags)} is refused by {script} when parsed naming {flags[0]} and its range", build, 2,
                script=script, parse_only=True)


FLAG_COMBINATION_CASES = [
    # the examples, and their fixes run
    Case("bicycle_gan --nef 0 is refused when parsed (was a ZeroDivisionError)",
         bicycle_refused("--nef", "0", names=(">= 1",)), 2, parse_only=True),
    Case("bicycle_gan --use_same_D --lambda_GAN 0 is refused when parsed and training without --use_same_D works",
         bicycle_refused("--use_same_D", "--lambda_GAN", "0", names=("--lambda_GAN 0", "drop --use_same_D"),
                         drop=("--use_same_D",)), 2),
    Case("bicycle_gan --batch_size 3 is refused when parsed and --batch_size 4 trains",
         bicycle_refused("--batch_size", "3", names=("even",), fixed_by=("--batch_size",)), 2),
    Case("bicycle_gan --upsample bilinear, as its docs say, is accepted", b_bicycle_upsample_basic_as_its_docs_say, 0,
         parse_only=True),
    Case("export.py's advice for a BicycleGAN generator names --model bicycle_gan, and it exports",
         b_export_bicycle_generator_with_wrong_flags, 2, script="scripts/export.py"),
    Case("translate.py takes --nz and --where_add input for a generator whose weights do not show them",
         b_translate_where_add_input_with_its_flags, 0, script="scripts/translate.py"),
    Case("pix2pix --lambda_GAN 0 --lambda_feat 10 is refused when parsed and --lambda_GAN 1 trains",
         pix2pix_without_D("--lambda_feat", "10", names=("no discriminator", "drop --lambda_feat")), 2),
    Case("pix2pix --lambda_GAN 0 --diff_augment color is refused when parsed and --lambda_GAN 1 trains",
         pix2pix_without_D("--diff_augment", "color", names=("no discriminator",)), 2),
    # combinations known when parsed
    flag_out_of_range("--data_range", "1", "0", names=("each MIN below its MAX",)),
    flag_out_of_range("--data_range", "0", "1", "2", names=("A_MIN A_MAX B_MIN B_MAX",), script="test.py"),
    # ranges (tests/test_flag_ranges.py checks that every numeric flag of every parser has one)
    flag_out_of_range("--seed", "-1", names=(">= 0", "<= 4294967295")),
    flag_out_of_range("--lambda_GAN", "-1", names=(">= 0",)),
    flag_out_of_range("--ddp_timeout", "1e20", names=("<= 1e+06",)),
    flag_out_of_range("--n_layers_D", "1000", names=("<= 16",)),
    flag_out_of_range("--num_D", "100", "--netD", "multiscale", names=("<= 8",)),
    flag_out_of_range("--accum_steps", "100000", names=("<= 1024",)),
]
