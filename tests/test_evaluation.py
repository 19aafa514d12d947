"""The two ways users score results, both through util.evaluation.metrics: `test.py` (metrics.json, with
--eval_metrics FID/KID) and `scripts/evaluate.py` on image folders; they agree on the same images."""
from __future__ import annotations

import argparse
import importlib.util
import json

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import ROOT, run_in_process
from data.image_folder import list_images
from data.image_folder import load_image_tensor as load_image
from models import networks
from models.cycle_gan_model import CycleGANModel
from util.evaluation.inception import INCEPTION_WEIGHTS_NAME, OFFLINE_ENV, WEIGHTS_ENV
from util.evaluation.metrics import TranslationMetrics
from util.evaluation.metrics_report import InferenceMetrics, legacy_names


def evaluate_main(*argv: str) -> int:
    """scripts/evaluate.py's main(), run in this process."""
    spec = importlib.util.spec_from_file_location("evaluate_script", ROOT / "scripts" / "evaluate.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script.main(list(argv))


@pytest.fixture(scope="module")
def image_sets(tmp_path_factory):
    """Two folders of 4 smooth 40x48 images with the same names and different colours."""
    root = tmp_path_factory.mktemp("eval_images")
    rng = np.random.default_rng(0)
    for name, shift in (("a", 0), ("b", 60)):
        (root / name).mkdir()
        for i in range(4):
            coarse = rng.integers(0, 196, (5, 6, 3)).astype(np.uint8)
            image = np.asarray(Image.fromarray(coarse).resize((48, 40), Image.BILINEAR), dtype=float)
            Image.fromarray(np.clip(image + shift * np.array([1, 0, -0.5]), 0, 255).astype(np.uint8)).save(
                root / name / f"{i:03d}.png")
    return root


def test_evaluate_py_scores_folders_with_translation_metrics_on_the_files(image_sets, tmp_path):
    out = tmp_path / "scores.json"
    assert evaluate_main(str(image_sets / "a"), "--targets", str(image_sets / "b"), "--json", str(out)) == 0
    scores = json.loads(out.read_text())
    expected = TranslationMetrics({"": ("output", "target")}, paired=True)
    for a, b in zip(list_images(str(image_sets / "a")), list_images(str(image_sets / "b"))):
        expected.update({"output": load_image(a), "target": load_image(b)})
    assert {k: scores[k] for k in ("L1", "PSNR", "SSIM")} == expected.compute() and scores["paired_images"] == 4
    assert load_image(list_images(str(image_sets / "a"))[0]).shape == (1, 3, 40, 48)


def test_evaluate_py_names_outputs_without_a_target_or_of_another_size(image_sets, tmp_path, capsys):
    targets = tmp_path / "targets"
    targets.mkdir()
    Image.open(image_sets / "b" / "000.png").save(targets / "000.png")
    assert evaluate_main(str(image_sets / "a"), "--targets", str(targets)) == 2
    err = capsys.readouterr().err
    assert "001.png" in err and str(targets) in err
    single = tmp_path / "single"
    single.mkdir()
    Image.open(image_sets / "a" / "000.png").resize((40, 48)).save(single / "000.png")
    assert evaluate_main(str(single), "--targets", str(targets)) == 2
    err = capsys.readouterr().err
    assert "40x48" in err and "paired metrics need images of the same size" in err
    assert evaluate_main(str(single)) == 2
    assert "nothing to compute" in capsys.readouterr().err


@pytest.mark.parametrize("flags, named", [
    (["--json", "{file}/scores.json"], ("--json", "{file} is a file")),
    (["--json", "{folder}"], ("--json", "{folder} is a folder")),
    (["--batch_size", "0"], ("--batch_size", ">= 1")),
    (["--kid_subset_size", "1"], ("--kid_subset_size", ">= 2")),
    (["--device", "gpu"], ("--device", "'gpu' is not a device")),
], ids=["json under a file", "json is a folder", "batch_size 0", "kid subsets of one", "no such device"])
def test_evaluate_py_refuses_its_flags_and_output_before_scoring(image_sets, tmp_path, capsys, flags, named):
    (tmp_path / "notes.txt").write_text("a file where a folder is expected")
    fill = {"file": str(tmp_path / "notes.txt"), "folder": str(tmp_path)}
    with pytest.raises(SystemExit) as stopped:
        evaluate_main(str(image_sets / "a"), "--targets", str(image_sets / "b"), *(f.format(**fill) for f in flags))
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and len(err.strip().splitlines()) == 1 and err.startswith("error: argument ")
    for text in named:
        assert text.format(**fill) in err, err


def test_evaluate_py_writes_its_scores_into_a_folder_it_creates(image_sets, tmp_path):
    out = tmp_path / "new" / "scores.json"
    assert evaluate_main(str(image_sets / "a"), "--targets", str(image_sets / "b"), "--json", str(out)) == 0
    assert json.loads(out.read_text())["paired_images"] == 4 and [p.name for p in out.parent.iterdir()] == [out.name]


def test_evaluate_py_without_inception_weights_says_where_to_put_them(image_sets, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setenv(OFFLINE_ENV, "1")
    monkeypatch.delenv(WEIGHTS_ENV, raising=False)
    assert evaluate_main(str(image_sets / "a"), "--reference", str(image_sets / "b")) == 2
    err = capsys.readouterr().err
    assert INCEPTION_WEIGHTS_NAME in err and str(tmp_path / "torch" / "hub" / "checkpoints") in err


@pytest.mark.parametrize("given", ["--inception_weights", "$IMG2IMG_INCEPTION_WEIGHTS", "hub cache"])
def test_inception_weights_that_hold_code_are_refused_without_running_it(image_sets, tmp_path, capsys, monkeypatch,
                                                                          given):
    """torch-fidelity loads the file with pickle's full power: the file is read safely first, however it is given."""
    from helpers import Payload
    marker = tmp_path / "code_was_run"
    weights = tmp_path / "torch" / "hub" / "checkpoints" / INCEPTION_WEIGHTS_NAME
    weights.parent.mkdir(parents=True)
    torch.save({"weight": Payload(marker)}, weights)
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setenv(OFFLINE_ENV, "1")
    monkeypatch.delenv(WEIGHTS_ENV, raising=False)
    flags = ["--inception_weights", str(weights)] if given == "--inception_weights" else []
    if given.startswith("$"):
        monkeypatch.setenv(WEIGHTS_ENV, str(weights))
    assert evaluate_main(str(image_sets / "a"), "--reference", str(image_sets / "b"), *flags) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(weights) in err and "would run code" in err, err
    assert not marker.exists()


def test_lpips_weights_that_hold_code_are_refused_without_running_them(tmp_path, monkeypatch):
    from helpers import Payload
    from util.errors import UserError
    from util.evaluation.diversity import ALEXNET_WEIGHTS_NAME, SampleDiversity
    marker = tmp_path / "code_was_run"
    weights = tmp_path / "torch" / "hub" / "checkpoints" / ALEXNET_WEIGHTS_NAME
    weights.parent.mkdir(parents=True)
    torch.save({"features.0.weight": Payload(marker)}, weights)
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    with pytest.raises(UserError, match="would run code") as refused:
        SampleDiversity(lpips=True)
    assert str(weights) in str(refused.value) and not marker.exists()


# ---------------------------------------------------------------------------- test.py
def test_test_py_keeps_the_earlier_metrics_json_keys_for_both_cycle_gan_directions(tmp_path, monkeypatch):
    assert legacy_names({"L1": 1, "PSNR": 2, "SSIM": 3, "FID": 4, "KID": 5, "KID_std": 6, "FID_A": 7, "KID_A": 8,
                         "KID_A_std": 9}, "output_") == \
        {"output_L1": 1, "output_PSNR": 2, "output_SSIM": 3, "FID": 4, "KID_mean": 5, "KID_std": 6, "FID_A": 7,
         "KID_A_mean": 8, "KID_A_std": 9}
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    monkeypatch.setenv(OFFLINE_ENV, "1")
    opt = argparse.Namespace(dataset_mode="unaligned", eval_metrics=True, fid_reference="", inception_weights="",
                             input_nc=3, output_nc=3)
    cycle_gan = InferenceMetrics(opt, CycleGANModel.scored_pairs(paired=False), CycleGANModel.input_visual,
                                 torch.device("cpu"), paired=False)
    assert cycle_gan.outputs.pairs == {"": ("fake_B", "real_B"), "A": ("fake_A", "real_A")}
    assert cycle_gan.baseline is None and INCEPTION_WEIGHTS_NAME in cycle_gan.compute()["fid_skipped"]


PIX = ["--model", "pix2pix", "--direction", "BtoA", "--netG", "resnet_6blocks", "--ngf", "8", "--num_threads", "0",
       "--load_size", "32", "--crop_size", "32"]


@pytest.fixture(scope="module")
def pix_checkpoint(tmp_path_factory):
    ckpt = tmp_path_factory.mktemp("ckpt")
    (ckpt / "p").mkdir()
    torch.manual_seed(0)
    net = networks.define_G(3, 3, 8, "resnet_6blocks", "batch", use_dropout=True)  # pix2pix keeps dropout
    torch.save(net.state_dict(), ckpt / "p" / "latest_net_G.pth")
    return ckpt


@pytest.mark.slow
def test_test_py_eval_metrics_and_evaluate_py_on_its_files_give_the_same_numbers(pix_checkpoint, paired_root, tmp_path,
                                                                                 inception_torch_home, monkeypatch,
                                                                                 capsys):
    monkeypatch.setenv("TORCH_HOME", str(inception_torch_home))
    monkeypatch.setenv(OFFLINE_ENV, "1")
    result = run_in_process("test.py", "--dataroot", str(paired_root), "--name", "p", *PIX, "--checkpoints_dir",
                            str(pix_checkpoint), "--results_dir", str(tmp_path), "--eval_metrics", capsys=capsys)
    assert result.returncode == 0, result.stderr[-3000:]
    run = tmp_path / "p" / "test_latest"
    metrics = json.loads((run / "metrics.json").read_text())
    for key in ("output_L1", "identity_L1", "output_PSNR", "identity_PSNR", "output_SSIM", "identity_SSIM", "FID",
                "KID_mean", "KID_std"):
        assert key in metrics, key
    assert metrics["images"] == 4 and metrics["fid_generated_images"] == 4 == metrics["fid_reference_images"]
    assert "FID" in (run / "index.html").read_text()
    assert evaluate_main(str(run), "--targets", "real", "--reference", "real") == 0
    scores = json.loads((run / "evaluation.json").read_text())
    assert scores["output_label"] == "fake_B"
    # the Inception sees the same 8-bit values; the paired metrics differ by the files' 8-bit rounding
    assert scores["FID"] == pytest.approx(metrics["FID"], rel=1e-6)
    assert scores["KID_mean"] == pytest.approx(metrics["KID_mean"], rel=1e-6, abs=1e-9)
    assert scores["L1"] == pytest.approx(metrics["output_L1"], abs=1 / 255)
    assert scores["PSNR"] == pytest.approx(metrics["output_PSNR"], abs=0.05)
    assert scores["SSIM"] == pytest.approx(metrics["output_SSIM"], abs=0.01)


@pytest.mark.slow
def test_test_py_without_inception_weights_skips_fid_but_refuses_fid_reference(pix_checkpoint, paired_root, tmp_path,
                                                                               monkeypatch, capsys):
    for name, value in {"TORCH_HOME": str(tmp_path / "torch"), WEIGHTS_ENV: "", OFFLINE_ENV: "1"}.items():
        monkeypatch.setenv(name, value)
    common = ["--dataroot", str(paired_root), "--name", "p", *PIX, "--checkpoints_dir", str(pix_checkpoint),
              "--eval_metrics"]
    skipped = run_in_process("test.py", *common, "--results_dir", str(tmp_path / "a"), capsys=capsys)
    asked = run_in_process("test.py", *common, "--results_dir", str(tmp_path / "b"), "--fid_reference",
                           str(paired_root / "test"), capsys=capsys)
    assert skipped.returncode == 0, skipped.stderr[-3000:]
    metrics = json.loads((tmp_path / "a" / "p" / "test_latest" / "metrics.json").read_text())
    assert "FID" not in metrics and INCEPTION_WEIGHTS_NAME in metrics["fid_skipped"] and "output_SSIM" in metrics
    assert asked.returncode == 2 and INCEPTION_WEIGHTS_NAME in asked.stderr and "Traceback" not in asked.stderr
