"""--checkpoint_activations: the generators' residual blocks and U-Net levels keep only their input
during the forward pass and recompute their activations in the backward pass (torch.utils.checkpoint),
trading one more forward pass of those blocks for memory at high resolution.

`enable_activation_checkpointing(net, swaps)` swaps the classes of the blocks that their network
families declare checkpointable (`NetworkFamily.checkpointed_blocks`, e.g. the resnets' residual blocks
and the U-Nets' levels) in place, as `networks.make_instance_norm_channels_last_safe` does: the same parameters, the same state_dict
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
from typing import Mapping

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from models.accumulation import buffers_kept


def recompute_in_backward(module: nn.Module, function, x: torch.Tensor) -> torch.Tensor:
    """`function(x)` with its activations recomputed in backward (when gradients are on); the
    buffers of `module` are restored after the recomputation. For the checkpointed blocks of the
    network families."""
    if not torch.is_grad_enabled():
        return function(x)
    return checkpoint(function, x, use_reentrant=False, preserve_rng_state=True,
                      context_fn=lambda: (nullcontext(), buffers_kept(module)))


def enable_activation_checkpointing(net: nn.Module, swaps: Mapping[type, type]) -> int:
    """Swap every block of `net` whose class is a key of `swaps` (block class -> checkpointed
    class, `networks.checkpointed_blocks()`) for its checkpointed class, in place, where that class's
    `applies_to(block)` allows (a U-Net's outermost level does not: nothing is gained); returns how
    many blocks. Discriminators have none and are left alone.

    Each block recomputes its own layers only (not the blocks inside it), so a step costs one more
    forward pass of the generator at most."""
    count = 0
    for module in net.modules():
        swap = swaps.get(type(module))
        if swap is not None and getattr(swap, "applies_to", lambda block: True)(module):
            module.__class__ = swap
            count += 1
    return count
