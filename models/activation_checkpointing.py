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
    """A U-Net level below the outermost, recomputed in backward (the outermost one's output is the
    generator's output, which the losses keep anyway)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The level's first layer is an in-place LeakyReLU on its input, and the skip connection
        # takes the result (as in the plain block); run it outside the checkpoint, whose saved
        # input must not change before the recomputation.
        x = self.model[0](x)
        rest = self.model[1:]
        return torch.cat([x, _checkpointed(self.model, rest, x)], 1)


def enable_activation_checkpointing(net: nn.Module) -> int:
    """Checkpoint every residual block and every U-Net level below the outermost of `net`, in place;
    returns how many blocks. Discriminators have neither and are left alone.

    U-Net levels nest, so the recomputation of a level runs the checkpointed levels inside it:
    backward holds the activations of one level at a time (and the inputs of the levels around it),
    at the cost of recomputing level k k times. The deeper levels have a quarter of the pixels of
    the one above, so the extra work stays a fraction of one forward pass."""
    count = 0
    for module in net.modules():
        if type(module) is ResnetBlock:
            module.__class__ = CheckpointedResnetBlock
            count += 1
        elif type(module) is UnetSkipConnectionBlock and not module.outermost:
            module.__class__ = CheckpointedUnetBlock
            count += 1
    return count
