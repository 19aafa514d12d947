"""Corpus cases of tests/test_bad_input.py for runs whose epochs would train nothing: a model that trains
on full batches only (BicycleGAN's two halves) given fewer samples per process than --batch_size (x
--accum_steps) is refused before anything is built, naming the dataset's size, the batch and the processes
and a --batch_size that trains; a model that trains on an incomplete batch trains on it."""
from __future__ import annotations

from pathlib import Path

from bad_input_kit import Case, Setup, aligned, run_args, suggested

# BicycleGAN at its smallest: 128-px pairs (its *_128 networks), narrow networks
BICYCLE = ["--model", "bicycle_gan", "--netG", "unet_128", "--netE", "resnet_128", "--netD", "basic_128_multi",
           "--netD2", "basic_128_multi", "--nef", "8", "--nz", "4"]
PIX2PIX_128 = ["--model", "pix2pix", "--netG", "resnet_6blocks"]


def pairs_128(work: Path, count: int) -> None:
    from PIL import Image

    from bad_input_kit import random_pixels

    aligned(work / "data" / "train", count, lambda i: Image.fromarray(random_pixels(i, 128, 256)))


def bicycle(count: int, *flags: str, names: tuple = (), fixed_by: tuple[str, ...] = ()):
    """BicycleGAN on `count` 128-px pairs with `flags`, refused naming `names`; the refusal's values of
    `fixed_by` make a command that trains."""
    def build(work: Path) -> Setup:
        pairs_128(work, count)
        args = run_args(work, *BICYCLE, *flags) + ["--load_size", "128", "--crop_size", "128"]
        return Setup(args, stderr_has=("an epoch would take no training step", f"holds {count} sample(s)", *names),
                     stdout_lacks=("The number of training images", "model [BicycleGANModel] was created"),
                     unchanged=(work / "data",), absent=(work / "ck" / "corpus" / "train_opt.txt",),
                     suggestion=suggested(*fixed_by) if fixed_by else None)
    return build


def b_pix2pix_trains_on_an_incomplete_batch(work):
    aligned(work / "data" / "train", 1)
    return Setup(run_args(work, *PIX2PIX_128, "--batch_size", "4"), stdout_has=("The number of training images = 1",),
                 stderr_lacks=("no training step",))


EMPTY_EPOCH_CASES = [
    Case("bicycle_gan on 3 images with --batch_size 4 is refused before training naming the sizes and --batch_size 2",
         bicycle(3, "--batch_size", "4", names=("1 process(es)", "--batch_size 4", "--batch_size 2"),
                 fixed_by=("--batch_size",)), 2),
    Case("bicycle_gan whose only step would end in an incomplete micro-batch (--accum_steps 2) is refused",
         bicycle(3, "--batch_size", "2", "--accum_steps", "2",
                 names=("--batch_size 2 x --accum_steps 2", "--accum_steps 1"),
                 fixed_by=("--batch_size", "--accum_steps")),
         2),
    Case("bicycle_gan on 1 image (no even batch fits) is refused asking for more samples",
         bicycle(1, "--batch_size", "2", "--print_freq", "1", names=("add training samples",)), 2),
    Case("pix2pix on 1 image with --batch_size 4 trains on the incomplete batch",
         b_pix2pix_trains_on_an_incomplete_batch, 0),
]
