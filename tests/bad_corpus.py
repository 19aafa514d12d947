"""The corpus of tests/test_bad_input.py, every table of cases in one list: the image cases
(tests/bad_images.py) and those of the other tests/bad_*.py modules. (tests/test_documented_promises.py
checks the cases it names against it.)"""
from __future__ import annotations

from bad_augment import AUGMENT_CASES
from bad_cut import CUT_CASES
from bad_damaged_files import DAMAGED_FILE_CASES
from bad_data_and_env import DATA_AND_ENV_CASES
from bad_empty_epochs import EMPTY_EPOCH_CASES
from bad_flag_combinations import FLAG_COMBINATION_CASES
from bad_flags_and_paths import FLAG_AND_PATH_CASES
from bad_hires import HIRES_CASES
from bad_images import IMAGE_CASES
from bad_refusals import REFUSAL_CASES
from bad_resume_flags import RESUME_FLAG_CASES
from bad_silence import SILENCE_CASES
from bad_sizes import SIZE_CASES
from bad_tools_overwrite import TOOL_OVERWRITE_CASES
from bad_visdom_server import VISDOM_SERVER_CASES
from bad_volumes import VOLUME_CASES

CASES = [
    *IMAGE_CASES,
    *FLAG_AND_PATH_CASES,
    *RESUME_FLAG_CASES,
    *DATA_AND_ENV_CASES,
    *DAMAGED_FILE_CASES,
    *HIRES_CASES,
    *AUGMENT_CASES,
    *CUT_CASES,
    *TOOL_OVERWRITE_CASES,
    *VISDOM_SERVER_CASES,
    *EMPTY_EPOCH_CASES,
    *VOLUME_CASES,
    *SIZE_CASES,
    *FLAG_COMBINATION_CASES,
    *SILENCE_CASES,
    *REFUSAL_CASES,
]


