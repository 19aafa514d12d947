"""Dataset tools: combine_A_and_B.py, make_dataset_aligned.py and split_dataset.py produce layouts
that train.py trains on, and name the files when inputs do not match; the download scripts fetch
and verify archives from a local HTTP server and fail clearly when offline."""
from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import FAST_FLAGS, ROOT, free_port, run_in_process, run_script

TRAIN_SMALL = [*FAST_FLAGS, "--load_size", "32", "--crop_size", "32", "--n_epochs", "1", "--n_epochs_decay", "0",
               "--max_dataset_size", "4", "--netG", "resnet_6blocks"]


def ok(result) -> None:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"


def user_error(result, *names: str) -> str:
    assert result.returncode == 2, f"exit {result.returncode}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    assert "Traceback" not in result.stderr
    for name in names:
        assert str(name) in result.stderr, (name, result.stderr)
    return result.stderr


class Run:
    """What a script's main() did, in the shape of subprocess.CompletedProcess."""

    def __init__(self, returncode: int, stdout: str, stderr: str):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def tool(capsys, script: str, *args: str) -> Run:
    """Run scripts/<script>'s main(args) in this process (quicker than a new Python for each call;
    the layout test above runs the scripts as programs)."""
    spec = importlib.util.spec_from_file_location(f"tool_{Path(script).stem}", ROOT / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    capsys.readouterr()
    code = module.main(list(args))
    out, err = capsys.readouterr()
    return Run(code, out, err)


def solid(path: Path, color, size=(32, 32)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, tuple(color)).save(path)


def color_of(i: int, domain: str) -> tuple[int, int, int]:
    return (10 * i, 200, 0) if domain == "A" else (0, 10 * i, 200)


def paired_folders(root: Path, splits: dict[str, int]) -> tuple[Path, Path]:
    """root/A/<split>/NNNN.png and root/B/<split>/NNNN.png with matching names."""
    for split, count in splits.items():
        for i in range(count):
            solid(root / "A" / split / f"{i:04d}.png", color_of(i, "A"))
            solid(root / "B" / split / f"{i:04d}.png", color_of(i, "B"))
    return root / "A", root / "B"


def train(capsys: pytest.CaptureFixture, root: Path, model: str, ckpt: Path) -> subprocess.CompletedProcess:
    """train.py on a tool's output, by its main() in this process: the point is that it trains on the
    layout, which needs no interpreter of its own."""
    return run_in_process("train.py", "--dataroot", str(root), "--name", "t", "--model", model, *TRAIN_SMALL,
                          "--checkpoints_dir", str(ckpt), capsys=capsys)


# ---------------------------------------------------------------------------- the tools' layouts train
@pytest.mark.slow
def test_each_tools_output_trains_for_an_epoch(tmp_path, capsys):
    """The tools run as programs, from the reference's paths where it has them (datasets/); train.py
    runs in this process on what they wrote."""
    # combine_A_and_B: A/{train,test} + B/{train,test} -> AB/{train,test} (12 pairs: the process pool)
    fold_A, fold_B = paired_folders(tmp_path / "c", {"train": 12, "test": 2})
    ok(run_script("datasets/combine_A_and_B.py", "--fold_A", str(fold_A), "--fold_B", str(fold_B),
                  "--fold_AB", str(tmp_path / "c" / "AB")))
    ab = np.asarray(Image.open(tmp_path / "c" / "AB" / "train" / "0003.png"))
    assert ab.shape == (32, 64, 3)
    assert tuple(ab[0, 0]) == color_of(3, "A") and tuple(ab[0, 40]) == color_of(3, "B")
    # split_dataset: one folder per domain -> {train,val,test}{A,B}, the same split for the same names
    for i in range(10):
        solid(tmp_path / "pool" / "A" / f"{i:02d}.png", color_of(i, "A"))
        solid(tmp_path / "pool" / "B" / f"{i:02d}.png", color_of(i, "B"))
    data = tmp_path / "s"
    for domain in "AB":
        ok(run_script("scripts/split_dataset.py", "--source", str(tmp_path / "pool" / domain), "--dest", str(data),
                      "--domain", domain, "--ratios", "0.6,0.2,0.2", "--seed", "3"))
    for split, count in (("train", 6), ("val", 2), ("test", 2)):
        names_A = sorted(p.name for p in (data / f"{split}A").iterdir())
        assert len(names_A) == count and names_A == sorted(p.name for p in (data / f"{split}B").iterdir())
    # make_dataset_aligned: {train,val,test}{A,B} -> {train,val,test} in the same folder
    ok(run_script("datasets/make_dataset_aligned.py", "--dataset-path", str(data)))
    name = sorted(os.listdir(data / "train"))[0]
    aligned = np.asarray(Image.open(data / "train" / name))
    i = int(Path(name).stem)
    assert aligned.shape == (32, 64, 3) and tuple(aligned[5, 5]) == color_of(i, "A") \
        and tuple(aligned[5, 37]) == color_of(i, "B")

    ok(train(capsys, tmp_path / "c" / "AB", "pix2pix", tmp_path / "ck1"))  # combined A|B
    ok(train(capsys, data, "cycle_gan", tmp_path / "ck2"))                 # split trainA/trainB
    ok(train(capsys, data, "pix2pix", tmp_path / "ck3"))                   # aligned train/
    for ckpt, net in (("ck1", "G"), ("ck2", "G_A"), ("ck3", "G")):
        assert (tmp_path / ckpt / "t" / f"latest_net_{net}.pth").is_file()


def test_combine_use_AB_pairs_name_A_with_name_B(tmp_path, capsys):
    for i in range(3):
        solid(tmp_path / "in" / "train" / f"{i}_A.jpg", color_of(i, "A"))
        solid(tmp_path / "in" / "train" / f"{i}_B.jpg", color_of(i, "B"))
    ok(tool(capsys, "scripts/combine_A_and_B.py", "--fold_A", str(tmp_path / "in"), "--fold_B", str(tmp_path / "in"),
            "--fold_AB", str(tmp_path / "out"), "--use_AB", "--no_multiprocessing"))
    assert sorted(os.listdir(tmp_path / "out" / "train")) == ["0.jpg", "1.jpg", "2.jpg"]


# ---------------------------------------------------------------------------- mismatched inputs
def test_combine_names_images_without_a_partner_and_writes_nothing(tmp_path, capsys):
    fold_A, fold_B = paired_folders(tmp_path, {"train": 3})
    os.remove(fold_B / "train" / "0001.png")
    solid(fold_B / "train" / "extra.png", (1, 2, 3))
    result = tool(capsys, "scripts/combine_A_and_B.py", "--fold_A", str(fold_A), "--fold_B", str(fold_B),
                  "--fold_AB", str(tmp_path / "AB"))
    user_error(result, fold_A / "train" / "0001.png", fold_B / "train" / "extra.png", "--skip_unmatched")
    assert not (tmp_path / "AB").exists()
    ok(tool(capsys, "scripts/combine_A_and_B.py", "--fold_A", str(fold_A), "--fold_B", str(fold_B),
            "--fold_AB", str(tmp_path / "AB"), "--skip_unmatched"))
    assert sorted(os.listdir(tmp_path / "AB" / "train")) == ["0000.png", "0002.png"]


def test_combine_names_both_files_of_a_pair_of_different_sizes(tmp_path, capsys):
    fold_A, fold_B = paired_folders(tmp_path, {"train": 2})
    solid(fold_B / "train" / "0001.png", (0, 0, 0), size=(40, 32))
    result = tool(capsys, "scripts/combine_A_and_B.py", "--fold_A", str(fold_A), "--fold_B", str(fold_B),
                        "--fold_AB", str(tmp_path / "AB"))
    user_error(result, fold_A / "train" / "0001.png", fold_B / "train" / "0001.png", "32x32", "40x32")
    assert not (tmp_path / "AB").exists()


@pytest.mark.parametrize("flags, named", [
    (["--fold_AB", "{file}/AB"], ("--fold_AB", "{file} is a file")),
    (["--fold_AB", "{tmp}/AB", "--num_imgs", "0"], ("--num_imgs", ">= 1")),
], ids=["output under a file", "no images"])
def test_combine_refuses_its_flags_and_output_before_reading_an_image(tmp_path, capsys, flags, named):
    fold_A, fold_B = paired_folders(tmp_path, {"train": 2})
    (tmp_path / "notes.txt").write_text("a file where a folder is expected")
    fill = {"file": str(tmp_path / "notes.txt"), "tmp": str(tmp_path)}
    with pytest.raises(SystemExit) as stopped:
        tool(capsys, "scripts/combine_A_and_B.py", "--fold_A", str(fold_A), "--fold_B", str(fold_B),
             *(flag.format(**fill) for flag in flags))
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and len(err.strip().splitlines()) == 1 and err.startswith("error: argument ")
    for text in named:
        assert text.format(**fill) in err, err
    assert not (tmp_path / "AB").exists()


def test_make_dataset_aligned_names_unmatched_files_and_pairs_by_order_on_request(tmp_path, capsys):
    for i in range(2):
        solid(tmp_path / "trainA" / f"a{i}.png", color_of(i, "A"))
        solid(tmp_path / "trainB" / f"b{i}.png", color_of(i, "B"))
    result = tool(capsys, "scripts/make_dataset_aligned.py", "--dataset-path", str(tmp_path))
    user_error(result, tmp_path / "trainA" / "a0.png", tmp_path / "trainB" / "b0.png", "--pair_by order")
    assert not (tmp_path / "train").exists()
    ok(tool(capsys, "scripts/make_dataset_aligned.py", "--dataset-path", str(tmp_path), "--pair_by", "order"))
    assert sorted(os.listdir(tmp_path / "train")) == ["a0.png", "a1.png"]


def test_split_is_reproducible_and_refuses_to_mix_into_a_filled_folder(tmp_path, capsys):
    for i in range(7):
        solid(tmp_path / "src" / f"{i}.png", (i, i, i), size=(4, 4))
    args = ["scripts/split_dataset.py", "--source", str(tmp_path / "src"), "--ratios", "0.5,0.25,0.25", "--seed", "1"]
    ok(tool(capsys, *args, "--dest", str(tmp_path / "one")))
    ok(tool(capsys, *args, "--dest", str(tmp_path / "two")))
    for split in ("train", "val", "test"):
        assert sorted(os.listdir(tmp_path / "one" / split)) == sorted(os.listdir(tmp_path / "two" / split))
    assert [len(os.listdir(tmp_path / "one" / s)) for s in ("train", "val", "test")] == [3, 2, 2]
    user_error(tool(capsys, *args, "--dest", str(tmp_path / "one")), tmp_path / "one" / "train")
    user_error(tool(capsys, *args[:-4], "--ratios", "0.5,0.4", "--dest", str(tmp_path / "x")), "--ratios 0.5,0.4")


# ---------------------------------------------------------------------------- download scripts
@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """python -m http.server on 127.0.0.1 serving tiny archives in the reference's URL layout."""
    root = tmp_path_factory.mktemp("mirror")
    src = tmp_path_factory.mktemp("src")
    for domain in ("trainA", "trainB", "testA", "testB"):
        solid(src / "mini" / domain / "0.png", (1, 2, 3), size=(8, 8))
    (root / "cyclegan" / "datasets").mkdir(parents=True)
    with zipfile.ZipFile(root / "cyclegan" / "datasets" / "mini.zip", "w") as z:
        for path in sorted((src / "mini").rglob("*")):
            z.write(path, path.relative_to(src))
    with zipfile.ZipFile(root / "cyclegan" / "datasets" / "maps.zip", "w") as z:  # wrong top-level folder
        z.writestr("other/trainA/0.png", b"x")
    (root / "cyclegan" / "datasets" / "facades.zip").write_bytes(b"PK\x03\x04 truncated")  # damaged
    (root / "pix2pix" / "datasets").mkdir(parents=True)
    solid(src / "facades" / "train" / "0.png", (4, 5, 6), size=(16, 8))
    subprocess.run(["tar", "-czf", str(root / "pix2pix" / "datasets" / "facades.tar.gz"), "-C", str(src), "facades"],
                   check=True)
    for kind, name in (("cyclegan/pretrained_models", "horse2zebra"),
                       ("pix2pix/models-pytorch", "facades_label2photo")):
        (root / kind).mkdir(parents=True)
        torch.save({"w": torch.zeros(2)}, root / kind / f"{name}.pth")
    (root / "cyclegan" / "pretrained_models" / "zebra2horse.pth").write_text("<html>not found</html>")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory",
                             str(root)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def download(script: str, name: str, base: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "IMG2IMG_DOWNLOAD_BASE": base, "IMG2IMG_DOWNLOAD_TIMEOUT": "5"}
    return subprocess.run(["bash", str(ROOT / script), name], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=60)


def test_download_scripts_fetch_verify_and_unpack_from_a_mirror(server, tmp_path):
    ok(download("scripts/download_cyclegan_dataset.sh", "mini", server, tmp_path))
    assert (tmp_path / "datasets" / "mini" / "trainA" / "0.png").is_file()
    assert not (tmp_path / "datasets" / "mini.zip").exists()
    ok(download("datasets/download_pix2pix_dataset.sh", "facades", server, tmp_path))  # the reference's path
    assert (tmp_path / "datasets" / "facades" / "train" / "0.png").is_file()
    ok(download("scripts/download_cyclegan_model.sh", "horse2zebra", server, tmp_path))
    ok(download("scripts/download_pix2pix_model.sh", "facades_label2photo", server, tmp_path))
    for name in ("horse2zebra", "facades_label2photo"):
        state = torch.load(tmp_path / "checkpoints" / f"{name}_pretrained" / "latest_net_G.pth", weights_only=True)
        assert torch.equal(state["w"], torch.zeros(2))


@pytest.mark.parametrize("script, name, says", [
    ("scripts/download_cyclegan_dataset.sh", "maps", "does not hold a single 'maps/' folder"),
    ("scripts/download_cyclegan_dataset.sh", "facades", "not an intact zip archive"),
    ("scripts/download_cyclegan_model.sh", "zebra2horse", "not a PyTorch checkpoint"),
])
def test_download_scripts_reject_and_delete_files_that_fail_verification(server, tmp_path, script, name, says):
    result = download(script, name, server, tmp_path)
    assert result.returncode == 1 and says in result.stderr
    assert "deleted" in result.stderr
    leftovers = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert leftovers == []


def test_download_scripts_explain_what_to_do_when_offline(tmp_path):
    closed = f"http://127.0.0.1:{free_port()}"
    result = download("scripts/download_pix2pix_dataset.sh", "maps", closed, tmp_path)
    assert result.returncode == 1
    for text in ("could not download", f"{closed}/pix2pix/datasets/maps.tar.gz", "offline",
                 "datasets/maps.tar.gz", "IMG2IMG_DOWNLOAD_BASE"):
        assert text in result.stderr, (text, result.stderr)
    assert not list(tmp_path.rglob("*.part"))


@pytest.mark.parametrize("script, names", [
    ("scripts/download_cyclegan_dataset.sh", "apple2orange summer2winter_yosemite horse2zebra monet2photo "
     "cezanne2photo ukiyoe2photo vangogh2photo maps facades iphone2dslr_flower mini mini_pix2pix mini_colorization "
     "ae_photos"),
    ("scripts/download_pix2pix_dataset.sh", "night2day edges2handbags edges2shoes facades maps"),
    ("scripts/download_cyclegan_model.sh", "apple2orange orange2apple summer2winter_yosemite winter2summer_yosemite "
     "horse2zebra zebra2horse monet2photo style_monet style_cezanne style_ukiyoe style_vangogh sat2map map2sat "
     "cityscapes_photo2label cityscapes_label2photo facades_photo2label facades_label2photo iphone2dslr_flower"),
    ("scripts/download_pix2pix_model.sh", "edges2shoes sat2map map2sat facades_label2photo day2night"),
])
def test_download_scripts_accept_the_reference_names_and_list_them_for_others(tmp_path, script, names):
    closed = f"http://127.0.0.1:{free_port()}"
    for name in names.split():  # accepted: the script goes on to download (and fails offline)
        result = download(script, name, closed, tmp_path)
        assert "could not download" in result.stderr and f"/{name}." in result.stderr, (name, result.stderr)
    wrong = download(script, "no_such_name", closed, tmp_path)
    assert wrong.returncode == 1 and "'no_such_name' is not one of" in wrong.stderr
    assert all(name in wrong.stderr for name in names.split())


def cityscapes(root: Path, splits: dict[str, list[str]]) -> tuple[Path, Path]:
    """Cityscapes' layout: gtFine/<split>/<city>/<name>_gtFine_color.png and leftImg8bit/.../<name>_leftImg8bit.png,
    each label image red and each photo blue with its number in green."""
    for split, names in splits.items():
        for i, name in enumerate(names):
            city = name.split("_")[0]
            solid(root / "gtFine" / split / city / f"{name}_gtFine_color.png", (250, 10 * i, 0), (64, 32))
            solid(root / "leftImg8bit" / split / city / f"{name}_leftImg8bit.png", (0, 10 * i, 250), (64, 32))
    return root / "gtFine", root / "leftImg8bit"


def test_prepare_cityscapes_writes_the_references_layout_from_the_reference_path(tmp_path):
    gt, photos = cityscapes(tmp_path, {"train": ["aachen_000000_000019", "bochum_000000_000313"],
                                       "val": ["lindau_000000_000019"]})
    out = tmp_path / "cityscapes"
    ok(run_script("datasets/prepare_cityscapes_dataset.py", "--gtFine_dir", str(gt), "--leftImg8bit_dir", str(photos),
                  "--output_dir", str(out)))
    assert sorted(os.listdir(out)) == ["test", "testA", "testB", "train", "trainA", "trainB"]  # val becomes test
    assert sorted(os.listdir(out / "train")) == ["0.jpg", "1.jpg"] and sorted(os.listdir(out / "trainB")) == \
        ["0_B.jpg", "1_B.jpg"]
    pair = np.asarray(Image.open(out / "train" / "1.jpg")).astype(int)
    assert pair.shape == (256, 512, 3)
    assert np.abs(pair[128, 64] - (0, 10, 250)).max() <= 3 and np.abs(pair[128, 320] - (250, 10, 0)).max() <= 3
    assert np.abs(np.asarray(Image.open(out / "testA" / "0_A.jpg")).astype(int)[5, 5] - (0, 0, 250)).max() <= 3


def test_prepare_cityscapes_names_a_photo_without_labels_and_writes_nothing(tmp_path, capsys):
    gt, photos = cityscapes(tmp_path, {"train": ["aachen_000000_000019"], "val": ["lindau_000000_000019"]})
    solid(photos / "train" / "aachen" / "aachen_000001_000019_leftImg8bit.png", (0, 0, 0))
    result = tool(capsys, "scripts/prepare_cityscapes_dataset.py", "--gtFine_dir", str(gt), "--leftImg8bit_dir",
                  str(photos), "--output_dir", str(tmp_path / "out"))
    user_error(result, "aachen_000001_000019_leftImg8bit.png", "no partner")
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()
    missing = tool(capsys, "scripts/prepare_cityscapes_dataset.py", "--gtFine_dir", str(tmp_path / "nothing"),
                   "--leftImg8bit_dir", str(photos), "--output_dir", str(tmp_path / "out"))
    user_error(missing, "--gtFine_dir", "cityscapes-dataset.com")


def test_cityscapes_datasets_point_to_the_official_site(tmp_path):
    for script in ("scripts/download_cyclegan_dataset.sh", "scripts/download_pix2pix_dataset.sh"):
        result = download(script, "cityscapes", "http://127.0.0.1:9", tmp_path)
        assert result.returncode == 1 and "cityscapes-dataset.com" in result.stderr
