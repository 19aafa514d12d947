"""Metrics (util/metrics.py, util/fid.py): PSNR/SSIM/L1 against independent computations, FID/KID
against the direct formulas on the same features, the Inception plumbing without downloads, and
the two entry points: scripts/evaluate.py and test.py --eval_metrics."""
from __future__ import annotations

import importlib.util
import json
import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import scipy.ndimage
import torch
from PIL import Image
from skimage.metrics import peak_signal_noise_ratio, structural_similarity

from conftest import ROOT, run_script
from models import networks
from util import fid
from util.errors import UserError
from util.fid_inception import FID_WEIGHTS_NAME, InceptionFeatures
from util.metrics import MetricAverager, l1_uint8, psnr, psnr_uint8, ssim, ssim_uint8, to_uint8


def rgb(seed: int, size=(48, 40)) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (*size, 3), dtype=np.uint8)


def ssim_by_hand(a: np.ndarray, b: np.ndarray) -> float:
    """Wang et al.'s SSIM written out: Gaussian sigma 1.5 (radius 5), population statistics,
    C1 = (0.01 L)^2, C2 = (0.03 L)^2, mean over the pixels whose window lies inside the image."""
    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    values = []
    for ch in range(a.shape[2]):
        x, y = a[..., ch].astype(np.float64), b[..., ch].astype(np.float64)
        blur = lambda im: scipy.ndimage.gaussian_filter(im, 1.5, truncate=3.5)  # noqa: E731
        mx, my = blur(x), blur(y)
        vx, vy, cxy = blur(x * x) - mx * mx, blur(y * y) - my * my, blur(x * y) - mx * my
        s = ((2 * mx * my + c1) * (2 * cxy + c2)) / ((mx ** 2 + my ** 2 + c1) * (vx + vy + c2))
        values.append(s[5:-5, 5:-5].mean())
    return float(np.mean(values))


# ---------------------------------------------------------------------------- PSNR, SSIM, L1
def test_identical_images_have_infinite_psnr_ssim_one_and_zero_l1():
    a = rgb(0)
    assert psnr_uint8(a, a) == math.inf
    assert ssim_uint8(a, a) == pytest.approx(1.0)
    assert l1_uint8(a, a) == 0.0
    t = torch.rand(1, 3, 16, 16) * 2 - 1
    assert psnr(t, t) == math.inf and ssim(t, t) == pytest.approx(1.0)


def test_psnr_of_a_known_perturbation_matches_the_formula_and_scikit_image():
    a = np.full((32, 32, 3), 100, np.uint8)
    b = a + 10  # MSE 100
    assert psnr_uint8(a, b) == pytest.approx(10 * math.log10(255 ** 2 / 100))
    noisy = np.clip(rgb(1).astype(int) + np.random.default_rng(2).integers(-20, 21, (48, 40, 3)), 0, 255).astype(np.uint8)
    assert psnr_uint8(rgb(1), noisy) == pytest.approx(peak_signal_noise_ratio(rgb(1), noisy, data_range=255), rel=1e-12)


@pytest.mark.parametrize("sigma", [5, 30])
def test_ssim_of_a_known_perturbation_matches_the_formula_and_scikit_image(sigma):
    a = (scipy.ndimage.gaussian_filter(rgb(3).astype(float), (2, 2, 0))).astype(np.uint8)  # image-like, not noise
    b = np.clip(a + np.random.default_rng(4).normal(0, sigma, a.shape), 0, 255).astype(np.uint8)
    ours = ssim_uint8(a, b)
    assert ours == pytest.approx(ssim_by_hand(a, b), abs=1e-9)
    assert ours == pytest.approx(structural_similarity(a, b, data_range=255, channel_axis=2, gaussian_weights=True,
                                                       sigma=1.5, use_sample_covariance=False), abs=1e-12)
    assert 0 < ours < 1


def test_tensor_metrics_measure_the_saved_8_bit_images():
    out, target = torch.rand(2, 3, 20, 24) * 2 - 1, torch.rand(2, 3, 20, 24) * 2 - 1
    out8, target8 = to_uint8(out), to_uint8(target)
    assert out8.shape == (2, 20, 24, 3) and to_uint8(out[0]).shape == (20, 24, 3)
    assert psnr(out[:1], target[:1]) == psnr_uint8(out8[0], target8[0])
    assert psnr(out, target) == psnr_uint8(out8, target8)  # a batch is one signal, as before
    assert ssim(out, target) == pytest.approx(np.mean([ssim_uint8(o, t) for o, t in zip(out8, target8)]))
    assert to_uint8(torch.full((3, 2, 2), -1.0)).max() == 0 and to_uint8(torch.ones(3, 2, 2)).min() == 255


def test_ssim_of_images_smaller_than_its_window_is_nan():
    assert math.isnan(ssim_uint8(rgb(0, (8, 30)), rgb(1, (8, 30))))


def test_metric_averager_keeps_reference_keys_and_adds_ssim_when_asked():
    a, b = torch.zeros(1, 3, 16, 16), torch.full((1, 3, 16, 16), 0.5)
    plain, full = MetricAverager(), MetricAverager(with_ssim=True)
    for avg in (plain, full):
        avg.add_pair("output", a, b)
        avg.add_pair("identity", a, a)
        avg.count = 1
    assert set(plain.means()) == {"output_L1", "output_PSNR", "identity_L1", "identity_PSNR"}
    assert full.means()["identity_SSIM"] == pytest.approx(1.0) and full.means()["identity_PSNR"] == 100.0
    assert full.means()["output_L1"] == pytest.approx(0.5)


# ---------------------------------------------------------------------------- FID, KID
def fid_direct(f1: np.ndarray, f2: np.ndarray) -> float:
    """The FID formula computed another way: Tr((S1 S2)^1/2) as the sum of the square roots of the
    eigenvalues of S1 S2 (real and non-negative: it is similar to S1^1/2 S2 S1^1/2)."""
    m1, m2 = f1.mean(0), f2.mean(0)
    s1, s2 = np.cov(f1, rowvar=False), np.cov(f2, rowvar=False)
    eig = np.linalg.eigvals(s1 @ s2).real.clip(min=0)
    return float(((m1 - m2) ** 2).sum() + np.trace(s1) + np.trace(s2) - 2 * np.sqrt(eig).sum())


def kid_direct(x: np.ndarray, y: np.ndarray) -> float:
    """Unbiased MMD^2 with the cubic polynomial kernel, written as explicit sums."""
    d, m, n = x.shape[1], len(x), len(y)
    k = lambda a, b: (a @ b / d + 1) ** 3  # noqa: E731
    xx = sum(k(x[i], x[j]) for i in range(m) for j in range(m) if i != j) / (m * (m - 1))
    yy = sum(k(y[i], y[j]) for i in range(n) for j in range(n) if i != j) / (n * (n - 1))
    xy = sum(k(x[i], y[j]) for i in range(m) for j in range(n)) / (m * n)
    return float(xx + yy - 2 * xy)


@pytest.fixture(scope="module")
def image_sets(tmp_path_factory):
    """Two folders of 40 small images each, with different colour statistics."""
    root = tmp_path_factory.mktemp("fid_images")
    rng = np.random.default_rng(0)
    for name, shift in (("a", 0), ("b", 60)):
        (root / name).mkdir()
        for i in range(40):
            base = scipy.ndimage.gaussian_filter(rng.integers(0, 196, (40, 48, 3)).astype(float), (3, 3, 0))
            Image.fromarray(np.clip(base + shift * np.array([1, 0, -0.5]), 0, 255).astype(np.uint8)).save(
                root / name / f"{i:03d}.png")
    return root


def test_fid_of_a_set_with_itself_is_zero(image_sets):
    extractor = fid.RandomCNNFeatures()
    feats = fid.extract_features(fid.list_images(str(image_sets / "a")), extractor)
    value = fid.fid_from_features(feats, feats)
    assert abs(value) < 1e-6 * np.trace(np.cov(feats, rowvar=False))


def test_fid_and_kid_of_image_folders_agree_with_the_direct_formulas_on_the_same_features(image_sets):
    extractor = fid.RandomCNNFeatures()
    paths_a, paths_b = fid.list_images(str(image_sets / "a")), fid.list_images(str(image_sets / "b"))
    result = fid.fid_kid(paths_a, paths_b, extractor, batch_size=16)
    fa, fb = fid.extract_features(paths_a, extractor), fid.extract_features(paths_b, extractor)
    assert fa.shape == (40, extractor.dim)
    assert result["FID"] > 1.0  # the sets do differ
    assert result["FID"] == pytest.approx(fid_direct(fa, fb), rel=1e-4)
    # With 40 images per set every subset is the whole set, so KID is the full-set MMD.
    assert result["KID_mean"] == pytest.approx(kid_direct(fa, fb), rel=1e-4)
    sub = fid.kid_from_features(fa, fb, subsets=10, subset_size=20, seed=3)
    assert sub == fid.kid_from_features(fa, fb, subsets=10, subset_size=20, seed=3)  # seeded: repeatable


def test_random_cnn_features_do_not_depend_on_the_global_seed():
    images = torch.rand(3, 3, 30, 30)
    torch.manual_seed(1)
    first = fid.RandomCNNFeatures()(images)
    torch.manual_seed(2)
    assert torch.equal(first, fid.RandomCNNFeatures()(images))


def test_missing_inception_weights_raise_a_user_error_saying_where_to_put_them(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.delenv(fid.WEIGHTS_ENV, raising=False)
    with pytest.raises(UserError) as err:
        fid.make_extractor("inception")
    message = str(err.value)
    assert FID_WEIGHTS_NAME in message and str(tmp_path / "torch" / "hub" / "checkpoints") in message
    assert "--inception_weights" in message and fid.WEIGHTS_ENV in message
    with pytest.raises(UserError, match="nowhere.pth"):
        fid.make_extractor("inception", str(tmp_path / "nowhere.pth"))


def test_fid_inception_has_torchvisions_parameter_names_with_1008_classes():
    ours = InceptionFeatures(fid_variant=True).net.state_dict()
    import torchvision
    theirs = torchvision.models.inception_v3(weights=None, aux_logits=False, num_classes=1008, init_weights=False).state_dict()
    assert {k: v.shape for k, v in ours.items()} == {k: v.shape for k, v in theirs.items()}


@pytest.mark.slow
def test_inception_weights_from_a_local_file_give_2048_features(tmp_path, monkeypatch, image_sets):
    torch.manual_seed(0)
    weights = tmp_path / FID_WEIGHTS_NAME
    torch.save(InceptionFeatures(fid_variant=True).net.state_dict(), weights)
    monkeypatch.setenv(fid.WEIGHTS_ENV, str(weights))
    extractor = fid.make_extractor("inception")
    assert extractor.name == "inception-v3-fid"
    feats = fid.extract_features(fid.list_images(str(image_sets / "a"))[:2], extractor)
    assert feats.shape == (2, 2048) and np.isfinite(feats).all()
    torch.save({"not": torch.zeros(1)}, tmp_path / "other.pth")
    with pytest.raises(UserError, match="other.pth is not a file of Inception-v3 weights"):
        fid.make_extractor("inception", str(tmp_path / "other.pth"))


# ---------------------------------------------------------------------------- scripts/evaluate.py
def evaluate_main(*argv: str) -> int:
    """scripts/evaluate.py's main(), run in this process (it is also run as a script above)."""
    spec = importlib.util.spec_from_file_location("evaluate_script", ROOT / "scripts" / "evaluate.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script.main(list(argv))


def test_evaluate_py_scores_folders_as_the_library_does(image_sets, tmp_path):
    out = tmp_path / "scores.json"
    result = run_script("scripts/evaluate.py", str(image_sets / "a"), "--targets", str(image_sets / "b"),
                        "--reference", str(image_sets / "b"), "--fid_features", "random_cnn", "--json", str(out))
    assert result.returncode == 0, result.stderr
    scores = json.loads(out.read_text())
    a = [np.asarray(Image.open(p)) for p in fid.list_images(str(image_sets / "a"))]
    b = [np.asarray(Image.open(p)) for p in fid.list_images(str(image_sets / "b"))]
    assert scores["PSNR"] == pytest.approx(np.mean([psnr_uint8(x, y) for x, y in zip(a, b)]))
    assert scores["SSIM"] == pytest.approx(np.mean([ssim_uint8(x, y) for x, y in zip(a, b)]))
    extractor = fid.RandomCNNFeatures()
    expected = fid.fid_kid(fid.list_images(str(image_sets / "a")), fid.list_images(str(image_sets / "b")), extractor)
    assert scores["FID"] == pytest.approx(expected["FID"]) and scores["KID_mean"] == pytest.approx(expected["KID_mean"])


def test_evaluate_py_names_outputs_without_a_target_or_of_another_size(image_sets, tmp_path, capsys):
    targets = tmp_path / "targets"
    targets.mkdir()
    Image.fromarray(rgb(0)).save(targets / "000.png")
    assert evaluate_main(str(image_sets / "a"), "--targets", str(targets)) == 2
    err = capsys.readouterr().err
    assert "001.png" in err and str(targets) in err
    single = tmp_path / "single"
    single.mkdir()
    Image.open(image_sets / "a" / "000.png").save(single / "000.png")
    assert evaluate_main(str(single), "--targets", str(targets)) == 2
    err = capsys.readouterr().err
    assert "48x40" in err and "paired metrics need images of the same size" in err
    assert evaluate_main(str(single)) == 2
    assert "nothing to compute" in capsys.readouterr().err


# ---------------------------------------------------------------------------- test.py --eval_metrics
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
def test_test_py_eval_metrics_adds_ssim_fid_and_kid_to_metrics_json_and_the_page(pix_checkpoint, paired_root, tmp_path):
    result = run_script("test.py", "--dataroot", str(paired_root), "--name", "p", *PIX, "--checkpoints_dir",
                        str(pix_checkpoint), "--results_dir", str(tmp_path), "--eval_metrics", "--fid_features", "random_cnn")
    assert result.returncode == 0, result.stderr[-3000:]
    run = tmp_path / "p" / "test_latest"
    metrics = json.loads((run / "metrics.json").read_text())
    for key in ("output_L1", "identity_L1", "output_PSNR", "output_SSIM", "identity_SSIM", "FID", "KID_mean", "KID_std"):
        assert key in metrics, key
    assert metrics["images"] == 4 and metrics["fid_generated_images"] == 4
    assert "FID" in (run / "index.html").read_text()
    # scripts/evaluate.py on the results folder gives the same numbers
    assert evaluate_main(str(run), "--targets", "real", "--reference", "real", "--fid_features", "random_cnn") == 0
    scores = json.loads((run / "evaluation.json").read_text())
    assert scores["output_label"] == "fake_B"
    assert scores["PSNR"] == pytest.approx(metrics["output_PSNR"]) and scores["SSIM"] == pytest.approx(metrics["output_SSIM"])
    assert scores["FID"] == pytest.approx(metrics["FID"])


@pytest.mark.slow
def test_test_py_eval_metrics_without_inception_weights(pix_checkpoint, paired_root, tmp_path):
    env = {"TORCH_HOME": str(tmp_path / "torch"), fid.WEIGHTS_ENV: ""}
    common = ["--dataroot", str(paired_root), "--name", "p", *PIX, "--checkpoints_dir", str(pix_checkpoint), "--eval_metrics"]
    with ThreadPoolExecutor(2) as pool:  # one core each
        skipped = pool.submit(run_script, "test.py", *common, "--results_dir", str(tmp_path / "a"), env=env)
        asked = pool.submit(run_script, "test.py", *common, "--results_dir", str(tmp_path / "b"), "--fid_reference",
                            str(paired_root / "test"), env=env)
        skipped, asked = skipped.result(), asked.result()
    assert skipped.returncode == 0, skipped.stderr[-3000:]
    metrics = json.loads((tmp_path / "a" / "p" / "test_latest" / "metrics.json").read_text())
    assert "FID" not in metrics and "Inception weights" in metrics["fid_skipped"] and "output_SSIM" in metrics
    assert asked.returncode == 2 and FID_WEIGHTS_NAME in asked.stderr and "Traceback" not in asked.stderr
