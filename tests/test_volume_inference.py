"""Volume generators outside test.py: the Translator (models/inference/translator.py), scripts/translate.py and
scripts/export.py serve a run trained on volume patches (a 3-D --netG), in sliding windows of its patch size.

One tiny pix2pix run on synthetic NIfTI volumes, trained in-process for a few steps, serves every test.
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import load_script
from data.volume_io import from_network, to_network
from models import networks
from models.inference.application import InferenceGenerator
from models.inference.exact import ExactBudget
from models.inference.translator import Translator
from models.inference.windows import Windows
from util.errors import UserError

nib = pytest.importorskip("nibabel")
WINDOW = (8, 8, 8)  # the run's --patch_size
DATA_RANGE = (0.0, 1000.0)  # its --data_range: both domains
SHAPE = (13, 11, 9)  # not a multiple of the window: the sliding window pads and crops
AFFINE = np.array([[0.0, -1.5, 0.0, 40.0],  # axes swapped, flipped and scaled, shifted: nothing an identity hides
                   [2.0, 0.0, 0.0, -12.5],
                   [0.0, 0.0, 3.0, 7.0],
                   [0.0, 0.0, 0.0, 1.0]])
FLAGS = ["--model", "pix2pix", "--dataset_mode", "aligned_volume", "--data_range", "0", "1000",
         "--patch_size", ",".join(map(str, WINDOW)), "--netG", "resnet_6blocks_3d", "--ngf", "4", "--input_nc", "1",
         "--output_nc", "1", "--num_threads", "0", "--seed", "0"]


def smooth_volume(rng: np.random.Generator, shape: tuple[int, ...] = SHAPE) -> np.ndarray:
    """Values spread over the window 0..1000, smooth like tissue."""
    field = torch.from_numpy(rng.normal(size=shape).astype(np.float32))[None, None]
    field = torch.nn.functional.avg_pool3d(torch.nn.functional.pad(field, [1] * 6, mode="replicate"), 3, stride=1)
    return (500 + 900 * field[0, 0].numpy()).astype(np.float32)


def save_nifti(path: Path, values: np.ndarray) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    nib.save(nib.Nifti1Image(values.astype(np.float32), AFFINE), str(path))
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A pix2pix run (checkpoints/run) trained on 8x8x8 patches of A -> B volumes, with its dataset
    (data/{train,test}{A,B}/v.nii.gz). Weights far from the usual N(0, 0.02) start, so that outputs vary
    across the window and a wrong mapping shows in every voxel."""
    root = tmp_path_factory.mktemp("volume_run")
    rng = np.random.default_rng(0)
    for phase in ("train", "test"):
        source = smooth_volume(rng)
        save_nifti(root / "data" / f"{phase}A" / "v.nii.gz", source)
        save_nifti(root / "data" / f"{phase}B" / "v.nii.gz", 1000 - source)
    train = load_script("train.py")
    assert train.main(["--dataroot", str(root / "data"), "--name", "run",
                       "--checkpoints_dir", str(root / "checkpoints"),
                       *FLAGS, "--netD", "n_layers_3d", "--n_layers_D", "1", "--ndf", "4", "--display_id", "0",
                       "--init_type", "xavier", "--init_gain", "1.0", "--n_epochs", "1", "--n_epochs_decay", "0",
                       "--patches_per_volume", "2"]) == 0
    return root


@pytest.fixture(scope="module")
def translator(run) -> Translator:
    return Translator.load(run / "checkpoints" / "run", device="cpu")


def picture_translator() -> Translator:
    torch.manual_seed(0)
    return Translator.from_generator(networks.define_G(1, 1, 4, "resnet_6blocks"), "resnet_6blocks", 1, 1, device="cpu",
                                     source="pictures/latest_net_G.pth")


def one_paragraph(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text.strip() and "Traceback" not in text
    return text


def test_without_monai_test_py_exits_2_naming_the_package_before_writing_anything(run, tmp_path, monkeypatch,
                                                                                  capsys):
    monkeypatch.setitem(sys.modules, "monai.inferers", None)  # as where monai is not installed
    results = tmp_path / "results"
    test = load_script("test.py")
    assert test.main(["--dataroot", str(run / "data"), "--name", "run", "--checkpoints_dir", str(run / "checkpoints"),
                      *FLAGS, "--results_dir", str(results)]) == 2
    message = capsys.readouterr().err.strip()
    assert "pip install monai" in message and "Traceback" not in message and "\n" not in message
    assert not list(results.rglob("*.nii.gz"))
    with pytest.raises(UserError, match="pip install monai"):  # the Translator's windows likewise
        InferenceGenerator(networks.define_G(1, 1, 4, "resnet_6blocks_3d"), networks.size_rule("resnet_6blocks_3d"),
                           Windows.for_volumes(WINDOW, 0.5, 4))


# ------------------------------------------------------------------------------------------ the Translator
def test_translate_file_writes_nifti_over_its_input_equal_to_test_py_output(run, translator, tmp_path):
    source = run / "data" / "testA" / "v.nii.gz"
    assert translator.volumes and translator.window.size == WINDOW  # the run's --patch_size, from train_opt.json
    assert translator.translate_file(source, tmp_path / "out" / "v.nii.gz") == [str(tmp_path / "out" / "v.nii.gz")]

    test = load_script("test.py")
    assert test.main(["--dataroot", str(run / "data"), "--name", "run", "--checkpoints_dir", str(run / "checkpoints"),
                      *FLAGS, "--eval", "--results_dir", str(tmp_path / "results")]) == 0
    expected = nib.load(str(tmp_path / "results" / "run" / "test_latest" / "volumes" / "v_fake_B.nii.gz"))
    output, given = nib.load(str(tmp_path / "out" / "v.nii.gz")), nib.load(str(source))
    # the output lies exactly over its input in a viewer
    assert output.shape == given.shape == SHAPE
    assert np.array_equal(output.affine, given.affine) and np.array_equal(output.affine, AFFINE)
    assert output.header.get_zooms() == given.header.get_zooms() == (2.0, 1.5, 3.0)
    values = np.asarray(output.dataobj)
    assert values.dtype == np.float32 and values.std() > 10  # a real signal, in the data's units
    np.testing.assert_allclose(values, np.asarray(expected.dataobj), rtol=0, atol=1e-6)


def test_an_array_in_data_units_gives_float32_in_the_output_units(run, translator, tmp_path):
    volume = np.asarray(nib.load(str(run / "data" / "testA" / "v.nii.gz")).dataobj).astype(np.float64)
    out = translator.translate(volume)
    assert out.shape == SHAPE and out.dtype == np.float32
    # units -> the window -> [-1, 1] -> the network -> back through the window
    network = torch.from_numpy(to_network(volume, DATA_RANGE))[None]
    np.testing.assert_allclose(out, from_network(translator.translate(network)[0].numpy(), DATA_RANGE), atol=1e-4)
    assert out.min() < 400 and out.max() > 600  # spread over the window, not squeezed into [-1, 1]
    assert np.array_equal(translator.translate(volume[None]), out[None])  # (C, D, H, W) keeps its channel axis
    # a file path gives (C, D, H, W); .npy in, .npy out, the same numbers
    np.save(tmp_path / "v.npy", volume.astype(np.float32))
    assert np.array_equal(translator.translate(str(tmp_path / "v.npy")), out[None])
    translator.translate_file(tmp_path / "v.npy", tmp_path / "out" / "v.npy")
    assert np.array_equal(np.load(tmp_path / "out" / "v.npy"), out)


def test_a_tensor_in_network_range_gives_the_same_shape_in_network_range(translator):
    x = torch.rand(2, 1, 13, 12, 9, generator=torch.Generator().manual_seed(0)) * 2 - 1
    batch = translator.translate(x)
    assert batch.shape == x.shape and batch.dtype == x.dtype
    assert batch.abs().max() <= 1 and batch.std() > 0.05
    one = translator.translate(x[1])  # (C, D, H, W)
    assert one.shape == x[1].shape
    torch.testing.assert_close(one, batch[1], rtol=0, atol=1e-6)  # a volume's output does not depend on its batch
    # exactly the run's generator in Gaussian-blended windows of its patch size (models/inference/windows.py)
    with torch.no_grad():
        expected = InferenceGenerator(translator.generator, translator.size_rule,
                                      Windows.for_volumes(WINDOW, 0.5, 4))(x)
    torch.testing.assert_close(batch, expected, rtol=0, atol=1e-6)


def test_whole_volumes_translate_exactly_in_tiles_as_in_one_forward_and_test_py_agrees(run, tmp_path):
    # batch norm without --eval: statistics over the whole volume, not a window's (dropout from the same seed)
    small = Translator.load(run / "checkpoints" / "run", device="cpu", eval_mode=False, whole_volumes=True,
                            exact=ExactBudget(memory=2 << 20))  # 2 MiB: cut into tiles
    whole = Translator.load(run / "checkpoints" / "run", device="cpu", eval_mode=False, whole_volumes=True,
                            exact=None)
    x = torch.rand(1, 1, 41, 36, 30, generator=torch.Generator().manual_seed(0)) * 2 - 1
    exact, one_forward = small.translate(x), whole.translate(x)
    assert exact.shape == x.shape and one_forward.std() > 0.05
    torch.testing.assert_close(exact, one_forward, rtol=0, atol=1e-5)
    test = load_script("test.py")
    assert test.main(["--dataroot", str(run / "data"), "--name", "run", "--checkpoints_dir", str(run / "checkpoints"),
                      *FLAGS, "--whole_volumes", "--eval", "--results_dir", str(tmp_path / "results")]) == 0
    written = nib.load(str(tmp_path / "results" / "run" / "test_latest" / "volumes" / "v_fake_B.nii.gz"))
    whole = Translator.load(run / "checkpoints" / "run", device="cpu", whole_volumes=True)  # eval mode, as --eval
    expected = whole.translate_file(run / "data" / "testA" / "v.nii.gz", tmp_path / "v.nii.gz")
    np.testing.assert_allclose(np.asarray(written.dataobj), np.asarray(nib.load(expected[0]).dataobj), atol=1e-2)


def test_patch_size_and_window_keywords_replace_the_runs_and_a_picture_generator_refuses_them(run, translator):
    x = torch.rand(1, 1, 13, 11, 9, generator=torch.Generator().manual_seed(1)) * 2 - 1
    larger = Translator.load(run / "checkpoints" / "run", device="cpu", patch_size=12, window_overlap=0.25,
                             window_batch=1)
    assert (larger.window.size, larger.window.overlap, larger.window.batch) == ((12, 12, 12), 0.25, 1)
    with torch.no_grad():
        expected = InferenceGenerator(larger.generator, larger.size_rule, Windows.for_volumes((12, 12, 12), 0.25, 1))(x)
    torch.testing.assert_close(larger.translate(x), expected, rtol=0, atol=1e-6)
    assert (larger.translate(x) - translator.translate(x)).abs().max() > 1e-3  # the window matters
    with pytest.raises(UserError) as err:
        Translator.load(run / "checkpoints" / "run", device="cpu", patch_size=6)
    assert "--patch_size 6x6x6" in one_paragraph(err) and "multiples of 4" in str(err.value)
    with pytest.raises(UserError) as err:
        Translator.from_generator(networks.define_G(1, 1, 4, "resnet_6blocks"), "resnet_6blocks", 1, 1, device="cpu",
                                  patch_size=8)
    assert "patch_size" in one_paragraph(err) and "translates pictures" in str(err.value)


def test_a_run_without_options_file_asks_for_the_patch_size(run, tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(run / "checkpoints" / "run" / "latest_net_G.pth", bare)
    shutil.copy(run / "checkpoints" / "run" / "architecture.json", bare)
    with pytest.raises(UserError) as err:
        Translator.load(bare, device="cpu", data_range=DATA_RANGE)
    assert "patch_size=(D, H, W)" in one_paragraph(err) and "--patch_size" in str(err.value)
    assert Translator.load(bare, device="cpu", data_range=DATA_RANGE, patch_size=(8, 8, 12)).window.size == (8, 8, 12)


@pytest.mark.parametrize("picture, what", [
    (lambda tmp: Image.new("L", (16, 16)), "a PIL image is a picture"),
    (lambda tmp: str(tmp / "p.png"), "p.png is a picture"),
    (lambda tmp: np.zeros((16, 16), np.float32), "(H x W) is a picture"),
    (lambda tmp: torch.zeros(1, 16, 16), "(C x H x W) is a picture"),
], ids=["PIL image", "png file", "HxW array", "CxHxW tensor"])
def test_a_volume_generator_refuses_pictures_saying_it_takes_volumes(translator, tmp_path, picture, what):
    Image.new("L", (16, 16)).save(tmp_path / "p.png")
    with pytest.raises(UserError) as err:
        translator.translate(picture(tmp_path))
    assert "translates volumes" in one_paragraph(err) and what in str(err.value) and ".nii.gz" in str(err.value)


@pytest.mark.parametrize("volume, what", [
    (lambda run: str(run / "data" / "testA" / "v.nii.gz"), "v.nii.gz is a volume"),
    (lambda run: torch.zeros(1, 1, 8, 8, 8), "(N x C x D x H x W) is a volume"),
], ids=["NIfTI file", "5-D tensor"])
def test_a_picture_generator_refuses_volumes_saying_it_takes_pictures(run, volume, what):
    with pytest.raises(UserError) as err:
        picture_translator().translate(volume(run))
    assert "translates pictures" in one_paragraph(err) and what in str(err.value)


def test_a_volume_cannot_be_written_as_a_picture_file(run, translator, tmp_path):
    with pytest.raises(UserError) as err:
        translator.translate_file(run / "data" / "testA" / "v.nii.gz", tmp_path / "v.png")
    assert str(tmp_path / "v.png") in one_paragraph(err) and ".nii.gz" in str(err.value)
    assert not list(tmp_path.iterdir())


def test_a_run_without_data_range_refuses_float_volumes_and_maps_uint8_by_0_to_255(run, tmp_path):
    folder = tmp_path / "uint8_run"  # as trained on uint8 volumes, which need no --data_range
    shutil.copytree(run / "checkpoints" / "run", folder)
    options = json.loads((folder / "train_opt.json").read_text())
    (folder / "train_opt.json").write_text(json.dumps({**options, "data_range": None}))
    translator = Translator.load(folder, device="cpu")
    with pytest.raises(UserError) as err:
        translator.translate(np.full((9, 9, 9), 300.0, np.float32))
    assert "float32" in one_paragraph(err) and "data_range=(MIN, MAX)" in str(err.value)
    with pytest.raises(UserError) as err:
        translator.translate(run / "data" / "testA" / "v.nii.gz")
    assert "v.nii.gz" in one_paragraph(err) and "--data_range" in str(err.value)
    volume = np.random.default_rng(0).integers(0, 256, (9, 10, 11), dtype=np.uint8)
    out = translator.translate(volume)
    network = torch.from_numpy(volume / np.float32(127.5) - 1)[None].float()
    np.testing.assert_allclose(out, (translator.translate(network)[0].numpy() + 1) * 127.5, atol=1e-3)


# ------------------------------------------------------------------------------------------ translate.py
def translate_command(args: list[str], capsys) -> tuple[int, str, str]:
    """scripts/translate.py run in-process: (exit status, stdout, stderr)."""
    try:
        status = load_script("scripts/translate.py").main(args)
    except SystemExit as stopped:  # argparse's refusals
        status = stopped.code
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_translate_command_translates_a_folder_of_volumes_keeping_their_names(run, translator, tmp_path, capsys):
    inputs = tmp_path / "scans"
    volume = np.asarray(nib.load(str(run / "data" / "testA" / "v.nii.gz")).dataobj)
    save_nifti(inputs / "a.nii.gz", volume)
    save_nifti(inputs / "deep" / "b.nii", volume[:, :9])
    np.save(inputs / "c.npy", volume[:10])
    Image.new("L", (16, 16)).save(inputs / "photo.png")
    status, out, err = translate_command([str(inputs), "--checkpoint", str(run / "checkpoints" / "run"),
                                          "--output", str(tmp_path / "out"), "--device", "cpu"], capsys)
    assert status == 0, err
    assert "translated 3 of 4 files" in out and "photo.png: not a volume file (.png)" in out
    written = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert written == ["a.nii.gz", "c.npy", "deep/b.nii"]
    a = nib.load(str(tmp_path / "out" / "a.nii.gz"))
    assert np.array_equal(a.affine, AFFINE)
    np.testing.assert_allclose(np.asarray(a.dataobj), translator.translate(volume), rtol=0, atol=1e-6)
    assert nib.load(str(tmp_path / "out" / "deep" / "b.nii")).shape == (13, 9, 9)
    np.testing.assert_allclose(np.load(tmp_path / "out" / "c.npy"), translator.translate(volume[:10]), atol=1e-6)


@pytest.mark.parametrize("flags, named", [
    (["--tile", "64"], "--tile"),
    (["--n_samples", "2"], "--n_samples"),
    (["--codes", "{tmp}/codes.txt"], "--codes"),
    (["--reference", "{tmp}/ref.nii.gz"], "--reference"),
    (["--window_overlap", "1"], "--window_overlap"),
    (["--window_batch", "0"], "--window_batch"),
    (["--patch_size", "8,8"], "--patch_size"),
    (["--patch_size", "6"], "--patch_size 6x6x6"),
], ids=["tile", "n_samples", "codes", "reference", "overlap 1", "batch 0", "two sides", "not a multiple of 4"])
def test_translate_command_refuses_picture_flags_and_bad_window_flags_for_a_volume_run(run, tmp_path, capsys,
                                                                                      flags, named):
    (tmp_path / "codes.txt").write_text("0.5 0.5\n")
    status, out, err = translate_command([str(run / "data" / "testA"), "--checkpoint", str(run / "checkpoints" / "run"),
                                          "--output", str(tmp_path / "out"), "--device", "cpu",
                                          *(flag.format(tmp=tmp_path) for flag in flags)], capsys)
    assert status == 2 and len(err.strip().splitlines()) == 1 and err.startswith("error: "), err
    assert named in err and "Traceback" not in err
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_translate_command_names_its_window_flags_for_a_picture_run(tmp_path, capsys):
    torch.save(networks.define_G(1, 1, 4, "resnet_6blocks").state_dict(), tmp_path / "latest_net_G.pth")
    Image.new("L", (16, 16)).save(tmp_path / "photo.png")
    status, out, err = translate_command([str(tmp_path / "photo.png"),
                                          "--checkpoint", str(tmp_path / "latest_net_G.pth"),
                                          "--output", str(tmp_path / "out"), "--device", "cpu", "--patch_size", "8",
                                          "--window_batch", "2"], capsys)
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: --patch_size and --window_batch:") and "picture generator" in err


# ------------------------------------------------------------------------------------------ export.py
@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated")
def test_export_of_a_3d_generator_takes_windows_of_the_patch_size_and_matches_pytorch(run, translator, tmp_path,
                                                                                      capsys):
    weights = run / "checkpoints" / "run" / "latest_net_G.pth"
    status = load_script("scripts/export.py").main(["--weights", str(weights), "--netG", "resnet_6blocks_3d",
                                                    "--ngf", "4", "--input_nc", "1", "--output_nc", "1", "--norm",
                                                    "batch", "--export_dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert status == 0 and "check passed" in out, out
    assert "windows of 8x8x8 voxels" in out  # the run's --patch_size, from the train_opt.json beside the weights
    net = translator.generator.eval()
    x = torch.rand(2, 1, *WINDOW, generator=torch.Generator().manual_seed(2)) * 2 - 1
    scripted = torch.jit.load(str(tmp_path / "latest_net_G.pt"))
    with torch.no_grad(), torch.jit.optimized_execution(False):
        expected, from_script = net(x), scripted(x)
    assert expected.shape == x.shape and expected.std() > 0.05
    assert (from_script - expected).abs().max() <= 1e-4
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is optional; the ONNX comparison needs it")
    session = ort.InferenceSession(str(tmp_path / "latest_net_G.onnx"), providers=["CPUExecutionProvider"])
    from_onnx = torch.from_numpy(session.run(None, {"input": x.numpy()})[0])
    assert (from_onnx - expected).abs().max() <= 1e-4
