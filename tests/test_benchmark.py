"""The benchmark harness (dev/benchmark.py, dev/bench/, dev/bench_worker.py).

Default suite (seconds): the statistics, the FLOP counter on one layer, the derived numbers, and a
run of the real harness - plan, worker processes, report - on small networks, whose FLOPs per
network (forward and backward of each G and D in one training step) must match an analytic count
made here from the layer shapes to 1%: a step missing one network pass fails it.
Opt-in (`pytest -m benchmark`, minutes): `dev/benchmark.py --quick` with its timings.
"""
from __future__ import annotations

import json
import os
import sys
import time

import pytest
import torch
from torch import nn

from conftest import ROOT, load_script
from helpers import assert_flops_match, check_timing, conv_layer_flops, positive
from models import networks
from processes import run_script_process

benchmark = load_script("dev/benchmark.py")
from bench import derive, jobs, report, stats  # noqa: E402  (dev/ is on sys.path now)
from bench import plan as plans  # noqa: E402
from bench import runner as runners  # noqa: E402
from bench.flops import conv2d_flops, count_flops  # noqa: E402
from bench.measure import measure  # noqa: E402

SMALL = {"cycle_gan": 32, "pix2pix": 256}  # pix2pix's unet_256 takes multiples of 256 only
SMALL_NETWORKS = ["--ngf", "8", "--ndf", "8"]


# ----------------------------------------------------------------------------- analytic FLOP count


def expected_flops_by_network(model: str, size: int, ngf: int, ndf: int) -> dict[str, dict[str, int]]:
    """Forward and backward FLOPs of each network in one training step at batch 1, from the
    reference's algorithm. F is a network's forward; F1 its first conv's. Backward computes a
    conv's input gradient if its input needs one and its weight gradient if its weights do, each
    costing that conv's forward: a pass on a real image (no input gradient) costs 2F - F1, a pass
    on another network's output 2F, a pass with frozen weights F.

    CycleGAN (lambda_identity > 0): each G runs on a real image (fake), on the other G's fake
    (reconstruction) and on a real image of its output domain (identity): forward 3F, backward
    2(2F - F1) + 2F. Each D judges G's fake with frozen weights for G's loss, then a real and a
    pooled (detached) fake for its own: forward 3F, backward F + 2(2F - F1).
    pix2pix: G forward F, backward 2F - F1; D on the detached fake pair and the real pair, then
    frozen on the fake pair for G's loss: forward 3F, backward 2(2F - F1) + F."""
    if model in ("cycle_gan", "cycle_gan_3d"):
        netG, netD, shape = ("resnet_9blocks", "basic", (1, 3, size, size)) if model == "cycle_gan" else \
            ("resnet_6blocks_3d", "n_layers_3d", (1, 3, size, size, size))
        g = conv_layer_flops(networks.define_G(3, 3, ngf, netG, "instance"), shape)
        d = conv_layer_flops(networks.define_D(3, ndf, netD, 3 if model == "cycle_gan" else 1, "instance"), shape)
        G, G1, D, D1 = sum(g), g[0], sum(d), d[0]
        gen = {"forward": 3 * G, "backward": 2 * (2 * G - G1) + 2 * G}
        dis = {"forward": 3 * D, "backward": D + 2 * (2 * D - D1)}
        return {"G_A": gen, "G_B": gen, "D_A": dis, "D_B": dis}
    g = conv_layer_flops(networks.define_G(3, 3, ngf, "unet_256", "batch"), (1, 3, size, size))
    d = conv_layer_flops(networks.define_D(6, ndf, "basic", 3, "batch"), (1, 6, size, size))
    G, G1, D, D1 = sum(g), g[0], sum(d), d[0]
    return {"G": {"forward": G, "backward": 2 * G - G1},
            "D": {"forward": 3 * D, "backward": 2 * (2 * D - D1) + D}}


# ----------------------------------------------------------------------------- fast tests


def test_summarize_median_and_quartiles():
    summary = stats.summarize([5.0, 1.0, 3.0, 2.0, 4.0])
    assert summary == {"median_s": 3.0, "q1_s": 2.0, "q3_s": 4.0, "min_s": 1.0, "max_s": 5.0, "steps": 5}
    assert stats.summarize([2.5])["q1_s"] == 2.5


def test_flop_counter_matches_textbook_conv_forward_and_backward():
    conv = nn.Conv2d(16, 32, 3, padding=1, bias=False)
    x = torch.randn(2, 16, 20, 20, requires_grad=True)
    forward = conv2d_flops(2, 16, 32, 3, 20, 20)
    assert count_flops(lambda: conv(x)) == forward
    # backward: the input's gradient and the weights' gradient, each as costly as the forward
    assert count_flops(lambda: conv(x).sum().backward()) == 3 * forward


def test_configs_choose_the_step_configurations_and_fp16_is_measured_on_cuda_only():
    def configs(*argv: str) -> dict[str, list[str]]:
        plan = benchmark.make_plan(benchmark.parse_args(list(argv)))
        return {device: plan.step_configs(device) for device in ("cpu", "cuda")}

    every = configs()
    assert every["cuda"] == every["cpu"] + plans.CUDA_CONFIGS and not set(plans.CUDA_CONFIGS) & set(every["cpu"])
    # --configs narrows the fp16 ones too: a short GPU run measures only what it names
    assert configs("--configs", "bf16,fp16") == {"cpu": ["fp32", "bf16"], "cuda": ["fp32", "bf16", "fp16"]}
    assert configs("--configs", "compile") == {"cpu": ["fp32", "compile"], "cuda": ["fp32", "compile"]}
    assert "fp16" not in configs("--quick")["cuda"]


@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The harness end to end on small networks: plan, a worker process (CycleGAN's plain fp32
    step, FLOPs counted), derived numbers, report files."""
    out = tmp_path_factory.mktemp("bench")
    argv = ["--quick", "--out", str(out), "--sections", "step", "--configs", "fp32", "--models", "cycle_gan",
            "--threads", "1"]
    args = benchmark.parse_args(argv)
    plan = benchmark.make_plan(args)
    plan.step_size, plan.network_args = dict(SMALL), SMALL_NETWORKS
    plan.step = plans.Timing(warmup=1, min_steps=2, max_steps=2, budget_s=0.0)
    started = time.perf_counter()
    runner = runners.Runner(out, "cpu", 300, out / "scratch", threads=1)
    results = measure(plan, runner, args.models, {}, out / "scratch")
    report = benchmark.write_report(out, benchmark.describe_run(args, plan, "cpu", argv), results, started)
    return {"out": out, "report": report, "failed": benchmark.failed_measurements(results)}


def test_harness_writes_the_documented_tables_and_json(small_run):
    out, report = small_run["out"], small_run["report"]
    assert small_run["failed"] == []
    assert json.loads((out / "benchmark.json").read_text()) == json.loads(json.dumps(report))
    assert report["meta"]["mode"] == "quick plan, partial" and report["meta"]["plan"]["network_args"] == SMALL_NETWORKS
    (row,) = report["results"]["step"]
    assert row["model"] == "cycle_gan" and row["config"] == "fp32" and row["size"] == SMALL["cycle_gan"]
    assert row["steps"] == 2 and len(row["times_s"]) == 2 and row["min_s"] <= row["median_s"] <= row["max_s"]
    assert row["speedup_vs_fp32"] == 1.0 and row["images_per_s"] == pytest.approx(1 / row["median_s"])
    assert row["achieved_flops_per_s"] == pytest.approx(row["flops_per_step"] / row["median_s"])
    assert set(row["flops_by_network"]) == {"G_A", "G_B", "D_A", "D_B"}
    assert sum(sum(p.values()) for p in row["flops_by_network"].values()) == row["flops_per_step"]
    # the operators one step dispatches (a kernel launch or more each on a GPU), counted beside the time
    assert isinstance(row["ops_per_step"], int) and row["ops_per_step"] > 1000
    markdown = (out / "benchmark.md").read_text()
    assert "aten ops/step" in markdown and f"| {row['ops_per_step']} |" in markdown
    assert "### Training step: cycle_gan (resnet_9blocks), 32x32" in markdown
    assert "FLOPs per network in one step" in markdown and "| G_A |" in markdown and "| D_B |" in markdown


@pytest.mark.parametrize("model", ["cycle_gan", "pix2pix"])
def test_step_flops_per_network_match_the_analytic_count(tmp_path, model):
    """What a step job reports with count_flops (forward and backward of each network), on small
    networks, against the analytic count: a step missing one pass of any network fails."""
    spec = {"kind": "step", "model": model, "size": SMALL[model], "batch": 1, "device": "cpu",
            "checkpoints_dir": str(tmp_path), "extra_args": SMALL_NETWORKS, "warmup": 0, "min_steps": 1,
            "max_steps": 1, "budget_s": 0, "count_flops": True}
    result = jobs.job_step(spec)
    row = {"batch": 1, "flops_per_step": result["flops_batch1"], "flops_by_network": result["flops_by_network_batch1"]}
    assert_flops_match(row, expected_flops_by_network(model, SMALL[model], ngf=8, ndf=8))


def test_volume_step_flops_per_network_match_the_analytic_count_and_the_report_shows_them(tmp_path):
    """CycleGAN on a 3-D patch (--models cycle_gan_3d): its step job counts the 3-D networks' FLOPs
    as the same algorithm on volumes predicts, and the volumes section reports them with the peak memory."""
    small = ["--netG", "resnet_6blocks_3d", "--netD", "n_layers_3d", "--n_layers_D", "1", "--ngf", "2", "--ndf", "2"]
    spec = {"kind": "step", "model": "cycle_gan_3d", "size": 8, "batch": 1, "device": "cpu",
            "checkpoints_dir": str(tmp_path), "extra_args": small, "warmup": 0, "min_steps": 1, "max_steps": 1,
            "budget_s": 0, "count_flops": True}
    result = jobs.job_step(spec)
    row = {"batch": 1, "flops_per_step": result["flops_batch1"], "flops_by_network": result["flops_by_network_batch1"]}
    assert_flops_match(row, expected_flops_by_network("cycle_gan_3d", 8, ngf=2, ndf=2))
    rows = [{"model": "cycle_gan_3d", "size": 8, "checkpoint_activations": False, **result}]
    table = "\n".join(report._volumes_section(rows))
    assert f"| cycle_gan_3d | 8^3 | plain | {result['flops_batch1'] / 1e9:.1f} |" in table
    assert f"| {result['peak_mem_mb']:.0f} |" in table


def test_bicyclegan_step_flops_are_per_image_of_its_two_image_batch_and_belong_to_its_four_networks(tmp_path):
    """BicycleGAN trains on pairs of images (the encoded and the random half): its step is counted on
    its batch of 2 and reported per image; G runs once per image (on the encoded half's A with two
    codes), so G's forward FLOPs per image are one G(A, z)."""
    from types import SimpleNamespace
    small = ["--netG", "unet_128", "--netE", "resnet_128", "--netD", "basic_128_multi", "--netD2", "basic_128_multi",
             "--ngf", "4", "--nef", "4", "--ndf", "4"]
    spec = {"kind": "step", "model": "bicycle_gan", "size": 128, "batch": plans.STEP_BATCH["bicycle_gan"],
            "device": "cpu", "checkpoints_dir": str(tmp_path), "extra_args": small, "warmup": 0, "min_steps": 1,
            "max_steps": 1, "budget_s": 0, "count_flops": True}
    result = jobs.job_step(spec)
    by_network = result["flops_by_network_batch1"]
    other = by_network.pop("other", {"forward": 0, "backward": 0})  # a few hundred FLOPs outside the networks
    assert set(by_network) == {"G", "E", "D", "D2"}
    assert sum(other.values()) < 1e-5 * result["flops_batch1"]
    assert all(phases["forward"] > 0 and phases["backward"] > 0 for phases in by_network.values())
    assert sum(sum(p.values()) for p in by_network.values()) + sum(other.values()) == \
        pytest.approx(result["flops_batch1"], abs=8)  # each count halved (rounded down) separately
    flags = SimpleNamespace(netG="unet_128", ngf=4, norm="instance", no_dropout=True, init_type="xavier",
                            init_gain=0.02, upsample="basic", nz=8, where_add="all", nl="relu", gpu_ids=[])
    generator = networks.build_generator(flags, 3, 3)
    one_image = count_flops(lambda: generator(torch.zeros(1, 3, 128, 128), torch.zeros(1, 8)))
    assert by_network["G"]["forward"] == one_image


def test_derived_numbers_and_best_configuration():
    results = {
        "peaks": {"conv_fp32_flops_per_s": 100e9, "conv_bf16_flops_per_s": 200e9},
        "step": [
            {"model": "pix2pix", "config": "fp32", "size": 256, "batch": 1, "median_s": 1.0, "warmup_s": [1.2]},
            {"model": "pix2pix", "config": "bf16", "size": 256, "batch": 1, "median_s": 0.5, "warmup_s": [0.6]},
            {"model": "pix2pix", "config": "compile", "size": 256, "batch": 1, "median_s": 0.8,
             "warmup_s": [30.0, 0.8]},
        ],
        "loop": [{"model": "pix2pix", "config": "fp32", "size": 256, "batch": 1, "median_s": 1.1,
                  "data_wait_fraction": 0.01, "loader_workers": 2}],
        "scaling": [{"model": "pix2pix", "config": "fp32", "size": 256, "batch": 4, "median_s": 3.0}],
        "ddp": [{"model": "cycle_gan", "size": 128, "extra_args": [],
                 "one_rank": {"median_s": 2.0}, "two_ranks": {"median_s": 2.5}}],
    }
    by_network = {"G": {"forward": 10e9, "backward": 20e9}, "D": {"forward": 5e9, "backward": 15e9}}
    derive.derive(results, {("pix2pix", 256): {"total": 50e9, "by_network": by_network}})
    fp32, bf16, compiled = results["step"]
    assert bf16["speedup_vs_fp32"] == pytest.approx(2.0)
    assert bf16["utilisation_of_conv_peak"] == pytest.approx(0.5)  # 100 GFLOP/s of a 200 GFLOP/s bf16 peak
    assert fp32["utilisation_of_conv_peak"] == pytest.approx(0.5)
    assert compiled["compile_s"] == pytest.approx(29.2)
    assert fp32["data_wait_fraction"] == 0.01 and bf16["data_wait_fraction"] is None
    assert results["loop"][0]["loop_over_step"] == pytest.approx(1.1)
    assert results["ddp"][0]["efficiency"] == pytest.approx(0.8)
    (batch4,) = results["scaling"]  # FLOPs of a batch of 4: four times the batch-1 count
    assert batch4["flops_per_step"] == 200e9 and batch4["flops_by_network"]["D"]["backward"] == 60e9
    assert derive.best_config(results["step"], "pix2pix") == "bf16"
    targets = derive.evaluate_targets(results)
    # 2.0x >= 1.5x; compile 0.8 <= 1.05; 1% < 5%; 0.8 < 0.9
    assert [t["met"] for t in targets] == [True, True, True, False]
    results["step"][2]["median_s"] = 1.06  # compiled 6% slower than fp32: beyond the probe's tolerance
    assert [t["met"] for t in derive.evaluate_targets(results)][1] is False


def test_passes_are_pooled():
    first = {"times_s": [1.0, 1.2, 1.1], "cpu_s": [2.0] * 3, "median_s": 1.1, "peak_mem_mb": 900.0,
             "warmup_s": [60.0, 1.1], "graphs_compiled": 4, "graphs_compiled_while_timed": 0}
    second = {"times_s": [1.3, 1.4, 1.5], "cpu_s": [2.0] * 3, "median_s": 1.4, "peak_mem_mb": 950.0,
              "warmup_s": [12.0, 1.4], "graphs_compiled": 4, "graphs_compiled_while_timed": 0}
    merged = derive.merge_passes([first, second])
    assert merged["steps"] == 6 and merged["median_s"] == pytest.approx(1.25)
    assert merged["pass_medians_s"] == [1.1, 1.4] and merged["peak_mem_mb"] == 950.0
    assert merged["compile_s"] == pytest.approx(61.1 - 2.2)  # the cold first pass
    assert merged["compile_s_per_pass"][1] == pytest.approx(13.4 - 2.8)
    assert derive.merge_passes([first, {"error": "exit 1"}])["error"] == "exit 1"


def test_resume_keeps_finished_measurements(tmp_path):
    runner = runners.Runner(tmp_path, "cpu", 10, tmp_path / "scratch", resume=True)
    spec = {"device": "cpu", "checkpoints_dir": str(tmp_path / "scratch" / "checkpoints"), "kind": "peaks"}
    (tmp_path / "logs" / "peaks.json").write_text(json.dumps({"spec": spec, "conv_fp32_flops_per_s": 1e11}))
    assert runner.run("peaks", {"kind": "peaks"})["conv_fp32_flops_per_s"] == 1e11  # no process started


# ----------------------------------------------------------------------------- the --quick run (opt-in)


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("benchmark")
    started = time.perf_counter()
    proc = run_script_process([sys.executable, str(ROOT / "dev" / "benchmark.py"), "--quick", "--out", str(out)],
                              ROOT, dict(os.environ), timeout=3600)
    runtime = time.perf_counter() - started
    assert proc.returncode == 0, (f"exit {proc.returncode}\nSTDOUT:\n{proc.stdout[-5000:]}"
                                  f"\nSTDERR:\n{proc.stderr[-5000:]}")
    print(f"benchmark --quick took {runtime:.0f} s")
    return {"out": out, "stdout": proc.stdout, "runtime": runtime,
            "report": json.loads((out / "benchmark.json").read_text()),
            "markdown": (out / "benchmark.md").read_text()}


@pytest.mark.benchmark
def test_quick_writes_table_and_json(quick):
    assert (quick["out"] / "benchmark.md").exists() and (quick["out"] / "benchmark.json").exists()
    assert quick["markdown"].strip() in quick["stdout"]  # the table is printed too
    meta = quick["report"]["meta"]
    assert meta["mode"] == "quick" and meta["machine"]["torch"] == torch.__version__
    assert meta["machine"]["cores_usable"] >= 1 and meta["date"] and positive(meta["runtime_s"])
    for header in ("Device peaks", "Training step: cycle_gan", "Training step: pix2pix", "Training loop",
                   "Scaling", "DDP weak scaling", "Targets"):
        assert header in quick["markdown"], header


@pytest.mark.benchmark
def test_quick_peaks(quick):
    peaks = quick["report"]["results"]["peaks"]
    assert "error" not in peaks
    for key in ("conv_fp32_flops_per_s", "conv_bf16_flops_per_s", "matmul_fp32_flops_per_s", "matmul_bf16_flops_per_s"):
        assert positive(peaks[key]) and peaks[key] < 1e16, key
    conv = peaks["conv"]
    textbook = 2 * conv["batch"] * conv["channels"] ** 2 * conv["kernel"] ** 2 * conv["size"] ** 2
    assert conv["flops_counted"] == textbook


@pytest.mark.benchmark
def test_quick_training_steps(quick):
    results = quick["report"]["results"]
    for model in ("cycle_gan", "pix2pix"):
        rows = {r["config"]: r for r in results["step"] if r["model"] == model}
        assert set(rows) == {"fp32", "straightforward", "bf16", "channels_last", "fused_adam", "bf16+channels_last"}
        for config, row in rows.items():
            check_timing(row)
            assert row["images_per_s"] == pytest.approx(row["batch"] / row["median_s"])
            assert positive(row["speedup_vs_fp32"]) and row["speedup_vs_fp32"] < 100
            assert positive(row["flops_per_step"]) and positive(row["achieved_flops_per_s"])
            assert row["peak_dtype"] == ("bf16" if config.startswith("bf16") else "fp32")
            # Above 100% is possible: the yardstick is one forward conv, and where bf16 is emulated
            # (no avx512_bf16/AMX) the model's bf16 backward kernels can beat it.
            assert 0 < row["utilisation_of_conv_peak"] < 10
            assert config in quick["markdown"]
        assert rows["fp32"]["speedup_vs_fp32"] == 1.0
        assert 0 <= rows["fp32"]["data_wait_fraction"] <= 1
        # The default networks' FLOPs per network match the analytic count, and in all (CycleGAN)
        # the reference implementation's 1879 GFLOP per 256x256 step, scaled by the pixel count.
        assert_flops_match(rows["fp32"], expected_flops_by_network(model, rows["fp32"]["size"], ngf=64, ndf=64))
        reference = {"cycle_gan": 1879e9, "pix2pix": 87e9}[model] * (rows["fp32"]["size"] / 256) ** 2
        assert rows["fp32"]["flops_per_step"] == pytest.approx(reference, rel=0.05)


@pytest.mark.benchmark
def test_quick_loop_with_real_data(quick):
    loops = quick["report"]["results"]["loop"]
    assert {r["model"] for r in loops} == {"cycle_gan", "pix2pix"}
    for row in loops:
        check_timing(row)
        assert 0 <= row["data_wait_fraction"] <= 1
        assert len(row["wait_s"]) == row["steps"] and all(w >= 0 for w in row["wait_s"])
        assert row["loader_workers"] >= 1 and row["num_threads"] == 4  # the default --num_threads
        assert positive(row["loop_over_step"]) and positive(row["speedup_vs_fp32"])
    assert any(r["config"] == "fp32" for r in loops)


@pytest.mark.benchmark
def test_quick_scaling(quick):
    rows = quick["report"]["results"]["scaling"]
    points = {(r["model"], r["size"], r["batch"]) for r in rows}
    assert {("cycle_gan", 32, 1), ("cycle_gan", 64, 1), ("cycle_gan", 64, 2), ("pix2pix", 256, 2)} <= points
    for row in rows:
        check_timing(row)
        assert positive(row["flops_per_step"]) and positive(row["time_vs_smallest"])
        assert_flops_match(row, expected_flops_by_network(row["model"], row["size"], ngf=64, ndf=64))


@pytest.mark.benchmark
def test_quick_ddp_and_targets(quick):
    report = quick["report"]
    (ddp,) = report["results"]["ddp"]
    for run in (ddp["one_rank"], ddp["two_ranks"]):
        check_timing(run)
    assert ddp["one_rank"]["world_size"] == 1 and ddp["two_ranks"]["world_size"] == 2
    assert ddp["two_ranks"]["backend"] == "gloo"
    assert 0 < ddp["efficiency"] <= 2
    kinds = " ".join(t["target"] for t in report["targets"])
    for needle in ("cycle_gan: best fast", "pix2pix: best fast", "not slower than the straightforward step",
                   "data wait", "DDP weak-scaling"):
        assert needle in kinds
    for target in report["targets"]:
        assert isinstance(target["met"], bool) and target["value"] >= 0


def test_validation_cost_is_read_from_the_run_logs_as_medians_of_each_validation_and_its_epoch(tmp_path):
    from util.display.validation_log import ValidationLog

    bench_validation = load_script("dev/bench_validation.py")
    log = ValidationLog(str(tmp_path))
    # (validation seconds, epoch seconds): shares 10%, 5%, 4%, 50%; epoch 2 redone after a resume
    for epoch, seconds, epoch_seconds in [(1, 3.0, 30.0), (2, 9.0, 10.0), (2, 2.0, 40.0), (3, 2.0, 50.0),
                                          (4, 4.0, 8.0)]:
        log.append(epoch, 10 * epoch, {"L1": 0.5, "PSNR": 20.0}, seconds, epoch_seconds, images=20)
    summary = bench_validation.summarise(list(bench_validation.read_metrics(str(tmp_path)).values()))
    assert summary["epochs"] == 4 and summary["images"] == 20
    assert summary["validation_s_first"] == 3.0
    assert summary["validation_s_median"] == pytest.approx(2.5)  # of 3, 2, 2, 4: the redone epoch counts once
    assert summary["epoch_s_median"] == pytest.approx(35.0)  # of 30, 40, 50, 8
    assert summary["share_median"] == pytest.approx(0.075)  # of 0.10, 0.05, 0.04, 0.50
    assert summary["metrics"] == ["L1", "PSNR"]


def test_the_step_profile_counts_gpu_busy_time_once_where_streams_overlap_and_sorts_kernels_by_kind():
    profile_step = load_script("dev/profile_step.py")

    def kernel(name: str, start: float, duration: float) -> dict:
        return {"ph": "X", "cat": "kernel", "name": name, "ts": start, "dur": duration}
    launch = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 0, "dur": 5}
    trace = {"traceEvents": [
        kernel("sm90_xmma_fprop_implicit_gemm_f32f32", 0, 400), kernel("reflection_pad2d_out_kernel", 300, 200),
        kernel("vectorized_elementwise_kernel<4, AddFunctor>", 1000, 100),
        kernel("multi_tensor_apply_kernel<AdamFunctor>", 1500, 300), launch, launch, launch, launch,
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 900, "dur": 5},  # one replay (--compile)
        {"ph": "X", "cat": "cpu_op", "name": "aten::conv2d", "ts": 0, "dur": 2000}]}
    summary = profile_step.summarise_trace(trace, steps=2, wall_s=0.004)
    assert summary["wall_ms_per_step"] == pytest.approx(2.0)
    # 0-500 (the pad overlaps the convolution), 1000-1100, 1500-1800: 900 us in 2 steps
    assert summary["gpu_busy_ms_per_step"] == pytest.approx(0.45)
    assert summary["gpu_busy_fraction"] == pytest.approx(0.225)
    assert summary["kernel_launches_per_step"] == 2 and summary["cuda_graph_launches_per_step"] == 0.5
    assert summary["gpu_ms_per_step_by_kind"] == pytest.approx(
        {"convolution and matmul": 0.2, "padding": 0.1, "elementwise": 0.05, "optimizer": 0.15})


def test_the_step_profile_runs_on_the_cpu_and_writes_its_summary(tmp_path, capsys):
    profile_step = load_script("dev/profile_step.py")
    summary = tmp_path / "summary.json"
    assert profile_step.main(["--model", "cycle_gan", "--size", "32", "--device", "cpu", "--warmup", "0",
                              "--steps", "1", "--rows", "5", "--summary", str(summary),
                              "--ngf", "4", "--ndf", "4"]) == 0
    out = capsys.readouterr().out
    assert "aten::" in out  # PyTorch's table of operators
    assert "[Network G_A] Total number of parameters : 0.0" in out  # train.py's --ngf 4 reached the model
    written = json.loads(summary.read_text())
    assert written["wall_ms_per_step"] > 0 and written["device"] == "cpu"
    assert written["gpu_busy_fraction"] is None  # no GPU, no kernels
