"""Code written against the reference implementation (junyanz/pytorch-CycleGAN-and-pix2pix) finds every
public name of the reference's modules at the same path here, and calls it with the reference's arguments;
the faces kept for it do what the reference's users rely on."""
from __future__ import annotations

import importlib
import inspect
import re
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from data import CustomDatasetDataLoader, create_dataset
from data.image_folder import ImageFolder, default_loader
from models import create_model, networks
from options.train_options import TrainOptions
from util import distributed, html
from util.distributed import DistContext, current_context
from util.errors import UserError
from util.get_data import GetData
from util.util import cleanup_ddp, diagnose_network, init_ddp, mkdir, mkdirs, print_numpy
from util.visualizer import save_images

# Every public top-level name of the reference's modules (functions, classes, module-level values), with,
# for a function or class, the parameters the reference declares and how many of them are required.
REFERENCE_NAMES: dict[str, dict[str, tuple[tuple[str, ...], int] | None]] = {
    "models": {
        "find_model_using_name": (("model_name",), 1),
        "get_option_setter": (("model_name",), 1),
        "create_model": (("opt",), 1),
    },
    "models.networks": {
        "Identity": ((), 0),
        "get_norm_layer": (("norm_type",), 0),
        "get_scheduler": (("optimizer", "opt"), 2),
        "init_weights": (("net", "init_type", "init_gain"), 1),
        "init_net": (("net", "init_type", "init_gain"), 1),
        "define_G": (("input_nc", "output_nc", "ngf", "netG", "norm", "use_dropout", "init_type", "init_gain"), 4),
        "define_D": (("input_nc", "ndf", "netD", "n_layers_D", "norm", "init_type", "init_gain"), 3),
        "GANLoss": (("gan_mode", "target_real_label", "target_fake_label"), 1),
        "cal_gradient_penalty": (("netD", "real_data", "fake_data", "device", "type", "constant", "lambda_gp"), 4),
        "ResnetGenerator": (("input_nc", "output_nc", "ngf", "norm_layer", "use_dropout", "n_blocks",
                             "padding_type"), 2),
        "ResnetBlock": (("dim", "padding_type", "norm_layer", "use_dropout", "use_bias"), 5),
        "UnetGenerator": (("input_nc", "output_nc", "num_downs", "ngf", "norm_layer", "use_dropout"), 3),
        "UnetSkipConnectionBlock": (("outer_nc", "inner_nc", "input_nc", "submodule", "outermost", "innermost",
                                     "norm_layer", "use_dropout"), 2),
        "NLayerDiscriminator": (("input_nc", "ndf", "n_layers", "norm_layer"), 1),
        "PixelDiscriminator": (("input_nc", "ndf", "norm_layer"), 1),
    },
    "models.base_model": {"BaseModel": (("opt",), 1)},
    "data": {
        "find_dataset_using_name": (("dataset_name",), 1),
        "get_option_setter": (("dataset_name",), 1),
        "create_dataset": (("opt",), 1),
        "CustomDatasetDataLoader": (("opt",), 1),
    },
    "data.base_dataset": {
        "BaseDataset": (("opt",), 1),
        "get_params": (("opt", "size"), 2),
        "get_transform": (("opt", "params", "grayscale", "method", "convert"), 1),
    },
    "options": {},
    "util.util": {
        "tensor2im": (("input_image", "imtype"), 1),
        "diagnose_network": (("net", "name"), 1),
        "init_ddp": ((), 0),
        "cleanup_ddp": ((), 0),
        "save_image": (("image_numpy", "image_path", "aspect_ratio"), 2),
        "print_numpy": (("x", "val", "shp"), 1),
        "mkdirs": (("paths",), 1),
        "mkdir": (("path",), 1),
    },
    "util.html": {"HTML": (("web_dir", "title", "refresh"), 2)},
    "util.visualizer": {
        "save_images": (("webpage", "visuals", "image_path", "aspect_ratio", "width"), 3),
        "Visualizer": (("opt",), 1),
    },
    "util.image_pool": {"ImagePool": (("pool_size",), 1)},
    "data.image_folder": {
        "IMG_EXTENSIONS": None,
        "is_image_file": (("filename",), 1),
        "make_dataset": (("dir", "max_dataset_size"), 1),
        "default_loader": (("path",), 1),
        "ImageFolder": (("root", "transform", "return_paths", "loader"), 1),
    },
    "util.get_data": {"GetData": (("technique", "verbose"), 0)},
}
CALLABLES = [(module, name, params) for module, names in REFERENCE_NAMES.items()
             for name, params in names.items() if params is not None]


@pytest.mark.parametrize("module", sorted(REFERENCE_NAMES))
def test_every_public_name_of_a_reference_module_is_found_at_its_path(module):
    imported = importlib.import_module(module)
    assert [name for name in REFERENCE_NAMES[module] if not hasattr(imported, name)] == []


@pytest.mark.parametrize("module,name,params", CALLABLES, ids=[f"{m}.{n}" for m, n, _ in CALLABLES])
def test_a_reference_function_or_class_takes_the_reference_arguments(module, name, params):
    names, required = params
    signature = inspect.signature(getattr(importlib.import_module(module), name))
    signature.bind(*names[:required])  # the reference's required arguments alone, by position
    signature.bind(*names)  # all of them, by position, in the reference's order
    signature.bind(**dict.fromkeys(names))  # all of them, by name


def test_init_net_initialises_the_weights_and_places_the_network_on_the_requested_device():
    net = nn.Sequential(nn.Conv2d(3, 64, 3), nn.Conv2d(64, 64, 3))
    for param in net.parameters():
        nn.init.constant_(param, 1.0)
    assert networks.init_net(net, "normal", 0.02) is net
    weights = net[1].weight.detach()  # 36864 draws of N(0, 0.02)
    assert 0.019 < float(weights.std()) < 0.021 and abs(float(weights.mean())) < 0.001
    assert torch.count_nonzero(net[1].bias) == 0
    assert {param.device for param in net.parameters()} == {current_context().device}
    moved = networks.init_net(nn.Linear(2, 2), device="meta")  # a device the test machine always has
    assert {param.device.type for param in moved.parameters()} == {"meta"}


def test_init_ddp_starts_this_process_on_its_device_and_cleanup_ddp_ends_it(monkeypatch):
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "SLURM_STEP_NUM_TASKS"):
        monkeypatch.delenv(name, raising=False)
    expected = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    try:
        assert init_ddp() == expected
        assert current_context().device == expected
    finally:
        cleanup_ddp()
    assert current_context() == DistContext()


def test_init_ddp_and_cleanup_ddp_start_and_end_this_process_as_the_distributed_module_does(monkeypatch):
    # Alone on a CPU, a started process looks like one never started: see that the faces hand over.
    calls = []
    monkeypatch.setattr(distributed, "init_distributed", lambda: calls.append("init") or DistContext(
        device=torch.device("meta")))
    monkeypatch.setattr(distributed, "shutdown", lambda: calls.append("shutdown"))
    assert init_ddp() == torch.device("meta")
    cleanup_ddp()
    assert calls == ["init", "shutdown"]


def test_diagnose_network_and_print_numpy_print_what_the_reference_prints(capsys):
    net = nn.Linear(2, 1)  # its bias has no gradient: left out of the mean
    net.weight.grad = torch.tensor([[-3.0, 5.0]])
    diagnose_network(net, "netG")
    name, mean = capsys.readouterr().out.splitlines()
    assert name == "netG" and float(re.search(r"-?\d+\.?\d*", mean).group()) == 4.0
    print_numpy(np.array([1, 2, 3, 4]), shp=True)
    assert capsys.readouterr().out.splitlines() == [
        "shape, (4,)", "mean = 2.500, min = 1.000, max = 4.000, median = 2.500, std=1.118"]


def test_mkdir_and_mkdirs_create_missing_folders_and_keep_existing_ones(tmp_path):
    mkdir(tmp_path / "a" / "b")
    mkdir(str(tmp_path / "a" / "b"))
    mkdirs([tmp_path / "c", str(tmp_path / "d" / "e")])
    mkdirs(tmp_path / "f")
    assert all((tmp_path / sub).is_dir() for sub in ("a/b", "c", "d/e", "f"))


def test_image_folder_lists_the_images_under_a_folder_and_loads_them_as_rgb(tmp_path):
    (tmp_path / "sub").mkdir()
    Image.new("L", (5, 4), 200).save(tmp_path / "b.png")
    Image.new("RGB", (3, 2), (1, 2, 3)).save(tmp_path / "sub" / "a.jpg")
    (tmp_path / "notes.txt").write_text("not an image")
    folder = ImageFolder(str(tmp_path), transform=lambda image: (image.mode, image.size), return_paths=True)
    assert [folder[i] for i in range(len(folder))] == [(("RGB", (5, 4)), str(tmp_path / "b.png")),
                                                       (("RGB", (3, 2)), str(tmp_path / "sub" / "a.jpg"))]
    assert default_loader(str(tmp_path / "b.png")).getpixel((0, 0)) == (200, 200, 200)
    assert isinstance(ImageFolder(str(tmp_path))[0], Image.Image)


def test_save_images_writes_the_files_and_page_row_the_reference_test_py_expects(tmp_path):
    if not html.available():
        pytest.skip(html.MISSING)
    webpage = html.HTML(str(tmp_path / "web"), "Experiment = x")
    visuals = {"real_A": torch.zeros(1, 3, 8, 6), "fake_B": torch.ones(1, 1, 8, 6)}
    save_images(webpage, visuals, ["/data/testA/horse 1.jpg"], aspect_ratio=1.0, width=64)
    page = Path(webpage.save()).read_text()
    images = tmp_path / "web" / "images"
    assert sorted(path.name for path in images.iterdir()) == ["horse 1_fake_B.png", "horse 1_real_A.png"]
    fake = Image.open(images / "horse 1_fake_B.png")
    assert fake.size == (6, 8) and fake.getpixel((0, 0)) == (255, 255, 255)
    assert "horse 1" in page and "width:64px" in page and "images/horse%201_real_A.png" in page


def test_the_reference_test_py_steps_run_with_opt_alone(unpaired_root):
    opt = TrainOptions().parse(["--dataroot", str(unpaired_root), "--model", "cycle_gan", "--ngf", "8", "--ndf", "8",
                                "--netG", "resnet_6blocks", "--serial_batches", "--num_threads", "0",
                                "--load_size", "32", "--crop_size", "32", "--max_dataset_size", "2"])
    batches = list(CustomDatasetDataLoader(opt).load_data())
    assert len(batches) == 2 and all(torch.equal(a["A"], b["A"]) for a, b in zip(batches, create_dataset(opt)))
    assert create_model(opt).device == current_context().device


def _archive(mirror: Path, technique: str, name: str) -> None:
    """A dataset archive `name` holding <stem>/trainA/x.png, where GetData looks for it under `mirror`."""
    folder = mirror / technique / "datasets"
    folder.mkdir(parents=True)
    image = folder / "x.png"
    Image.new("RGB", (2, 2)).save(image)
    stem = name.split(".")[0]
    if name.endswith(".zip"):
        with zipfile.ZipFile(folder / name, "w") as archive:
            archive.write(image, f"{stem}/trainA/x.png")
    else:
        with tarfile.open(folder / name, "w:gz") as archive:
            archive.add(image, f"{stem}/trainA/x.png")


@pytest.mark.parametrize("technique,name", [("cyclegan", "tiny.zip"), ("pix2pix", "tiny.tar.gz")])
def test_get_data_downloads_and_unpacks_a_dataset_from_the_download_base(tmp_path, monkeypatch, technique, name):
    _archive(tmp_path / "mirror", technique, name)
    monkeypatch.setenv("IMG2IMG_DOWNLOAD_BASE", (tmp_path / "mirror").as_uri())  # a local copy: no network
    folder = GetData(technique, verbose=False).get(tmp_path / "datasets", name)
    assert folder == (tmp_path / "datasets" / "tiny").resolve() and (folder / "trainA" / "x.png").is_file()
    assert sorted(path.name for path in (tmp_path / "datasets").iterdir()) == ["tiny"]  # no archive left


def test_get_data_says_in_one_paragraph_what_to_do_when_it_cannot_download(tmp_path, monkeypatch):
    monkeypatch.setenv("IMG2IMG_DOWNLOAD_BASE", (tmp_path / "nowhere").as_uri())
    with pytest.raises(UserError, match="could not download .*/cyclegan/datasets/horse2zebra.zip") as caught:
        GetData().get(tmp_path / "datasets", "horse2zebra.zip")
    assert "offline" in str(caught.value) and "IMG2IMG_DOWNLOAD_BASE" in str(caught.value)
    assert "\n" not in str(caught.value)
    assert list((tmp_path / "datasets").iterdir()) == []  # nothing half-downloaded left behind
