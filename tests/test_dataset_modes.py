"""A dataset mode is one file: built-in modes are found by file name, a user's own module by its
dotted path, and what a dataset declares it reads is checked before the run starts."""
from __future__ import annotations

import sys

import pytest

from conftest import load_script
from data import DATASETS, find_dataset_using_name
from data.aligned_dataset import AlignedDataset
from util.errors import UserError

MODE = "custom_datasets.noisy_dataset"  # tests/custom_datasets/noisy_dataset.py, known to nothing in the project
TINY = ["--netG", "resnet_6blocks", "--ngf", "4", "--ndf", "4", "--load_size", "32", "--crop_size", "32",
        "--n_epochs", "1", "--n_epochs_decay", "0", "--max_dataset_size", "2", "--display_id", "0",
        "--num_threads", "0", "--seed", "0"]


@pytest.fixture(scope="module")
def train():
    return load_script("train.py")


def test_a_dataset_module_outside_the_project_trains_pix2pix_and_is_recorded_in_train_opt(train, paired_root,
                                                                                           tmp_path):
    code = train.main(["--dataroot", str(paired_root), "--name", "ext", "--model", "pix2pix", "--dataset_mode",
                       MODE, *TINY, "--checkpoints_dir", str(tmp_path)])
    assert code == 0
    run = tmp_path / "ext"
    assert (run / "latest_net_G.pth").is_file()
    options = (run / "train_opt.txt").read_text()
    assert f"dataset_mode: {MODE}" in options


def test_a_dataset_module_gets_the_up_front_checks_it_declares(train, tmp_path, capfd):
    (tmp_path / "data").mkdir()  # no train/ folder in it
    code = train.main(["--dataroot", str(tmp_path / "data"), "--name", "ext", "--model", "pix2pix",
                       "--dataset_mode", MODE, *TINY, "--checkpoints_dir", str(tmp_path / "ckpt")])
    assert code == 2
    err = capfd.readouterr().err
    assert f"missing folder {tmp_path / 'data' / 'train'}: the noisy dataset reads clean images" in err
    assert not (tmp_path / "ckpt" / "ext" / "train_opt.txt").exists()  # refused before anything was written


def test_a_misspelt_dataset_module_exits_2_in_one_paragraph_naming_the_built_ins_and_module_paths(train, capfd):
    with pytest.raises(SystemExit) as exc:
        train.main(["--dataroot", "x", "--model", "pix2pix", "--dataset_mode", "custom_datasets.noisy"])
    assert exc.value.code == 2
    lines = capfd.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: argument --dataset_mode:"), lines
    for text in ("custom_datasets.noisy: no module of that name can be imported",
                 "aligned, aligned_volume, colorization, single, single_volume, template", "dotted path",
                 "docs/datasets.md"):
        assert text in lines[0], text


def test_built_in_modes_are_found_by_file_name():
    assert find_dataset_using_name("aligned") is AlignedDataset  # data/aligned_dataset.py's AlignedDataset
    assert all(find_dataset_using_name(name) is cls for name, cls in DATASETS.items())
    with pytest.raises(UserError, match="--dataset_mode base: no built-in dataset mode has that name"):
        find_dataset_using_name("base")  # BaseDataset is abstract: no mode


@pytest.fixture
def current_folder(tmp_path, monkeypatch):
    """An empty current folder; sys.path and sys.modules lose what was imported from it afterwards."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield tmp_path
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", None) or "").startswith(str(tmp_path)) or name in ("cwd_datasets",
                                                                                              "cwd_pair"):
            del sys.modules[name]


DATASET_SOURCE = """
from data.aligned_dataset import AlignedDataset


class {name}(AlignedDataset):
    pass
"""


def test_a_dataset_module_is_found_from_the_current_folder(current_folder):
    (current_folder / "cwd_datasets").mkdir()  # a folder without __init__.py will do
    (current_folder / "cwd_datasets" / "satellite_dataset.py").write_text(DATASET_SOURCE.format(name="Satellite"))
    found = find_dataset_using_name("cwd_datasets.satellite_dataset")
    assert found.__name__ == "Satellite" and issubclass(found, AlignedDataset)  # the imported base does not count


def test_a_module_with_two_datasets_is_refused_naming_both(current_folder):
    (current_folder / "cwd_pair").mkdir()
    (current_folder / "cwd_pair" / "two_datasets.py").write_text(DATASET_SOURCE.format(name="First")
                                                                 + DATASET_SOURCE.format(name="Second"))
    with pytest.raises(UserError, match="exactly one subclass.*defines First, Second"):
        find_dataset_using_name("cwd_pair.two_datasets")


def test_a_dataset_without_targets_is_refused_for_training_naming_it(current_folder, capsys):
    """Whether a dataset can train is its class's fact (`has_targets`), not a check of its name."""
    from options.train_options import TrainOptions

    (current_folder / "cwd_datasets").mkdir()
    (current_folder / "cwd_datasets" / "inputs_dataset.py").write_text(
        "from data.single_dataset import SingleDataset\n\n\nclass Inputs(SingleDataset):\n    pass\n")
    (current_folder / "cwd_datasets" / "both_dataset.py").write_text(
        "from data.single_dataset import SingleDataset\n\n\nclass Both(SingleDataset):\n    has_targets = True\n")
    for mode in ("single", "cwd_datasets.inputs_dataset"):
        with pytest.raises(SystemExit) as refused:
            TrainOptions().parse(["--dataroot", "x", "--model", "pix2pix", "--dataset_mode", mode])
        assert refused.value.code == 2
        assert f"--dataset_mode: {mode} reads input images without targets" in capsys.readouterr().err
    TrainOptions().parse(["--dataroot", "x", "--model", "pix2pix", "--dataset_mode", "cwd_datasets.both_dataset"])


@pytest.mark.parametrize("change, says", [
    ("item.pop('B')", ["'B'", "they hold 'A', 'A_paths', 'B_paths'"]),
    ("item.update(A=item['A'][:1])", ["'A' as (1, 32, 32)", "--input_nc 3"]),
], ids=["item_without_B", "input_with_one_channel"])
def test_a_dataset_whose_items_lack_what_the_model_reads_is_named_in_one_paragraph(train, paired_root, tmp_path,
                                                                                    monkeypatch, capfd, change, says):
    """Not a KeyError deep in the model: the dataset module, its class, the entry and what the model reads."""
    name = "mydata_" + str(abs(hash(change)))  # a module of its own per case: Python keeps the first one imported
    package = tmp_path / name
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "broken.py").write_text(
        "from custom_datasets.noisy_dataset import NoisyDataset\n\n\n"
        "class BrokenDataset(NoisyDataset):\n"
        "    def __getitem__(self, index):\n"
        "        item = super().__getitem__(index)\n"
        f"        {change}\n"
        "        return item\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    code = train.main(["--dataroot", str(paired_root), "--name", "broken", "--model", "pix2pix", "--dataset_mode",
                       f"{name}.broken", *TINY, "--checkpoints_dir", str(tmp_path / "ckpt")])
    assert code == 2
    err = capfd.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for text in [f"--dataset_mode {name}.broken (BrokenDataset)", "--model pix2pix reads A, B", *says]:
        assert text in err, (text, err)
