"""Exponential moving averages of the generators' weights (`--ema_decay`).

After every training step each generator's average moves towards its current weights:
`ema = decay * ema + (1 - decay) * weights` (PyTorch's `torch.optim.swa_utils.AveragedModel` with
`get_ema_multi_avg_fn`; the first step copies the weights). Averaged generators often translate
more steadily than the last weights of a GAN run. Only weights are averaged; buffers (batch-norm
running statistics) follow the trained generator. The weights are identical on all DDP ranks, so
their averages are too. Saved as `<label>_ema_net_<name>.pth` in the reference's format, so that
`test.py --epoch latest_ema` applies them.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from util import distributed


class GeneratorEMA:
    def __init__(self, generators: dict[str, nn.Module], decay: float) -> None:
        self.decay = decay
        self.averages = {name: AveragedModel(distributed.unwrap(net), multi_avg_fn=get_ema_multi_avg_fn(decay),
                                             use_buffers=False)
                         for name, net in generators.items()}

    @torch.no_grad()
    def update(self, generators: dict[str, nn.Module]) -> None:
        """Move each average towards the generator's current weights (after a training step)."""
        for name, average in self.averages.items():
            average.update_parameters(distributed.unwrap(generators[name]))

    def networks(self) -> dict[str, nn.Module]:
        """The averaged generators, as plain networks of the generators' architecture."""
        return {name: average.module for name, average in self.averages.items()}

    def state_dict(self) -> dict:
        return {name: {k: v.detach().cpu() for k, v in average.state_dict().items()}
                for name, average in self.averages.items()}

    def load_state_dict(self, state: dict) -> None:
        for name, average in self.averages.items():
            average.load_state_dict(state[name])
