"""util.evaluation.metrics: L1/PSNR/SSIM against formulas written out here, FID/KID against torchmetrics' own
pipeline on torch-fidelity's Inception (deterministic random weights from conftest, nothing downloaded),
the key names and directions other code relies on, and the offline behaviour without weights."""
from __future__ import annotations

import json
import math
import socket
import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torchmetrics.utilities import dim_zero_cat

from conftest import demo_data, load_script, ranks, run_in_process
from models.colorization_model import ColorizationModel
from models.cycle_gan_model import CycleGANModel
from models.pix2pix_model import Pix2PixModel
from models.test_model import TestModel as ApplyOneGeneratorModel  # not named Test*: pytest would collect it
from util.errors import UserError
from util.evaluation import inception
from util.evaluation.fid_kid import InceptionFeatureDistances, frechet_distance
from util.evaluation.inception import INCEPTION_WEIGHTS_NAME, INCEPTION_WEIGHTS_URL, to_uint8
from util.evaluation.metrics import (
    ReferenceFeatures,
    TranslationMetrics,
    expected_keys,
    higher_is_better,
    needs_inception,
)
from util.util import tensor2im


def smooth_images(seed: int, count: int = 3, channels: int = 3, size=(24, 20)) -> torch.Tensor:
    """Image-like (smooth) random images in [-1, 1]."""
    generator = torch.Generator().manual_seed(seed)
    coarse = torch.rand(count, channels, size[0] // 4, size[1] // 4, generator=generator)
    return F.interpolate(coarse, size=size, mode="bilinear") * 2 - 1


def ssim_by_hand(x: torch.Tensor, y: torch.Tensor) -> float:
    """Wang et al.'s SSIM of two CxHxW images in [-1, 1], on the 0..255 scale of 8-bit images (L = 255):
    11x11 Gaussian window, sigma 1.5, population statistics, each channel separately; as torchmetrics
    computes it, every pixel has its window (the image is reflected 5 px beyond its border) and the mean
    is over all pixels and channels."""
    x, y = (x.double() + 1) * 127.5, (y.double() + 1) * 127.5
    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    g = torch.exp(-(torch.arange(11, dtype=torch.float64) - 5) ** 2 / (2 * 1.5 ** 2))
    window = torch.outer(g / g.sum(), g / g.sum()).expand(x.shape[0], 1, 11, 11)
    blur = lambda im: F.conv2d(F.pad(im[None], (5, 5, 5, 5), mode="reflect"), window, groups=x.shape[0])[0]  # noqa: E731
    mx, my = blur(x), blur(y)
    vx, vy, cxy = (blur(x * x) - mx ** 2).clamp(min=0), (blur(y * y) - my ** 2).clamp(min=0), blur(x * y) - mx * my
    return float((((2 * mx * my + c1) * (2 * cxy + c2)) / ((mx ** 2 + my ** 2 + c1) * (vx + vy + c2))).mean())


def score_pairs(outputs: torch.Tensor, targets: torch.Tensor, batches=(2, 1)) -> TranslationMetrics:
    metrics = TranslationMetrics({"": ("fake_B", "real_B")}, paired=True)
    start = 0
    for size in batches:
        metrics.update({"fake_B": outputs[start:start + size], "real_B": targets[start:start + size]})
        start += size
    return metrics


# ---------------------------------------------------------------------------- L1, PSNR, SSIM
@pytest.mark.parametrize("channels", [1, 3, 4])
def test_paired_metrics_are_means_over_images_of_each_images_l1_psnr_and_ssim(channels):
    targets = smooth_images(0, channels=channels)
    outputs = (targets + torch.tensor([0.05, 0.2, 0.5])[:, None, None, None]
               * smooth_images(1, channels=channels)).clamp(-1, 1)
    scores = score_pairs(outputs, targets).compute()
    mse = ((outputs.double() - targets.double()) ** 2).mean(dim=(1, 2, 3))
    per_image_psnr = 10 * torch.log10(4.0 / mse)  # data range 2: the [-1, 1] scale
    assert scores["L1"] == pytest.approx((outputs.double() - targets.double()).abs().mean().item(), abs=1e-12)
    # rel 1e-7: torchmetrics converts ln to log10 with a float32 constant (the same on every process)
    assert scores["PSNR"] == pytest.approx(per_image_psnr.mean().item(), rel=1e-7)
    assert scores["PSNR"] != pytest.approx(10 * math.log10(4.0 / mse.mean().item()), abs=1e-3)  # not the pooled MSE
    assert scores["SSIM"] == pytest.approx(np.mean([ssim_by_hand(o, t) for o, t in zip(outputs, targets)]), abs=1e-8)
    assert set(scores) == {"L1", "PSNR", "SSIM"}


def test_the_ssim_of_volumes_is_torchmetrics_ssim_computed_one_axis_at_a_time():
    from torchmetrics.functional.image import structural_similarity_index_measure

    from util.evaluation.ssim import ssim_map_3d
    generator = torch.Generator().manual_seed(0)
    output = torch.rand(2, 2, 12, 17, 14, generator=generator, dtype=torch.float64)
    target = (output + 0.2 * torch.randn(output.shape, generator=generator, dtype=torch.float64)).clamp(0, 1)
    _, dense = structural_similarity_index_measure(output, target, data_range=1.0, gaussian_kernel=True, sigma=1.5,
                                                    kernel_size=11, k1=0.01, k2=0.03, reduction="none",
                                                    return_full_image=True)
    separable = ssim_map_3d(output, target)
    assert separable.shape == dense.shape == output.shape
    # the same products summed in another order: float64 rounding of sums of 1331 terms, amplified by the
    # variances' subtraction (E[x^2] - E[x]^2 of values near 0.5, relative cancellation below 100)
    assert (separable - dense).abs().max() < 1e-10
    assert ssim_map_3d(target, target).sub(1).abs().max() < 1e-12


def stripes(size: int, period: int, phase: int, colour: float, dark: float) -> torch.Tensor:
    """1 x 3 x size x size: horizontal stripes, `dark` on rows whose (row + phase) % period < period / 2."""
    rows = (torch.arange(size) + phase) % period < period // 2
    as_float64 = dict(dtype=torch.float64)
    image = torch.where(rows[:, None], torch.tensor(dark, **as_float64), torch.tensor(colour, **as_float64))
    return image.expand(1, 3, size, size)


def test_texture_distances_see_whether_stripes_are_there_and_not_where_they_lie():
    from util.evaluation.texture import texture_distances
    true = stripes(32, 8, 0, colour=0.6, dark=-0.8)
    shifted = stripes(32, 8, 3, colour=0.6, dark=-0.8)  # the same stripes, 3 rows off
    assert (shifted - true).abs().mean() > 0.5  # pixel L1 punishes the shift (1.4 on 6 rows of 8)
    # a window of one period holds half light, half dark rows wherever it lies: the same mean and spread
    # (up to float64 rounding of the sums of 64 terms and of one square root)
    same = texture_distances(shifted, true, window=8)
    assert same["coarse_L1"].item() < 1e-12 and same["texture_L1"].item() < 1e-6
    # no stripes: each window's mean is the colour, not the midpoint 1.4 / 2 away; its spread 0, not 0.7
    solid = texture_distances(torch.full_like(true, 0.6), true, window=8)
    assert solid["coarse_L1"].item() == pytest.approx(0.7, abs=1e-12)
    assert solid["texture_L1"].item() == pytest.approx(0.7, abs=1e-6)
    # a flat image of the right mean colour passes the coarse look and fails the texture
    grey = texture_distances(torch.full_like(true, -0.1), true, window=8)
    assert grey["coarse_L1"].item() < 1e-12 and grey["texture_L1"].item() == pytest.approx(0.7, abs=1e-6)


def test_the_demo_report_scores_at_the_texture_window_and_an_untrained_model_fails_its_verdict(tmp_path, capsys):
    from models import create_model
    from options.base_options import save_options
    from options.train_options import TrainOptions
    from util.distributed import DistContext
    pairs = demo_data.make_cyclegan_pairs(tmp_path / "data", 32, 0, 3)
    flags = ["--model", "cut", "--CUT_mode", "FastCUT", "--ngf", "4", "--ndf", "4", "--netF_nc", "8",
             "--load_size", "32", "--crop_size", "32", "--name", "fastcut", "--checkpoints_dir", str(tmp_path)]
    opt = TrainOptions().parse(["--dataroot", "unused", "--display_id", "0", *flags])
    save_options(opt)
    create_model(opt, DistContext()).save_networks("latest")  # "trained": weights never trained
    scored = ["--dataroot", str(pairs), "--dataset_mode", "aligned", "--num_test", "3", "--results_dir",
              str(tmp_path / "results"), *flags]
    result = run_in_process("scripts/demo_report.py", "--texture_window", "7", *scored, capsys=capsys)
    assert result.returncode == 1 and "training did NOT beat the baselines (coarse_L1, texture_L1)" in result.stdout
    table = json.loads((tmp_path / "results" / "fastcut" / "test_latest" / "demo_report.json").read_text())
    for name in ("identity", "untrained", "trained"):
        assert set(table[name]) >= {"L1", "coarse_L1", "texture_L1"}
    # the input has no stripes: its texture_L1 is the striped targets' own spread, far from 0
    assert table["identity"]["texture_L1"] > 0.05 and table["identity"]["coarse_L1"] > 0
    too_wide = run_in_process("scripts/demo_report.py", "--texture_window", "40", *scored, capsys=capsys)
    assert too_wide.returncode == 2 and "--texture_window 40 is larger than the images scored (32x32 px)" in \
        too_wide.stderr and "Traceback" not in too_wide.stderr


def test_identical_images_score_zero_l1_ssim_one_and_infinite_psnr():
    images = smooth_images(2)
    scores = score_pairs(images, images.clone()).compute()
    assert scores["L1"] == 0.0 and scores["SSIM"] == pytest.approx(1.0) and scores["PSNR"] == math.inf


def test_images_under_the_ssim_window_get_l1_and_psnr_and_a_reason_for_no_ssim():
    metrics = score_pairs(smooth_images(3, size=(8, 32)), smooth_images(4, size=(8, 32)))
    assert set(metrics.compute()) == {"L1", "PSNR"} and "11 px" in metrics.skipped["SSIM"]


def test_outputs_and_targets_of_different_sizes_are_refused():
    metrics = TranslationMetrics({"": ("fake_B", "real_B")})
    with pytest.raises(UserError, match="same size"):
        metrics.update({"fake_B": smooth_images(0, size=(24, 20)), "real_B": smooth_images(0, size=(20, 24))})


# ---------------------------------------------------------------------------- names and directions
def test_metric_directions_for_choosing_the_best_checkpoint():
    assert [higher_is_better(k) for k in ("L1", "PSNR", "SSIM", "FID", "FID_B", "KID_A")] == \
        [False, True, True, False, False, False]
    for unknown in ("LPIPS", "KID_B_std", "loss_G"):
        with pytest.raises(UserError, match="PSNR \\(higher is better\\)"):
            higher_is_better(unknown)
    assert needs_inception("FID_B") and needs_inception("KID") and not needs_inception("PSNR")


def test_standard_pairs_and_their_keys_for_each_model():
    assert Pix2PixModel.scored_pairs(paired=True) == {"": ("fake_B", "real_B")}
    assert ColorizationModel.scored_pairs(paired=True) == {"": ("fake_B_rgb", "real_B_rgb")}
    assert ApplyOneGeneratorModel.scored_pairs(paired=False) == {"": ("fake", None)}
    cycle = CycleGANModel.scored_pairs(paired=False)
    assert cycle == {"B": ("fake_B", "real_B"), "A": ("fake_A", "real_A")}
    assert expected_keys(Pix2PixModel.scored_pairs(True), paired=True, distribution=False) == ["L1", "PSNR", "SSIM"]
    assert expected_keys(cycle, paired=False, distribution=True) == ["FID_B", "KID_B", "KID_B_std",
                                                                     "FID_A", "KID_A", "KID_A_std"]


def test_fid_sees_the_8_bit_values_that_test_py_saves():
    halfway = ((torch.arange(255.0) + 0.5) / 127.5 - 1).reshape(1, 3, 5, 17)  # values that round half-way
    for batch in (torch.rand(2, 3, 5, 7) * 2 - 1, halfway):
        for index in range(len(batch)):
            assert np.array_equal(to_uint8(batch)[index].permute(1, 2, 0).numpy(), tensor2im(batch, index=index))


# ---------------------------------------------------------------------------- FID's and KID's computation
@pytest.mark.parametrize("sizes,dim", [((9, 12), 64), ((2, 2), 8), ((90, 70), 16)], ids=["fewer", "two", "more"])
def test_fid_is_torchmetrics_eigenvalue_formula_for_sets_smaller_and_larger_than_the_feature_size(sizes, dim):
    from torchmetrics.image.fid import _compute_fid  # the formula of its FrechetInceptionDistance.compute

    generator = torch.Generator().manual_seed(sum(sizes))
    real = torch.rand(sizes[0], dim, generator=generator, dtype=torch.float64)
    fake = torch.rand(sizes[1], dim, generator=generator, dtype=torch.float64) ** 2 + 0.1
    expected = _compute_fid(real.mean(0), torch.cov(real.T), fake.mean(0), torch.cov(fake.T))
    # rel 1e-6: for sets smaller than the feature size, the square roots of the product's (dim - n) zero
    # eigenvalues are each ~1e-8 of rounding in torchmetrics' formula (here ~3e-8 in all; none in ours)
    assert float(frechet_distance(real, fake)) == pytest.approx(float(expected), rel=1e-6)
    assert float(frechet_distance(real, real)) == pytest.approx(0, abs=1e-9)


def test_fid_and_kid_do_not_depend_on_the_order_or_batching_of_the_images():
    features = torch.randn(14, 2048, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    real, fake = features[:7], features[7:] + 0.1

    def distances(order, batches, subsets=20, subset_size=4):
        metric = InceptionFeatureDistances(subsets, subset_size)
        for chunk in np.array_split(np.asarray(order), batches):
            metric.update(real[chunk], real=True)
            metric.update(fake[chunk], real=False)
        torch.manual_seed(batches)  # whatever the global random state (it differs between processes)
        return {key: float(value) for key, value in metric.compute().items()}

    first = distances(range(7), 1)
    assert first == distances([6, 2, 0, 5, 1, 3, 4], 3) and first["KID_std"] > 0  # random subsets, the same ones
    assert first["FID"] == pytest.approx(float(frechet_distance(real, fake)), rel=1e-12)
    # whole sets as subsets: torchmetrics' unbiased MMD^2 of all features, with no spread
    from torchmetrics.image.kid import poly_mmd
    whole = distances(range(7), 2, subset_size=1000)
    assert whole["KID"] == pytest.approx(float(poly_mmd(real, fake)), rel=1e-12) and whole["KID_std"] == 0.0


# ---------------------------------------------------------------------------- Inception weights
def test_the_weights_file_is_the_one_torch_fidelity_downloads():
    from torch_fidelity.feature_extractor_inceptionv3 import URL_INCEPTION_V3

    assert INCEPTION_WEIGHTS_URL == URL_INCEPTION_V3 and URL_INCEPTION_V3.endswith("/" + INCEPTION_WEIGHTS_NAME)


@pytest.fixture
def empty_torch_home(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.delenv(inception.WEIGHTS_ENV, raising=False)
    monkeypatch.setenv(inception.OFFLINE_ENV, "1")
    return tmp_path / "torch" / "hub" / "checkpoints"


def test_without_weights_offline_paired_metrics_run_and_fid_says_where_to_put_the_file(empty_torch_home):
    assert not inception.inception_weights_available()
    message = inception.missing_inception_weights_message()
    assert INCEPTION_WEIGHTS_NAME in message and str(empty_torch_home) in message and INCEPTION_WEIGHTS_URL in message
    metrics = TranslationMetrics({"": ("fake_B", "real_B")}, paired=True, distribution=True)
    metrics.update({"fake_B": smooth_images(0), "real_B": smooth_images(1)})
    assert set(metrics.compute()) == {"L1", "PSNR", "SSIM"}
    assert metrics.skipped == {"FID": message, "KID": message, "KID_std": message}
    with pytest.raises(UserError, match="nowhere.pth is not a file"):
        inception.find_inception_weights(str(empty_torch_home / "nowhere.pth"))


def test_an_unreachable_download_gives_up_at_once_and_leaves_no_file(empty_torch_home, monkeypatch):
    with socket.socket() as s:  # a port nobody listens on: the connection is refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.delenv(inception.OFFLINE_ENV)
    monkeypatch.setattr(inception, "INCEPTION_WEIGHTS_URL", f"http://127.0.0.1:{port}/{INCEPTION_WEIGHTS_NAME}")
    started = time.monotonic()
    assert inception.ensure_inception_weights() is None
    assert time.monotonic() - started < inception.DOWNLOAD_TIMEOUT_S
    assert not list(empty_torch_home.glob("*"))


@pytest.mark.slow
def test_fid_is_torchmetrics_fid_on_torch_fidelitys_inception_and_gray_images_are_tiled(inception_torch_home,
                                                                                         monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_HOME", str(inception_torch_home))
    real, fake = smooth_images(5, channels=1, size=(32, 32)), smooth_images(6, channels=1, size=(32, 32))
    metrics = TranslationMetrics({"G": ("fake_G", "real_G"), "M": ("fake_M", "real_M")}, paired=False,
                                 distribution=True)
    metrics.update({"fake_G": fake, "real_G": real,
                    "fake_M": smooth_images(7, channels=4), "real_M": smooth_images(8, channels=4)})
    scores = metrics.compute()
    # torchmetrics' own pipeline on the RGB-tiled 8-bit images: its FID with torch-fidelity's network and resizing
    from torchmetrics.image.fid import FrechetInceptionDistance
    reference = FrechetInceptionDistance(feature=2048,
                                         feature_extractor_weights_path=inception.find_inception_weights(),
                                         antialias=False)
    reference.update(to_uint8(real.expand(-1, 3, -1, -1)), real=True)
    reference.update(to_uint8(fake.expand(-1, 3, -1, -1)), real=False)
    # the same features (torchmetrics keeps their sums), and its FID up to the rounding in the square roots
    # of its product's ~2045 zero eigenvalues (~1e-6 here; ours has none: the formula test above)
    ours = {side: dim_zero_cat(getattr(metrics.distribution["G"], f"{side}_features")) for side in ("real", "fake")}
    assert torch.allclose(ours["real"].sum(0), reference.real_features_sum, rtol=1e-9, atol=1e-9)
    assert torch.allclose(ours["fake"].sum(0), reference.fake_features_sum, rtol=1e-9, atol=1e-9)
    assert scores["FID_G"] == pytest.approx(float(reference.compute()), abs=1e-5)
    assert scores["FID_G"] > 0 and math.isfinite(scores["KID_G"]) and scores["KID_G_std"] == 0.0  # 3 images: 1 subset
    assert "FID_M" not in scores and "4 channels" in metrics.skipped["FID_M"]
    assert metrics.image_counts["G"] == {"paired": 0, "outputs": 3, "reference": 3}
    torch.save({"not": torch.zeros(1)}, tmp_path / "other.pth")
    with pytest.raises(UserError, match="other.pth is not a file of Inception-v3 weights"):
        inception.load_inception(str(tmp_path / "other.pth"))


@pytest.mark.slow
def test_validation_runs_real_images_through_inception_once_and_scores_as_without_the_cache(inception_torch_home,
                                                                                          monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(inception_torch_home))
    reals = [smooth_images(10, count=2, size=(32, 32)), smooth_images(11, count=1, size=(32, 32))]  # two batches
    pairs = {"B": ("fake_B", "real_B")}
    cache = ReferenceFeatures()
    cached = TranslationMetrics(pairs, paired=False, distribution=True, reference_cache=cache)
    plain = TranslationMetrics(pairs, paired=False, distribution=True)
    seen: list[int] = []  # images per Inception call of the cached metrics
    network = cached.inception
    cached.inception = lambda images: (seen.append(len(images)), network(images))[1]
    for validation in range(2):  # e.g. after epochs 1 and 2: other outputs, the same real images
        for metrics in (cached, plain):
            metrics.reset()
            for batch, real in enumerate(reals):
                metrics.update({"fake_B": smooth_images(20 + 2 * validation + batch, count=len(real), size=(32, 32)),
                                "real_B": real})
        # the features FID and KID hold, bit for bit: all that their (deterministic) compute() reads
        assert_same_distribution_states(cached, plain)
    # and the scores themselves
    assert cached.compute() == plain.compute()  # bit for bit
    assert seen == [2, 2, 1, 1, 2, 1]  # per batch the outputs, then the real images, known the second time
    assert len(cache) == 3


def assert_same_distribution_states(a: TranslationMetrics, b: TranslationMetrics) -> None:
    """Every FID/KID metric of `a` holds the same states as `b`'s, bit for bit (tensors, or lists of them)."""
    assert a.distribution.keys() == b.distribution.keys() and a.distribution
    for name, metric in a.distribution.items():
        other = b.distribution[name].metric_state
        assert metric.metric_state.keys() == other.keys()
        for key, value in metric.metric_state.items():
            ours, theirs = (v if isinstance(v, list) else [v] for v in (value, other[key]))
            assert len(ours) == len(theirs), (name, key)
            assert all(torch.equal(x, y) for x, y in zip(ours, theirs)), (name, key)


# ---------------------------------------------------------------------------- several processes
@pytest.mark.slow
def test_two_processes_with_uneven_shares_compute_the_metrics_of_one_process(inception_torch_home, tmp_path,
                                                                             monkeypatch):
    from helpers import ok

    monkeypatch.setenv("TORCH_HOME", str(inception_torch_home))  # for this process and the ranks'
    monkeypatch.setenv(inception.OFFLINE_ENV, "1")
    load_script("tests/metrics_ddp_script.py").main(str(tmp_path / "one.json"))  # one process: this one
    ok(ranks("tests/metrics_ddp_script.py", str(tmp_path / "two.json")))
    one, two = (json.loads((tmp_path / name).read_text()) for name in ("one.json", "two.json"))
    assert set(one["metrics"]) == {"L1_B", "PSNR_B", "SSIM_B", "FID_B", "KID_B", "KID_B_std",
                                   "L1_A", "PSNR_A", "SSIM_A"}
    assert one["counts"] == two["counts"] == {"B": {"paired": 5, "outputs": 5, "reference": 5}}
    for part in ("metrics", "lonely"):
        assert one[part].keys() == two[part].keys()
        for key, value in one[part].items():
            assert abs(two[part][key] - value) <= 1e-6, (key, value, two[part][key])
    assert one["metrics"]["KID_B_std"] > 0  # the KID subsets (3 of 5 images) were random, and the same
    assert two["distances_on_one_rank"] == pytest.approx(one["distances_on_one_rank"], abs=1e-12)
