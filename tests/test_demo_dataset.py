"""Tests for scripts/make_demo_dataset.py: layout, determinism, and learnability signals."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "make_demo_dataset.py"
_spec = importlib.util.spec_from_file_location("make_demo_dataset", SCRIPT)
demo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(demo)

S = 64


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Default-size datasets, generated once for the module."""
    out = tmp_path_factory.mktemp("demo")
    return (demo.make_pix2pix_demo(out, S, 0, 200, 20, 20),
            demo.make_cyclegan_demo(out, S, 0, 100, 10))


def _load(path: Path) -> np.ndarray:
    return np.asarray(Image.open(path).convert("RGB"), dtype=np.float32)


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def test_layout_and_counts(datasets: tuple[Path, Path]) -> None:
    p2p, cg = datasets
    assert p2p.name == "demo_pix2pix" and cg.name == "demo_cyclegan"
    for split, n in {"train": 200, "val": 20, "test": 20}.items():
        assert len(list((p2p / split).glob("*.png"))) == n
    for split, n in {"trainA": 100, "trainB": 100, "testA": 10, "testB": 10}.items():
        assert len(list((cg / split).glob("*.png"))) == n
    # No leftover temporary folders next to the datasets.
    assert sorted(p.name for p in p2p.parent.iterdir()) == ["demo_cyclegan", "demo_pix2pix"]


def test_image_shapes(datasets: tuple[Path, Path]) -> None:
    p2p, cg = datasets
    for path in list((p2p / "train").glob("*.png"))[:10]:
        with Image.open(path) as im:
            assert im.mode == "RGB" and im.size == (2 * S, S)
    for path in list((cg / "trainB").glob("*.png"))[:10]:
        with Image.open(path) as im:
            assert im.mode == "RGB" and im.size == (S, S)


def test_deterministic(datasets: tuple[Path, Path], tmp_path: Path) -> None:
    p2p, cg = datasets
    assert _files(demo.make_pix2pix_demo(tmp_path, S, 0, 200, 20, 20)) == _files(p2p)
    assert _files(demo.make_cyclegan_demo(tmp_path, S, 0, 100, 10)) == _files(cg)
    other = demo.make_pix2pix_demo(tmp_path / "seed1", S, 1, 200, 20, 20)
    assert _files(other) != _files(p2p)


def test_identity_baseline_is_poor(datasets: tuple[Path, Path]) -> None:
    """Copying A to B must score badly, so a trained model visibly beats it."""
    p2p, _ = datasets
    l1 = [np.abs(img[:, :S] - img[:, S:]).mean() / 127.5
          for img in map(_load, sorted((p2p / "test").glob("*.png")))]
    assert np.mean(l1) > 0.3


def test_photo_is_function_of_labels(datasets: tuple[Path, Path]) -> None:
    """B is recomputed exactly from A's label colours: nothing unpredictable is added."""
    p2p, _ = datasets
    for path in sorted((p2p / "val").glob("*.png")):
        img = _load(path).astype(np.uint8)
        dist = np.abs(img[:, :S, None, :].astype(int) - demo.LABEL_COLORS[None, None]).sum(-1)
        labels = dist.argmin(-1)
        assert (dist.min(-1) == 0).all()  # A is a pure label map
        np.testing.assert_array_equal(demo.render_photo(labels), img[:, S:])


def _edge_energy(img: np.ndarray) -> float:
    gray = img.mean(-1)
    return float(np.abs(np.diff(gray, axis=0)).mean() + np.abs(np.diff(gray, axis=1)).mean())


def test_unpaired_domains_differ_by_stripes(datasets: tuple[Path, Path]) -> None:
    _, cg = datasets
    a = np.mean([_edge_energy(_load(p)) for p in sorted((cg / "trainA").glob("*.png"))])
    b = np.mean([_edge_energy(_load(p)) for p in sorted((cg / "trainB").glob("*.png"))])
    # solid shapes have edges at their outlines only; stripes every S/5 px add about 2 per period: 2.6x here
    assert b > 2 * a


def test_total_size_small(datasets: tuple[Path, Path]) -> None:
    total = sum(p.stat().st_size for d in datasets for p in d.rglob("*") if p.is_file())
    assert total < 5 * 1024 * 1024


def test_reuse_and_regenerate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = demo.make_pix2pix_demo(tmp_path, 32, 0, 4, 2, 2)
    marker = target / "train" / "0000.png"
    mtime = marker.stat().st_mtime_ns
    demo.make_pix2pix_demo(tmp_path, 32, 0, 4, 2, 2)
    assert "reusing" in capsys.readouterr().out
    assert marker.stat().st_mtime_ns == mtime
    # An incomplete folder is rebuilt, and so is one made with other parameters.
    marker.unlink()
    demo.make_pix2pix_demo(tmp_path, 32, 0, 4, 2, 2)
    assert marker.exists() and "wrote" in capsys.readouterr().out
    demo.make_pix2pix_demo(tmp_path, 48, 0, 4, 2, 2)
    with Image.open(marker) as im:
        assert im.size == (96, 48)


def test_cli(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path), "--size", "32",
                          "--n_train", "6", "--n_test", "4", "--task", "both"],
                         capture_output=True, text=True, check=True)
    assert str(tmp_path / "demo_pix2pix") in run.stdout
    assert len(list((tmp_path / "demo_pix2pix" / "val").glob("*.png"))) == 4
    assert len(list((tmp_path / "demo_cyclegan" / "trainB").glob("*.png"))) == 3


def test_the_scenes_demo_is_unpaired_in_training_and_paired_where_it_is_scored(tmp_path: Path) -> None:
    scenes = demo.make_scenes_demo(tmp_path, 32, 0, 6, 4)
    counts = {split: len(list((scenes / split).glob("*.png")))
              for split in ("trainA", "trainB", "testA", "testB", "test")}
    assert counts == {"trainA": 6, "trainB": 6, "testA": 4, "testB": 4, "test": 4}
    label_colors = {tuple(c) for c in demo.LABEL_COLORS.astype(np.uint8)}
    for i in range(4):  # each held-out pair: its label map and the render of that same scene
        pair = np.asarray(Image.open(scenes / "test" / f"{i:04d}.png"))
        assert np.array_equal(pair[:, :32], np.asarray(Image.open(scenes / "testA" / f"{i:04d}.png")))
        assert np.array_equal(pair[:, 32:], np.asarray(Image.open(scenes / "testB" / f"{i:04d}.png")))
        labels = np.argmin([np.abs(pair[:, :32].astype(int) - c).sum(-1) for c in demo.LABEL_COLORS], 0)
        assert np.array_equal(pair[:, 32:], demo.render_photo(labels))
    for i in range(6):  # training: label maps (A) and renders (B) of other scenes
        label_map = np.asarray(Image.open(scenes / "trainA" / f"{i:04d}.png"))
        assert {tuple(c) for c in label_map.reshape(-1, 3)} <= label_colors
        labels = np.argmin([np.abs(label_map.astype(int) - c).sum(-1) for c in demo.LABEL_COLORS], 0)
        assert not np.array_equal(np.asarray(Image.open(scenes / "trainB" / f"{i:04d}.png")), demo.render_photo(labels))
    assert _files(demo.make_scenes_demo(tmp_path / "again", 32, 0, 6, 4)) == _files(scenes)  # byte-identical
