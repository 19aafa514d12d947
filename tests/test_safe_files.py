"""No tool writes over what it reads (util/safe_files.py): an output folder that is, lies inside or
contains an input folder is told apart from one beside it, whatever way the paths are written
(relative, with "..", through symbolic links, not yet existing)."""
from __future__ import annotations

import os

import pytest

from util.errors import UserError
from util.safe_files import folder_overlap, refuse_output_over_inputs, refuse_overwriting_inputs


@pytest.fixture
def tree(tmp_path):
    """tmp/D/A/train, tmp/D/B, a link tmp/toA -> tmp/D/A."""
    (tmp_path / "D" / "A" / "train").mkdir(parents=True)
    (tmp_path / "D" / "B").mkdir()
    (tmp_path / "toA").symlink_to(tmp_path / "D" / "A")
    return tmp_path


@pytest.mark.parametrize("output, expected", [
    ("D/A", "is"),
    ("D/A/", "is"),
    ("D/B/../A", "is"),
    ("toA", "is"),                      # a link to the input
    ("D/A/train", "lies inside"),
    ("D/A/new/deeper", "lies inside"),  # need not exist yet
    ("toA/out", "lies inside"),
    ("D", "contains"),
    (".", "contains"),
    ("D/A_AB", None),                   # a name that starts like the input's is beside it
    ("D/B", None),
    ("E", None),
])
def test_an_output_folder_is_told_whether_it_is_inside_or_contains_an_input(tree, monkeypatch, output, expected):
    monkeypatch.chdir(tree)  # relative paths, as a user types them
    assert folder_overlap(output, "D/A") == expected
    assert folder_overlap(os.path.join(tree, output), str(tree / "D" / "A")) == expected


def test_the_input_given_through_a_link_is_the_folder_it_leads_to(tree):
    assert folder_overlap(str(tree / "D" / "A" / "x"), str(tree / "toA")) == "lies inside"


def test_the_refusal_names_the_output_the_input_and_the_fix(tree):
    with pytest.raises(UserError) as refused:
        refuse_output_over_inputs(str(tree / "toA"), "--out X", [("--in", str(tree / "D" / "B")),
                                                                  ("--other", str(tree / "D" / "A"))], "Do Y.")
    message = str(refused.value)
    assert message.startswith("--out X (through a symbolic link: ") \
        and f"is the input folder --other {tree / 'D' / 'A'}" in message \
        and "nothing was written" in message and message.endswith("Do Y.")
    refuse_output_over_inputs(str(tree / "E"), "--out E", [("--in", str(tree / "D"))])  # apart: no error


def test_a_file_about_to_be_written_may_not_be_an_input(tree):
    weights = tree / "D" / "w.pt"
    weights.write_bytes(b"weights")
    with pytest.raises(UserError, match="would overwrite the input"):
        refuse_overwriting_inputs([("the export", str(tree / "toA" / ".." / "w.pt"))], [str(weights)])
    refuse_overwriting_inputs([("the export", str(tree / "D" / "w.onnx"))], [str(weights)])
