"""The fast path (--channels_last, --compile, --fused_adam, --amp) trains the same model as the plain path.

channels_last, compile and the fused Adam must not change the arithmetic beyond rounding; bf16
changes it, so it is judged by the result: the held-out quality of a short training run.
"""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch

from conftest import FAST_FLAGS, demo_data, load_script, run_in_process, train_on, training_engine
from helpers import batches, first_losses, model, pix2pix, run_two_ranks
from helpers_weights import assert_identical, final_weights
from models import create_model, networks
from options.train_options import TrainOptions
from util.distributed import DistContext
from util.errors import UserError


def gradients(net: torch.nn.Module, x: torch.Tensor, target: torch.Tensor) -> dict[str, torch.Tensor]:
    net.zero_grad(set_to_none=True)
    torch.nn.functional.l1_loss(net(x), target).backward()
    return {name: p.grad.detach().clone() for name, p in net.named_parameters()}


@pytest.mark.parametrize("netG,norm,size", [("resnet_6blocks", "instance", 32), ("unet_128", "batch", 128)])
def test_channels_last_generator_has_the_gradients_of_the_contiguous_one(netG, norm, size):
    # One image: on the CPU (torch 2.14) instance norm's backward is wrong for a channels-last incoming
    # gradient when the batch holds one image, and the norm the families build handles it by itself.
    torch.manual_seed(0)
    reference = networks.define_G(3, 3, 8, netG, norm).double()
    fast = networks.define_G(3, 3, 8, netG, norm).double()
    fast.load_state_dict(reference.state_dict())
    fast.to(memory_format=torch.channels_last)
    x = torch.randn(1, 3, size, size, dtype=torch.float64)
    target = torch.rand(1, 3, size, size, dtype=torch.float64) * 2 - 1
    expected = gradients(reference, x, target)
    # the incoming gradient is channels-last too, as in training: that is what broke instance norm
    got = gradients(fast, x.contiguous(memory_format=torch.channels_last),
                    target.contiguous(memory_format=torch.channels_last))
    for name in expected:
        assert torch.allclose(got[name], expected[name], rtol=1e-6, atol=1e-10), name


def norm_gradient(norm: torch.nn.Module, x: torch.Tensor, upstream: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.detach().clone().requires_grad_(True)
    out = norm(x)
    out.backward(upstream)
    return out, x.grad


def test_the_instance_norm_gives_channels_last_inputs_the_right_gradient_and_others_torchs_own():
    # The bug it works around, and the layer choosing its computation by its input's layout: one image,
    # channels-last input and incoming gradient (float64, so only the layout can make a difference).
    norm, plain = networks.get_norm_layer("instance")(4), torch.nn.InstanceNorm2d(4)
    x, upstream = torch.randn(1, 4, 6, 6, dtype=torch.float64), torch.randn(1, 4, 6, 6, dtype=torch.float64)
    expected_out, expected_grad = norm_gradient(plain, x, upstream)
    channels_last = [t.contiguous(memory_format=torch.channels_last) for t in (x, upstream)]
    out, grad = norm_gradient(norm, *channels_last)  # torch's own InstanceNorm2d gets this gradient wrong
    assert out.is_contiguous(memory_format=torch.channels_last)  # the network stays channels-last
    assert torch.allclose(out, expected_out, rtol=0, atol=1e-12)
    assert torch.allclose(grad, expected_grad, rtol=1e-12, atol=1e-12)
    # contiguous inputs: exactly nn.InstanceNorm2d's computation, bit for bit, in float32
    x, upstream = x.float(), upstream.float()
    for got, want in zip(norm_gradient(norm, x, upstream), norm_gradient(plain, x, upstream)):
        assert torch.equal(got, want)
    assert type(norm) is networks.ChannelsLastSafeInstanceNorm2d and isinstance(norm, torch.nn.InstanceNorm2d)


@pytest.mark.parametrize("model_name", ["cycle_gan", "pix2pix"])
@pytest.mark.parametrize("setting", ["--channels_last", "--fused_adam"])
def test_channels_last_and_fused_adam_reproduce_the_first_losses(setting, model_name):
    data = batches()
    plain_model = model(model_name=model_name)
    plain = first_losses(plain_model, data)
    fast = first_losses(model(setting, model_name=model_name), data)
    lr = plain_model.optimizers[0].param_groups[0]["lr"]
    for number, (step_plain, step_fast) in enumerate(zip(plain, fast)):
        # The first losses come from the same weights: only float32 summation order differs. Each update
        # after it may move a weight whose gradient is at the rounding level by up to lr either way (Adam's
        # first steps are sign steps), so after `number` updates the two may part by about number * 2 lr.
        rel = 1e-5 + 2 * lr * number
        for a, b in zip(step_plain, step_fast):
            assert b == pytest.approx(a, rel=rel, abs=1e-6), (number, rel)


@pytest.mark.parametrize("padding,size", [(1, (8, 9)), (3, (7, 7)), ((1, 2, 0, 3), (5, 6))])
def test_a_reflection_pad_built_from_slices_equals_the_native_one(padding, size):
    x = torch.randn(2, 3, *size, dtype=torch.float64, requires_grad=True)
    expected = torch.nn.ReflectionPad2d(padding)(x)
    got = networks.ReflectionPad2d(padding, sliced=True)(x)
    assert torch.equal(got, expected)
    upstream = torch.randn_like(expected)
    (expected_grad,) = torch.autograd.grad(expected, x, upstream)
    (got_grad,) = torch.autograd.grad(got, x, upstream)
    assert torch.allclose(got_grad, expected_grad, rtol=1e-12, atol=1e-12)


def test_a_reflection_pad_slices_while_compiled_or_built_sliced_and_runs_the_native_kernel_otherwise(monkeypatch):
    # Under --compile the same modules also run eagerly (the compile probe's eager steps, or a run
    # that found compiling slower), where the slices would only cost time; --deterministic builds
    # them sliced (CUDA has no deterministic kernel for the native pad's backward).
    x = torch.randn(1, 3, 8, 8, requires_grad=True)
    plain, sliced = networks.ReflectionPad2d(2), networks.ReflectionPad2d(2, sliced=True)
    volume = torch.randn(1, 1, 4, 4, 4, requires_grad=True)
    assert plain(x).grad_fn.name() == "ReflectionPad2DBackward0"
    assert sliced(x).grad_fn.name() == "CatBackward0"
    assert networks.ReflectionPad3d(1)(volume).grad_fn.name() == "ReflectionPad3DBackward0"
    assert networks.ReflectionPad3d(1, sliced=True)(volume).grad_fn.name() == "CatBackward0"
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)  # as when inductor traces it
    assert plain(x).grad_fn.name() == "CatBackward0"
    assert networks.ReflectionPad3d(1)(volume).grad_fn.name() == "ReflectionPad3DBackward0"  # the 3-D kernel compiles
    monkeypatch.setattr(torch.compiler, "is_exporting", lambda: True)  # torch.export (ONNX): the native pad
    assert plain(x).grad_fn.name() == "ReflectionPad2DBackward0"


def input_gradient(net: torch.nn.Module, x: torch.Tensor, upstream: torch.Tensor) -> torch.Tensor:
    x = x.detach().clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = net(x)
    out.backward(upstream.to(out.dtype))
    return x.grad


@pytest.mark.slow
@pytest.mark.parametrize("padding,kernel,layout", [(3, 7, torch.contiguous_format), (1, 3, torch.channels_last)])
def test_a_compiled_bf16_reflection_pad_and_convolution_pass_back_the_eager_gradient(padding, kernel, layout):
    # The defect this guards lives here: under bf16 autocast on the CPU, inductor (torch 2.14) read the
    # gradient of the native reflection pad's backward with the wrong strides, and every weight before
    # a pad got a wrong or NaN gradient (the resnets: a pad before each 3x3 and 7x7 conv, after a ReLU).
    # ReflectionPad2d slices while compiled. The bound is bf16's own: both computations multiply the
    # same bf16 numbers and accumulate the conv's `terms` products in float32 (unit roundoff 2**-24);
    # they may round differently where a result is rounded to bf16 (unit roundoff 2**-8): the conv's
    # input gradient, and up to 3 additions of the pad's backward (a corner is reflected twice). So
    # each is within (4 * 2**-8 + terms * 2**-24) * M of the exact gradient, M being the same gradient
    # computed with every product's absolute value, and the two within twice that of each other.
    # Where it runs with bf16's arithmetic, this holds on any CPU; a gradient read with the wrong strides
    # misses the bound by orders of magnitude (see the next test). (On torch 2.14.1 on an AMD EPYC with
    # avx512_bf16, inductor decomposes the pad's backward and the native pad passes this test too:
    # checked on 2026-11-26 by making the pad use the native kernel while compiling.)
    torch.manual_seed(0)
    channels = 8
    net = torch.nn.Sequential(torch.nn.ReLU(), networks.ReflectionPad2d(padding),
                              torch.nn.Conv2d(channels, channels, kernel)).to(memory_format=layout)
    x = torch.randn(1, channels, 16, 16).contiguous(memory_format=layout)
    upstream = torch.randn(1, channels, 16, 16).to(torch.bfloat16)
    eager = input_gradient(net, x, upstream)
    compiled = input_gradient(torch.compile(net), x, upstream)
    assert torch.isfinite(compiled).all()
    assert_within_bf16_rounding(compiled, eager, magnitude(net, x, upstream), terms=channels * kernel * kernel)


def magnitude(net: torch.nn.Sequential, x: torch.Tensor, upstream: torch.Tensor) -> torch.Tensor:
    """The input gradient of `net` (ReLU, pad, conv) with the absolute values of its bf16 weights and
    incoming gradient, in float64: the sum of the absolute values of each gradient's products."""
    relu, pad, conv = net
    exact = torch.nn.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size, bias=False).double()
    exact.weight.data = conv.weight.detach().to(torch.bfloat16).double().abs()
    x = x.detach().double().requires_grad_(True)
    exact(torch.nn.ReflectionPad2d(pad.padding)(relu(x))).backward(upstream.double().abs())
    return x.grad


def assert_within_bf16_rounding(got: torch.Tensor, expected: torch.Tensor, magnitude: torch.Tensor, terms: int) -> None:
    bound = 2 * (4 * 2.0 ** -8 + terms * 2.0 ** -24) * magnitude
    excess = (got.double() - expected.double()).abs() - bound
    assert excess.max() <= 0, f"{int((excess > 0).sum())} of {excess.numel()} gradients outside bf16's rounding"


def test_the_bf16_bound_catches_a_gradient_read_with_the_wrong_strides():
    # What the defect did, by hand: the pad's input gradient, channels-last in memory, read as contiguous.
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.ReLU(), networks.ReflectionPad2d(1), torch.nn.Conv2d(8, 8, 3))
    x, upstream = torch.randn(1, 8, 16, 16), torch.randn(1, 8, 16, 16).to(torch.bfloat16)
    eager = input_gradient(net, x, upstream)
    misread = eager.contiguous(memory_format=torch.channels_last).as_strided(eager.shape, eager.stride())
    with pytest.raises(AssertionError, match="outside bf16's rounding"):
        assert_within_bf16_rounding(misread, eager, magnitude(net, x, upstream), terms=8 * 9)
    assert_within_bf16_rounding(eager, eager, magnitude(net, x, upstream), terms=8 * 9)


# The compiled training of the next two tests: every speed flag but bf16 (whose arithmetic is another:
# judged by the result above; its compiled gradients by the tests of the pad above), pix2pix with instance norm
# (DDP takes no batch norm). Both compile the same graphs, so that the torchrun test's ranks find what the
# first compiled in inductor's cache: one cold compile, not three (a cold one is ~100 CPU-seconds on a 2-core
# CPU, a cached one ~10).
COMPILED = ["--norm", "instance", "--channels_last", "--compile", "--fused_adam", "--compile_probe", "0"]


@pytest.mark.slow
def test_compiled_training_reproduces_the_first_losses(monkeypatch):
    # Inductor fuses and reorders float32 arithmetic, as channels-last and the fused Adam do: the first
    # two steps agree to ~2e-7; from the third on, Adam turns those rounding differences in near-zero
    # gradients into visible ones, as it would for any change of summation order.
    # The run takes the GPU's way (CUDA graphs, as on one GPU): the CPU dry run of its plumbing (the trained
    # networks compiled apart from the judging ones, each step marked as new), which compiles as usual here.
    import models.training.engine
    monkeypatch.setattr(models.training.engine, "captures_cuda_graphs", lambda *_: (True, None))
    marks = []
    mark = torch.compiler.cudagraph_mark_step_begin
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(mark()))
    data = batches()
    plain = first_losses(model("--norm", "instance", model_name="pix2pix"), data, steps=2)
    compiled = model(*COMPILED, model_name="pix2pix")
    built = dict(compiled.named_networks())
    classes = {name: module_classes(net) for name, net in built.items()}
    fast = first_losses(compiled, data, steps=2)
    for step_plain, step_fast in zip(plain, fast):
        for a, b in zip(step_plain, step_fast):
            assert b == pytest.approx(a, rel=1e-4, abs=1e-6)
    assert len(marks) == 2  # one per training step
    # the step's networks replay graphs, D frozen in G's step too; validation's are compiled apart, without
    networks_trained = training_engine(compiled).variants
    assert networks_trained.cuda_graphs and networks_trained.views()["D"] is not networks_trained.outside_ddp("D")
    assert networks_trained.for_step().frozen["D"] is networks_trained.views()["D"]
    # the compiled twins train beside the model's networks: it still holds what it built, each module its class
    for name, net in built.items():
        assert getattr(compiled, "net" + name) is net and module_classes(net) == classes[name], name


def test_cuda_graphs_are_recorded_on_one_gpu_and_under_nccl_and_declined_in_one_line_under_gloo():
    from models.training.network_variants import captures_cuda_graphs
    gpu, cpu = torch.device("cuda", 0), torch.device("cpu")
    assert captures_cuda_graphs(True, gpu, None) == (True, None)  # one process
    assert captures_cuda_graphs(True, gpu, "nccl") == (True, None)
    assert captures_cuda_graphs(False, gpu, None) == (False, None)  # graphs come with --compile only
    assert captures_cuda_graphs(True, cpu, None) == (False, None)  # and on a GPU only
    captured, declined = captures_cuda_graphs(True, gpu, "gloo")
    assert not captured and "gloo" in declined and "training goes on" in declined and "\n" not in declined


def test_cudnn_autotunes_where_every_batch_has_one_size_and_never_for_deterministic_runs(monkeypatch):
    from util.seeding import choose_kernels
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", False)
    monkeypatch.setattr(torch, "use_deterministic_algorithms", lambda *args, **kwargs: None)  # this process's
    for preprocess, fixed in (("resize_and_crop", True), ("crop", True), ("scale_width_and_crop", True),
                              ("scale_width", False), ("none", False)):
        choose_kernels(False, preprocess)
        assert torch.backends.cudnn.benchmark is fixed, preprocess
    choose_kernels(True, "resize_and_crop")
    assert torch.backends.cudnn.benchmark is False and torch.backends.cudnn.deterministic is True


@pytest.mark.parametrize("netG", ["resnet_6blocks", "resnet_9blocks"])
def test_adam_updates_every_weight_of_a_network_in_a_fixed_number_of_operators(netG):
    # the reference's per-weight loop ran ~10 operators per weight (a kernel launch each on a GPU); ours
    # runs each once for all weights, and reads each weight's step count (a number on the host, no launch)
    count_dispatched_ops = load_script("dev/bench/flops.py").count_dispatched_ops
    m = model("--netG", netG)
    train_on(m, batches(1)[0])
    count, by_operator = count_dispatched_ops(lambda: m.optimizers[0].step())
    weights = sum(1 for _ in m.netG_A.parameters()) + sum(1 for _ in m.netG_B.parameters())
    host_reads = by_operator.pop("_local_scalar_dense", 0)
    assert host_reads <= 2 * weights
    assert sum(by_operator.values()) <= 12 < weights


def module_classes(net: torch.nn.Module) -> list[tuple[str, type]]:
    return [(name, type(module)) for name, module in net.named_modules()]


def test_fp16_on_the_cpu_is_refused_with_advice():
    with pytest.raises(UserError, match="--amp bf16"):
        model("--amp", "fp16")


def test_bf16_autocast_trains_every_model():
    for name in ("cycle_gan", "pix2pix", "template"):
        m = model("--amp", "bf16", model_name=name)
        losses = first_losses(m, batches(2), steps=2)
        assert all(torch.isfinite(torch.tensor(step)).all() for step in losses)
        # the weights stay float32: autocast only changes the arithmetic of the forward pass
        generator = m.netG_A if name == "cycle_gan" else m.netG
        assert all(p.dtype == torch.float32 for p in generator.parameters())


@pytest.mark.slow
def test_bf16_training_learns_as_fp32_training_does_on_the_demo(tmp_path, capsys):
    root = demo_data.make_pix2pix_demo(tmp_path / "data", 32, 0, 64, 4, 16)
    scores = {}
    for amp in ("none", "bf16"):
        shared = ["--dataroot", str(root), "--name", amp, "--checkpoints_dir", str(tmp_path), "--model", "pix2pix",
                  "--netG", "resnet_6blocks", "--load_size", "32", "--crop_size", "32", "--ngf", "8", "--ndf", "8",
                  "--amp", amp]
        trained = run_in_process("train.py", *shared, "--batch_size", "4", "--n_epochs", "3", "--n_epochs_decay", "2",
                                 "--print_freq", "1000", *FAST_FLAGS, capsys=capsys)
        assert trained.returncode == 0, trained.stderr[-3000:]
        tested = run_in_process("test.py", *shared, "--results_dir", str(tmp_path / "results"), capsys=capsys)
        assert tested.returncode == 0, tested.stderr[-3000:]
        scores[amp] = json.loads((tmp_path / "results" / amp / "test_latest" / "metrics.json").read_text())
    # bf16 training learns as fp32 training does: each halves the do-nothing baseline's error. How close
    # the two land depends on how the CPU rounds bf16 (after two steps an AMX CPU's eager bf16 loss is 7%
    # from fp32's, a Zen 4's 3%), so no ratio between them is asserted: it would hold on some CPUs only.
    for amp, score in scores.items():
        assert score["output_L1"] < 0.5 * score["identity_L1"], (amp, score)


def test_compiled_networks_save_reference_compatible_checkpoints(tmp_path):
    opt = TrainOptions().parse(["--dataroot", "unused", "--model", "pix2pix", "--netG", "resnet_6blocks", "--ngf", "8",
                                "--ndf", "8", "--compile", "--checkpoints_dir", str(tmp_path), "--name", "c"])
    m = create_model(opt, DistContext())
    m.setup(opt)
    engine = training_engine(m)  # compiles the networks beside the model's
    engine.save_networks("latest")
    saved = torch.load(tmp_path / "c" / "latest_net_G.pth", weights_only=True)
    assert saved.keys() == networks.define_G(3, 3, 8, "resnet_6blocks", "batch", use_dropout=True).state_dict().keys()
    assert not any("_orig_mod" in key for key in engine.shared_training_state()["networks"]["G"])


@pytest.mark.slow
def test_fast_path_trains_under_torchrun_and_resumes_exactly(paired_root, tmp_path):
    # pix2pix (instance norm under DDP): two networks to compile, not CycleGAN's four; the image
    # pool's exact resume under torchrun is tested in test_resume.py without the compile cost. One
    # process saves and resumes through the same code (test_resume.py), and compiles the same
    # networks (the tests above), so this torchrun run stands for both. The run continued is the
    # uninterrupted run's state in the middle of its second epoch (--save_by_iter keeps every state it
    # saved), which is what a run killed there leaves (test_resume.py kills torchrun's workers, without
    # the compile cost); the runs are 2 ranks without the launcher (helpers.run_two_ranks).
    # --compile_probe 0 (in COMPILED): compiled from the first step, so that both runs compile the same steps
    # (the probe picks by timing, and a run continued before it chose times again).
    flags = [*COMPILED, "--no_dropout", "--save_by_iter"]
    run_two_ranks(pix2pix(paired_root, tmp_path, "whole") + flags)
    # 8 images an epoch, 2 a step, a save every 3 images: after 12 images, 4 into the second epoch of 2
    middle = sorted((tmp_path / "whole").glob("iter_12_*"))
    assert {path.name for path in middle} == {"iter_12_net_G.pth", "iter_12_net_D.pth", "iter_12_train_state.pth"}
    (tmp_path / "cut").mkdir()
    for path in middle:
        shutil.copy(path, tmp_path / "cut" / path.name)
    continued = run_two_ranks(pix2pix(paired_root, tmp_path, "cut") + flags + ["--continue_train"])
    assert "epoch 2, 4 images into it" in continued.stdout
    assert_identical(final_weights(tmp_path / "cut"), final_weights(tmp_path / "whole"))
    lines, losses = logged_losses(tmp_path / "whole")  # finite losses at every logged step
    assert len(lines) == 8 and len(losses) == 8 * 4 and all(math.isfinite(loss) for loss in losses)


def logged_losses(folder: Path) -> tuple[list[str], list[float]]:
    """The step lines of the loss_log.txt in run folder `folder`, and every loss they give."""
    lines = [line for line in (folder / "loss_log.txt").read_text().splitlines() if line.startswith("(")]
    return lines, [float(value) for line in lines for value in line.split(")", 1)[1].split()[1::2]]
