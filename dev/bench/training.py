"""The model, options and batches of a measurement, built as train.py builds them."""
from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Callable

import torch

from bench.environment import ROOT
from bench.flops import count_network_flops


def load_size_for(size: int) -> int:
    """The reference's 286/256 ratio between --load_size and --crop_size."""
    return round(size * 286 / 256)


def build_options(spec: dict, dataroot: str | None = None):
    """train.py's options for a job spec (model, size, batch, device, speed settings, extra_args)."""
    from options.train_options import TrainOptions
    size = int(spec["size"])
    from bench.plan import STEP_ONLY_MODELS, VOLUME_MODELS
    model_flags = STEP_ONLY_MODELS.get(spec["model"], ["--model", spec["model"]])
    argv = ["--dataroot", dataroot or str(ROOT), *model_flags, "--name", "benchmark",
            "--checkpoints_dir", spec.get("checkpoints_dir") or tempfile.mkdtemp(prefix="bench_ckpt_"),
            "--crop_size", str(size), "--load_size", str(load_size_for(size)),
            "--batch_size", str(spec.get("batch", 1)), "--seed", "0", "--device", spec.get("device", "auto"),
            "--display_id", "0", "--amp", spec.get("amp", "none")]
    argv += [flag for key, flag in (("channels_last", "--channels_last"), ("compile", "--compile"),
                                    ("fused_adam", "--fused_adam")) if spec.get(key)]
    if spec.get("compile"):  # compiled from the first step: the benchmark times the compiled networks
        argv += ["--compile_probe", "0"]
    if spec["model"] in VOLUME_MODELS:
        argv += ["--patch_size", str(size)]
    argv += list(spec.get("extra_args", []))
    return TrainOptions().parse(argv)


@dataclass
class Trainee:
    """What a benchmark trains: `model` (its losses and networks) and `step(batch)`, one training step
    on a batch as train.py's loop takes it."""

    model: Any
    step: Callable[[dict], None]


def build_model(opt, ctx, straightforward: bool = False) -> Trainee:
    """The model and its training engine as train.py builds them, or (`straightforward`) the step
    written plainly."""
    from models import create_model
    from models.training.engine import TrainingEngine
    from util.seeding import choose_kernels, seed_everything
    seed_everything(0)
    choose_kernels(opt.deterministic, opt.preprocess)  # as train.py does: cuDNN autotuning for fixed sizes
    if straightforward:
        from straightforward_step import build_straightforward
        plain = build_straightforward(opt, ctx.device)

        def plain_step(batch: dict) -> None:
            plain.set_input(batch)
            plain.optimize_parameters()
        return Trainee(plain, plain_step)
    model = create_model(opt, ctx, 0)
    model.setup(opt, first_batch=synthetic_batch(opt, 1, seed=2))  # a model may size parts from it (CUT's netF)
    engine = TrainingEngine(model, opt, ctx)
    return Trainee(model, lambda batch: engine.train_step([batch]))


def synthetic_batch(opt, batch: int, seed: int = 0) -> dict:
    """Images in [-1, 1] shaped as the datasets deliver them (on the CPU, as from the loader); volumes
    (a volume dataset mode) of --patch_size."""
    generator = torch.Generator().manual_seed(seed)
    sides = tuple(opt.patch_size) if hasattr(opt, "patch_size") else (opt.crop_size, opt.crop_size)

    def images(channels: int) -> torch.Tensor:
        return torch.rand(batch, channels, *sides, generator=generator) * 2 - 1

    a_nc, b_nc = (opt.input_nc, opt.output_nc) if opt.direction == "AtoB" else (opt.output_nc, opt.input_nc)
    batch_images = {"A": images(a_nc), "B": images(b_nc), "A_paths": [f"synthetic_A_{i}" for i in range(batch)],
                    "B_paths": [f"synthetic_B_{i}" for i in range(batch)]}
    if getattr(opt, "second_input", False):  # --model sb's second input image (data/unaligned_dataset.py)
        side = "B" if opt.direction == "BtoA" else "A"
        batch_images[side + "2"] = images(batch_images[side].shape[1])
    return batch_images


def count_step_flops(trainee: Trainee, opt) -> tuple[int, dict]:
    """FLOPs of one training step per image: the total and {network: {"forward": .., "backward": ..}}
    (conv and matmul FLOPs are per image, so a batch of b costs exactly b times this). Counted on a
    batch of one image, or of --batch_size where a model needs more (BicycleGAN's two halves: the mean
    over its images)."""
    batch = opt.batch_size
    images = synthetic_batch(opt, batch, seed=1)
    total, by_network = count_network_flops(lambda: trainee.step(images), trainee.model.named_networks())
    return total // batch, {net: {phase: count // batch for phase, count in phases.items()}
                            for net, phases in by_network.items()}


def check_losses_finite(model) -> None:
    """A configuration that trains on NaN is broken, not fast: fail its measurement."""
    losses = {name: float(value) for name, value in model.get_current_losses().items()}
    broken = [name for name, value in losses.items() if not math.isfinite(value)]
    if broken:
        raise RuntimeError(f"non-finite losses after the timed steps ({', '.join(broken)}): this configuration "
                           f"does not train correctly, so its time is not reported")


def make_context(device: str, threads: int | None = None):
    """A single-process DistContext on the device train.py would pick; `threads` compute threads."""
    from util.distributed import DistContext, pick_device
    if threads:
        torch.set_num_threads(int(threads))
    return DistContext(device=pick_device(device))


def common_fields(device: torch.device) -> dict:
    """Fields every job's result carries."""
    return {"device": str(device), "threads": torch.get_num_threads(),
            "load_avg_end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}
