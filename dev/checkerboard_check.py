"""Checkerboard check: how much high-frequency energy do the generators paint with --upsample
transpose (transposed convolutions, the reference's) and --upsample resize (nearest-neighbour
upsampling then a convolution)?

    python dev/checkerboard_check.py                       # the table in docs/training_tips.md
    python dev/checkerboard_check.py --ngf 64 --size 256 --seeds 10

Each generator is randomly initialised (--init_type normal, as train.py does; several seeds) and
translates smooth inputs (bicubically enlarged noise: under 1% of their energy lies above a quarter
of the sampling rate, printed first). Reported per generator and upsampling, mean +- standard deviation over the seeds:
  high-freq  the share of the output's spectral energy (mean removed) at frequencies above 1/4
             cycle per pixel in either direction: what the upsampling adds, as the input has none;
  nyquist    the share at the period-2 frequencies (1/2 cycle per pixel: rows, columns or both),
             the checkerboard itself.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from models import networks  # noqa: E402
from util.flag_types import OneParagraphParser, positive_int  # noqa: E402


def smooth_inputs(count: int, size: int, generator: torch.Generator) -> torch.Tensor:
    """count x 3 x size x size images in [-1, 1]: 8x bicubically enlarged noise, nearly all of its energy
    below 1/16 cycle per pixel."""
    coarse = torch.rand(count, 3, size // 8, size // 8, generator=generator) * 2 - 1
    return F.interpolate(coarse, size=(size, size), mode="bicubic", align_corners=False).clamp(-1, 1)


def spectrum_shares(images: torch.Tensor) -> tuple[float, float]:
    """(high-frequency share, Nyquist share) of the images' spectral energy, mean removed."""
    centred = images - images.mean(dim=(-2, -1), keepdim=True)
    power = torch.fft.fft2(centred.double()).abs() ** 2
    size_y, size_x = images.shape[-2:]
    fy = torch.fft.fftfreq(size_y).abs().view(-1, 1)
    fx = torch.fft.fftfreq(size_x).abs().view(1, -1)
    high = (fy > 0.25) | (fx > 0.25)
    nyquist = (fy == 0.5) | (fx == 0.5)
    total = power.sum()
    return float(power[..., high].sum() / total), float(power[..., nyquist].sum() / total)


def measure(netG: str, upsample: str, args: argparse.Namespace) -> dict[str, list[float]]:
    shares: dict[str, list[float]] = {"high": [], "nyquist": []}
    inputs = smooth_inputs(args.images, args.size, torch.Generator().manual_seed(1234))
    for seed in range(args.seeds):
        torch.manual_seed(seed)
        net = networks.define_G(3, 3, args.ngf, netG, "instance", upsample=upsample).eval()
        with torch.no_grad():
            high, nyquist = spectrum_shares(net(inputs))
        shares["high"].append(high)
        shares["nyquist"].append(nyquist)
    return shares


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = OneParagraphParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--netG", default="resnet_9blocks,unet_128", help="comma-separated generators")
    parser.add_argument("--ngf", type=positive_int, default=32)
    parser.add_argument("--size", type=positive_int, default=128, help="image side (unet_128 needs a multiple of 128)")
    parser.add_argument("--images", type=positive_int, default=4)
    parser.add_argument("--seeds", type=positive_int, default=5)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    inputs = smooth_inputs(args.images, args.size, torch.Generator().manual_seed(1234))
    high_in, nyquist_in = spectrum_shares(inputs)
    print(f"input: high-freq {high_in:.2e}, nyquist {nyquist_in:.2e}")
    print("| generator | --upsample | high-freq share | Nyquist (checkerboard) share |")
    print("|---|---|---|---|")
    for netG in args.netG.split(","):
        for upsample in networks.UPSAMPLINGS:
            shares = measure(netG, upsample, args)
            cells = [f"{statistics.mean(v):.2e} ± {statistics.stdev(v) if len(v) > 1 else 0:.1e}"
                     for v in (shares["high"], shares["nyquist"])]
            print(f"| {netG} | {upsample} | {cells[0]} | {cells[1]} |", flush=True)
    print(f"\n--ngf {args.ngf}, {args.size} px, {args.images} smooth inputs, random init seeds 0-{args.seeds - 1}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
