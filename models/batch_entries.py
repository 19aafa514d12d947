"""What a model reads from a batch, checked where it reads it: a dataset of the user's own
(`--dataset_mode mypkg.my_dataset`) whose items lack an entry, or hold images of another shape, is
named in one paragraph instead of failing deep inside a network."""
from __future__ import annotations

from typing import Any

import torch

from data import find_dataset_using_name, spatial_dims
from util.errors import UserError


def paired_batch(batch: dict, opt: Any, model: str) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """(model input, target, input paths) of a collated batch following --direction: the input has
    --input_nc channels and the target --output_nc (N x C x H x W tensors, N x C x D x H x W for volumes);
    the paths are a list."""
    forward = opt.direction == "AtoB"
    source, target, paths = ("A", "B", "A_paths") if forward else ("B", "A", "B_paths")
    dims = spatial_dims(opt)
    sides = "D x H x W" if dims == 3 else "H x W"
    kind = "volume" if dims == 3 else "image"
    reads = f"--model {model} reads A, B (N x C x {sides} {kind} tensors) and {paths} (--direction {opt.direction})"
    missing = [key for key in (source, target, paths) if key not in batch]
    if missing:
        raise UserError(f"{_dataset(opt)} gives items without {', '.join(map(repr, missing))} (they hold "
                        f"{', '.join(map(repr, batch)) or 'nothing'}); {reads}. Return them from its __getitem__ "
                        f"(docs/extending.md, \"A dataset mode\").")
    for key, channels, flag in ((source, opt.input_nc, "--input_nc"), (target, opt.output_nc, "--output_nc")):
        value = batch[key]
        if not isinstance(value, torch.Tensor) or value.ndim != 2 + dims or value.shape[1] != channels:
            shape = tuple(value.shape[1:]) if isinstance(value, torch.Tensor) else type(value).__name__
            raise UserError(f"{_dataset(opt)} gives {key!r} as {shape} per item, but {flag} {channels} asks for "
                            f"{channels} x {sides} {kind} tensors; {reads}. Make __getitem__ return such tensors, or "
                            f"pass the {flag} your {kind}s have.")
    return batch[source], batch[target], batch[paths]


def _dataset(opt: Any) -> str:
    return f"--dataset_mode {opt.dataset_mode} ({find_dataset_using_name(opt.dataset_mode).__name__})"
