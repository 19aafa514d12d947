"""--checkpoint_activations: the generators' residual blocks and U-Net levels keep only their input
during the forward pass and recompute their activations in the backward pass (torch.utils.checkpoint),
trading one more forward pass of those blocks for memory at high resolution.

`enable_activation_checkpointing(net)` swaps the classes of the blocks in place, as
`networks.make_instance_norm_channels_last_safe` does: the same parameters, the same state_dict
keys, the same outputs and gradients (tests/test_high_resolution.py). Two things would otherwise
differ when a block runs twice:
  - random draws (dropout): torch.utils.checkpoint replays the forward pass's RNG state;
  - buffers (batch norm's running statistics, updated by every training-mode forward pass): the
    recomputation restores the block's buffers after it, so they are updated once per step, as
    without checkpointing.
Without gradients (validation, test.py) the blocks run plainly.
"""
from __future__ import annotations

from contextlib import nullcontext

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from models.accumulation import buffers_kept
from models.networks import ResnetBlock, UnetSkipConnectionBlock


def _checkpointed(module: nn.Module, function, x: torch.Tensor) -> torch.Tensor:
    """`function(x)` with its activations recomputed in backward (when gradients are on)."""
    if not torch.is_grad_enabled():
        return function(x)
    return checkpoint(function, x, use_reentrant=False, preserve_rng_state=True,
                      context_fn=lambda: (nullcontext(), buffers_kept(module)))


class CheckpointedResnetBlock(ResnetBlock):
    """A ResnetBlock whose conv block is recomputed in backward."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + _checkpointed(self.conv_block, self.conv_block, x)


class CheckpointedUnetBlock(UnetSkipConnectionBlock):
    """A U-Net level below the outermost whose own layers are recomputed in backward: its down
    part (conv, norm) and its up part (conv, norm, dropout), each from its input; the levels inside
    it run as themselves (checkpointed in turn), so every layer is recomputed once. Each of the two
    parts starts with an in-place activation whose output the plain block shares with the skip
    connection or the inner level; it runs outside the checkpoint, whose saved input must not
    change before the recomputation."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        layers = list(self.model)
        # [downrelu, downconv, (downnorm), (submodule), uprelu, upconv, upnorm, (dropout)]
        up_start = next(i for i, layer in enumerate(layers) if isinstance(layer, nn.ReLU))
        inner = layers[up_start - 1] if isinstance(layers[up_start - 1], UnetSkipConnectionBlock) else None
        down = nn.Sequential(*layers[1:up_start - 1 if inner is not None else up_start])
        x = layers[0](x)
        h = _checkpointed(self.model, down, x)
        if inner is not None:
            h = inner(h)
        h = layers[up_start](h)
        return torch.cat([x, _checkpointed(self.model, nn.Sequential(*layers[up_start + 1:]), h)], 1)


def enable_activation_checkpointing(net: nn.Module) -> int:
    """Checkpoint every residual block and every U-Net level below the outermost of `net`, in place;
    returns how many blocks. Discriminators have neither and are left alone.

    Each level recomputes its own layers only (not the levels inside it), so a step costs one more
    forward pass of the generator at most."""
    count = 0
    for module in net.modules():
        if type(module) is ResnetBlock:
            module.__class__ = CheckpointedResnetBlock
            count += 1
        elif type(module) is UnetSkipConnectionBlock and not module.outermost:
            module.__class__ = CheckpointedUnetBlock
            count += 1
    return count
