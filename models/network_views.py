"""A model's networks as one use of them calls them: `NetworkViews`.

A model's attributes (`netG`, `netD_A`, ...) always hold the plain modules it built. Whoever runs the
model decides how each network is called and hands the model that choice as a `NetworkViews`:

    training (models/training/engine.py)   each network DDP-wrapped under torchrun, compiled with
                                           --compile (models/training/network_variants.py)
    inference (models/inference/application.py)        the generators padded to their size rule, in tiles or in
                                           sliding windows; the moving averages (--ema_decay) in
                                           validation; plain otherwise

so a model's `forward(nets)` reads `nets.G_A(x)`: "G_A, as this use calls it", while `self.netG_A` is
the plain module (its weights, its state_dict) wherever it is read.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

import torch


class NetworkViews(Mapping[str, Callable[..., torch.Tensor]]):
    """Network name (as in `model_names`: "G", "D_A", ...) -> the callable that runs it. Read-only;
    `views.G_A` and `views["G_A"]` are the same."""

    def __init__(self, views: Mapping[str, Callable[..., torch.Tensor]]) -> None:
        object.__setattr__(self, "_views", dict(views))
        # `views.G_A` is a plain attribute (no call per access in the step); __getattr__ names a missing one
        for name, view in views.items():
            if name.isidentifier() and not hasattr(type(self), name):
                object.__setattr__(self, name, view)

    def __getitem__(self, name: str) -> Callable[..., torch.Tensor]:
        try:
            return self._views[name]
        except KeyError:
            raise KeyError(f"no network {name!r} here; these are {', '.join(self._views)}") from None

    def __getattr__(self, name: str) -> Callable[..., torch.Tensor]:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError as err:
            raise AttributeError(err.args[0]) from None

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError("NetworkViews are read-only: build new ones with the networks to call")

    def __iter__(self) -> Iterator[str]:
        return iter(self._views)

    def __len__(self) -> int:
        return len(self._views)

    def __repr__(self) -> str:
        return f"NetworkViews({', '.join(f'{name}: {type(view).__name__}' for name, view in self._views.items())})"
