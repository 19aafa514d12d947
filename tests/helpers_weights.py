"""The weights two runs end with, compared: bit for bit (a resumed run and the uninterrupted one), or, for
runs whose arithmetic differs only in the order of its sums (N processes and one with N x the batch,
micro-batches and one batch), value by value within float64's rounding wherever the arithmetic determines
the value (`assert_trained_alike`, the one judge of every such test)."""
from __future__ import annotations

import contextlib
import json
import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from conftest import train_on
from data import create_dataset
from models import create_model
from util.distributed import DistContext
from util.frozen_options import FrozenOptions


def weights(run_dir: Path, epoch: str = "latest") -> dict[str, dict[str, torch.Tensor]]:
    """The `epoch` checkpoints of the run in `run_dir`: file name -> state dict (none found: empty)."""
    return {path.name: torch.load(path, weights_only=True) for path in sorted(run_dir.glob(f"{epoch}_net_*.pth"))}


def final_weights(run_dir: Path) -> dict[str, dict[str, torch.Tensor]]:
    """The latest checkpoints of the run in `run_dir`: file name -> state dict; there must be some."""
    found = {p.name: torch.load(p, weights_only=True) for p in sorted(run_dir.glob("latest_net_*.pth"))}
    assert found, f"no checkpoints in {run_dir}"
    return found


def assert_identical(a: dict, b: dict) -> None:
    """The checkpoints `a` and `b` (file -> state dict) hold the same keys and values, bit for bit."""
    assert a.keys() == b.keys()
    for net in a:
        assert a[net].keys() == b[net].keys()
        for key in a[net]:
            assert torch.equal(a[net][key], b[net][key]), f"{net} {key} differs"


def assert_same_weights(a: dict, b: dict, rtol: float = 1e-6, atol: float = 1e-7, bounds: dict | None = None) -> None:
    """Every value of the checkpoints `a` and `b` (file -> state dict) within rtol/atol, but those that
    `bounds` (file -> {key: largest difference allowed}) bounds otherwise; integers equal."""
    assert a.keys() == b.keys() and a
    for net in a:
        assert a[net].keys() == b[net].keys(), net
        for key, value in a[net].items():
            if not value.is_floating_point():
                assert torch.equal(value, b[net][key]), f"{net} {key}"
                continue
            difference = (value - b[net][key]).abs().max().item()
            bound = (bounds or {}).get(net, {}).get(key)
            if bound is not None:
                assert value.isfinite().all() and difference <= bound, \
                    f"{net} {key}: differs by {difference:.3g} > {bound:.3g}"
            else:
                assert torch.allclose(value, b[net][key], rtol=rtol, atol=atol), \
                    f"{net} {key}: max diff {difference:.3g}"


# ----------------------------------------------------------------------------- runs whose arithmetic differs
# N processes and one, or micro-batches and one batch, compute the same sums in another order: in
# float64 (--dtype float64; unit roundoff 1.1e-16) their gradients differ by rounding, ~1e-16 of their
# size. Adam turns a gradient into a step of at most c * lr (adam_reach), a smooth function of the
# gradient where the gradient stands above its rounding, so such weights end alike in both runs: to
# 1e-12 and less in CycleGAN, pix2pix, CUT, BicycleGAN and the volumes, up to 2e-10 in the latent-code
# model of tests/test_latent_model.py (measured on a Zen 4 with AVX-512 and with AVX2 forced; a float32
# run would differ by ~1e-7). rtol 1e-6 / atol 1e-7 leave a margin of 500 over the worst, while a DDP that computed
# another gradient in even one step moves some weight by a sizeable fraction of lr (2e-4). But where the
# gradient is zero in exact arithmetic, rounding is all there is, and Adam, which divides by the
# gradient's own size, turns it into steps of up to c * lr in either run (measured: 1e-8 to 5e-7 apart
# on biases ~1e-7): a value the arithmetic does not determine, so it is bounded only by how far Adam can
# move it. That is a parameter on which no output of its network depends: a convolution's bias followed by
# an instance norm (the norm subtracts each channel's mean over the image, which removes any constant the
# bias adds), and a layer whose output is such a constant (UNSB's discriminators add the time index's
# embedding, one number per channel, to a convolution's output before its norm). A parameter that no
# gradient reaches at all (UNSB's unused layers, frozen) is not moved in either run: it must be equal, bit
# for bit.
def tensors_in(value: object) -> list[torch.Tensor]:
    """The tensors in `value`: itself, or those in the (nested) tuples, lists and dict values it holds."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        return [tensor for item in value for tensor in tensors_in(item)]
    return []


def copied(value: object) -> object:
    """`value` with each tensor it holds (in nested tuples, lists and dicts) replaced by a detached copy."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {key: copied(item) for key, item in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(copied(item) for item in value)
    return value


Call = tuple[tuple, dict]  # the positional and keyword arguments of one call of a network


@contextlib.contextmanager
def calls_recorded(nets: Mapping[str, nn.Module], most: int = 8) -> Iterator[dict[str, list[Call]]]:
    """While the block runs, the first `most` calls of each network of `nets` (name -> network) are recorded
    (a forward pre-hook): the dict it gives maps each name to its calls' arguments, copied as they came."""
    calls: dict[str, list[Call]] = {name: [] for name in nets}

    def recorder(name: str) -> Callable:
        def hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
            if len(calls[name]) < most:
                calls[name].append((copied(args), copied(kwargs)))
        return hook

    handles = [net.register_forward_pre_hook(recorder(name), with_kwargs=True) for name, net in nets.items()]
    try:
        yield calls
    finally:
        for handle in handles:
            handle.remove()


@contextlib.contextmanager
def gradients_recorded(nets: Mapping[str, nn.Module]) -> Iterator[dict[str, dict[str, float]]]:
    """While the block runs, the largest |gradient| each parameter of `nets` (name -> network) is given is
    recorded (a post-accumulate-grad hook on each parameter that requires one): the dict it gives maps each
    name to {parameter name: that largest value}; a parameter given none is not in it."""
    largest: dict[str, dict[str, float]] = {name: {} for name in nets}

    def recorder(name: str, key: str) -> Callable:
        def hook(parameter: torch.Tensor) -> None:
            value = parameter.grad.abs().max().item() if parameter.grad.numel() else 0.0
            largest[name][key] = max(largest[name].get(key, 0.0), value)
        return hook

    handles = [parameter.register_post_accumulate_grad_hook(recorder(name, key))
               for name, net in nets.items() for key, parameter in net.named_parameters() if parameter.requires_grad]
    try:
        yield largest
    finally:
        for handle in handles:
            handle.remove()


def parameters_without_influence(net: nn.Module, calls: Sequence[Call],
                                 candidates: Iterable[str] | None = None) -> set[str]:
    """The names of `net`'s floating-point parameters (of `candidates`; default: all) on which none of its
    outputs depends, for the arguments of `calls`: in eval mode (so that a batch norm's running statistics
    stand as at inference, and no dropout), the parameters are moved by random numbers of the order of 1
    (far beyond the initial weights, ~0.02) and the outputs compared with those before: the same to within sqrt(eps) of
    their size (1.5e-8 in float64, far above the rounding such a move leaves, far below what any dependence
    makes of it) is none. All candidates are moved together first (where none has any influence, one pass
    says so), else each alone. It follows whatever the forward code does between the layers. Python's,
    NumPy's and torch's random streams, the parameters and the train/eval mode are left as they were; no
    calls, nothing found."""
    parameters = dict(net.named_parameters())
    names = [name for name in (parameters if candidates is None else candidates)
             if parameters[name].is_floating_point()]

    def outputs() -> list[torch.Tensor]:
        found = []
        for args, kwargs in calls:
            torch.manual_seed(0)  # the same draws in every pass (CUT's F samples its patches)
            found += tensors_in(net(*args, **kwargs))
        return found

    def unmoved_by(moving: list[str], before: list[torch.Tensor], size: float) -> bool:
        kept = {name: parameters[name].detach().clone() for name in moving}
        generator = torch.Generator().manual_seed(0)
        for name in moving:
            parameters[name].add_(torch.randn(parameters[name].shape, generator=generator, dtype=kept[name].dtype))
        moved = outputs()
        for name in moving:
            parameters[name].copy_(kept[name])
        return all((a - b).abs().max().item() <= torch.finfo(a.dtype).eps ** 0.5 * size
                   for a, b in zip(moved, before) if a.numel())

    if not calls or not names:
        return set()
    training = net.training
    net.eval()
    try:
        with torch.no_grad(), random_streams_kept():
            before = outputs()
            size = max((tensor.abs().max().item() for tensor in before if tensor.numel()), default=0.0)
            if unmoved_by(names, before, size):
                return set(names)
            return {name for name in names if unmoved_by([name], before, size)}
    finally:
        net.train(training)


class Undetermined(NamedTuple):
    """The parameters of one network whose trained values the arithmetic does not fix as it fixes the
    others': `without_influence` move by rounding alone (within Adam's reach), `untrained` do not move."""
    without_influence: frozenset[str]
    untrained: frozenset[str]


@contextlib.contextmanager
def random_streams_kept() -> Iterator[None]:
    """Python's, NumPy's and torch's (CPU) global random streams are as they were after the block."""
    python_state, numpy_state = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng(devices=[]):
            yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)


def undetermined_weights(opt: FrozenOptions) -> dict[str, Undetermined]:
    """Network name -> its Undetermined parameters, for the model `opt` (a run's training options) trains,
    seen in one training step of the untrained model (its data-dependent networks built from the batch, as
    train.py builds them) on the first batch of the run's data: the parameters on which no output of the
    calls the step made of the network depends (parameters_without_influence; tried where the step's
    gradient of a parameter was ~0), and those the step leaves as they were (no gradient reached them).
    On the CPU, eager, on at most 2 images (what depends on what does not change with the device,
    --compile, --amp or the batch); the random streams are left alone."""
    opt = opt.replaced(device="cpu", compile=False, amp="none", num_threads=0, batch_size=min(opt.batch_size, 2))
    with random_streams_kept():
        torch.manual_seed(0)
        loader = create_dataset(opt, seed=0)
        loader.set_epoch(1)
        batch = next(iter(loader))
        model = create_model(opt, DistContext())
        model.setup(opt, first_batch=batch)
        nets = model.named_networks()
        before = {name: {key: p.detach().clone() for key, p in net.named_parameters()} for name, net in nets.items()}
        with calls_recorded(nets) as calls, gradients_recorded(nets) as largest:
            train_on(model, batch)
    found = {}
    for name, net in nets.items():
        # A gradient that is all rounding (~1e-16 of the terms it sums) stands 1e-6 below the network's
        # largest by far: the others depend on their parameter; only these are tried
        top = max(largest[name].values(), default=0.0)
        candidates = [key for key, _ in net.named_parameters() if largest[name].get(key, 0.0) <= 1e-6 * top]
        found[name] = Undetermined(
            frozenset(parameters_without_influence(net, calls[name], candidates)),
            frozenset(key for key, p in net.named_parameters() if torch.equal(p, before[name][key])))
    return found


def adam_reach(run_dir: Path) -> float:
    """How far Adam can have moved any weight of the run in `run_dir` from where it started: its steps x
    its initial lr x c, c = max(1, (1 - beta1) / sqrt(1 - beta2)), the bound on one step's update of
    Kingma & Ba (2015, section 2.1); from the optimizers' states in its training state (the schedules
    only lower the lr)."""
    state = torch.load(run_dir / "latest_train_state.pth", weights_only=True)
    reach = 0.0
    for optimizer in state["model"]["optimizers"]:
        steps = max((float(param["step"]) for param in optimizer["state"].values()), default=0.0)
        for group in optimizer["param_groups"]:
            beta1, beta2 = group["betas"]
            one_step = group.get("initial_lr", group["lr"]) * max(1.0, (1 - beta1) / (1 - beta2) ** 0.5)
            reach = max(reach, steps * one_step)
    return reach


_undetermined: dict[str, dict[str, Undetermined]] = {}  # train_opt.json's text -> undetermined_weights


def assert_trained_alike(run_one: Path, run_two: Path, epoch: str = "latest") -> None:
    """The `epoch` checkpoints of two float64 runs of one model whose arithmetic differs only in the order
    of its sums (see above) hold the same weights: rtol 1e-6 / atol 1e-7, but the parameters on which no
    output depends, which differ by no more than Adam can have moved them in both runs together, and those
    no gradient reaches, which are equal (undetermined_weights, from `run_one`'s options)."""
    options = (run_one / "train_opt.json").read_text()
    opt = FrozenOptions(**json.loads(options)).freeze()
    assert opt.dtype == "float64", "the tolerances are float64's"
    if options not in _undetermined:
        _undetermined[options] = undetermined_weights(opt)
    reach = adam_reach(run_one) + adam_reach(run_two)
    a, b = weights(run_one, epoch), weights(run_two, epoch)
    bounds = {}
    for file in a:
        found = _undetermined[options].get(file.split("_net_")[-1].removesuffix(".pth"))
        if found is not None:  # (a file of no network of the model: every value compared within rtol/atol)
            bounds[file] = {**dict.fromkeys(found.without_influence, reach), **dict.fromkeys(found.untrained, 0.0)}
    assert_same_weights(a, b, bounds=bounds)
