"""Corpus cases of tests/test_bad_input.py for issue 21's flags (--diff_augment, --ada_target,
--ada_kimg, --upsample, --D_spectral, --gan_mode hinge): a bad value or a combination that cannot work
is one paragraph naming the flag and the fix, exit status 2, before anything is written; a continued
run cannot switch --upsample or --D_spectral (its networks' weights would not fit). Every case id
names --diff_augment (`pytest tests/test_bad_input.py -k augment` selects them)."""
from __future__ import annotations

from bad_flags_and_paths import flag_case, flag_refused
from bad_input_kit import Case
from bad_resume_flags import PLATEAU, continued

AUGMENT = ("--diff_augment", "color")

AUGMENT_CASES = [
    flag_case("--diff_augment", "colour,translation", names=("color, translation, cutout", "colour")),
    flag_case("--diff_augment", ",", names=("color, translation, cutout",)),
    Case("--ada_target 0.6 without --diff_augment is refused by train.py naming both",
         flag_refused("--ada_target", "0.6", names=("--diff_augment is off", "add --diff_augment")), 2,
         parse_only=True),
    flag_case("--ada_target", "1.5", *AUGMENT, names=("< 1", "1.5")),
    flag_case("--ada_kimg", "0", *AUGMENT, names=("> 0",)),
    flag_case("--upsample", "bilinear", *AUGMENT, names=("transpose", "resize")),
    flag_case("--gan_mode", "hinge_loss", *AUGMENT, names=("hinge", "lsgan")),
    Case("--continue_train with --diff_augment and another --upsample and --D_spectral is refused naming both values",
         continued(*PLATEAU, *AUGMENT, "--upsample", "resize", "--D_spectral",
                   stderr_has=("--upsample transpose", "--upsample resize", "no --D_spectral, this command has "
                               "--D_spectral")), 2),
]
