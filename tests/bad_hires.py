"""Corpus cases of tests/test_bad_input.py for the high-resolution flags (docs/high_resolution.md):
--accum_steps, --netD multiscale / --num_D, --lambda_feat, and changing the discriminator on
--continue_train. (A model without accumulation phases, and a changed --accum_steps on continuing, are
checked in-process in tests/test_high_resolution.py: here each would cost a subprocess building or
training a model.)"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from bad_flags_and_paths import flag_case
from bad_input_kit import PIX, Case, Setup, aligned, run_args
from bad_resume_flags import PLATEAU, continued


def b_num_D_too_large_for_the_crop(work: Path) -> Setup:
    aligned(work / "data" / "train", 2)
    # 32 px crops: 4 scales of 3-layer PatchGANs need 192 px; one scale (24 px) fits
    return Setup(run_args(work, *PIX, "--netD", "multiscale", "--num_D", "4"),
                 stderr_has=("--num_D 4", "192x192", "32x32", "use --num_D 1"))


HIRES_CASES = [
    flag_case("--accum_steps", "0", names=(">= 1",)),
    flag_case("--num_D", "0", names=(">= 1",)),
    flag_case("--num_D", "3", names=("--netD multiscale", "--netD basic")),
    flag_case("--gan_mode", "wgangp", "--netD", "multiscale", names=("--netD multiscale", "lsgan")),
    flag_case("--lambda_feat", "10", "--netD", "pixel", names=("--netD pixel", "--lambda_feat 0")),
    Case("--netD multiscale with more --num_D scales than the crop size allows is refused naming the --num_D that "
         "fits", b_num_D_too_large_for_the_crop, 2),
    Case("--continue_train with --netD multiscale --num_D 3 is refused naming both discriminators",
         continued(*PLATEAU, "--n_epochs", "2", "--netD", "multiscale", "--num_D", "3",
                   stderr_has=("--netD basic", "--netD multiscale", "--num_D 2", "--num_D 3")), 2),
]
# "hires" in every id: `pytest tests/test_bad_input.py -k hires` runs these cases alone
HIRES_CASES = [dataclasses.replace(case, id=f"hires {case.id}") for case in HIRES_CASES]
