"""Batch norm whose statistics cover the batches of all DDP processes (`--norm syncbatch`).

On CUDA this is PyTorch's `nn.SyncBatchNorm`. PyTorch's refuses to run on the CPU, so there
`CPUSyncBatchNorm` does the same with the gloo backend (`CPUSyncBatchNorm3d` for the volumes of
the 3-D network families). Both keep the parameters and buffers of the `BatchNorm2d` (`BatchNorm3d`)
they replace (the same objects), so checkpoints stay plain batch-norm ones and optimizers built
before the conversion remain valid.
"""
from __future__ import annotations

import torch
from torch import nn

from util import distributed


class _SyncBatchNormFunction(torch.autograd.Function):
    """Batch norm over the batch of all ranks, with the gradient of the global statistics.

    Forward all-reduces per-channel sum, sum of squares and count; backward all-reduces the
    per-channel sums of dy and dy*x_hat, which carry the cross-rank terms of d(loss)/dx.
    Parameter gradients stay local: DDP averages them like any other gradient.
    """

    @staticmethod
    def forward(ctx, x, weight, bias, eps: float):
        channels = x.shape[1]
        reduce_dims = [0] + list(range(2, x.dim()))
        count = torch.tensor([x.numel() / channels], dtype=x.dtype, device=x.device)
        stats = torch.cat([x.sum(reduce_dims), (x * x).sum(reduce_dims), count])
        distributed.all_reduce_sum_(stats)
        total = stats[-1]
        mean = stats[:channels] / total
        var = (stats[channels:2 * channels] / total - mean * mean).clamp_min(0)
        invstd = torch.rsqrt(var + eps)
        shape = [1, channels] + [1] * (x.dim() - 2)
        x_hat = (x - mean.view(shape)) * invstd.view(shape)
        ctx.save_for_backward(x_hat, weight, invstd, total)
        ctx.reduce_dims = reduce_dims
        ctx.shape = shape
        return x_hat * weight.view(shape) + bias.view(shape), mean, var * total / (total - 1).clamp_min(1)

    @staticmethod
    def backward(ctx, grad_out, _grad_mean, _grad_var):
        x_hat, weight, invstd, total = ctx.saved_tensors
        shape, dims = ctx.shape, ctx.reduce_dims
        sum_dy = grad_out.sum(dims)
        sum_dy_xhat = (grad_out * x_hat).sum(dims)
        grad_weight, grad_bias = sum_dy_xhat.clone(), sum_dy.clone()
        global_sums = distributed.all_reduce_sum_(torch.cat([sum_dy, sum_dy_xhat]))
        channels = sum_dy.numel()
        mean_dy = (global_sums[:channels] / total).view(shape)
        mean_dy_xhat = (global_sums[channels:] / total).view(shape)
        grad_x = (weight * invstd).view(shape) * (grad_out - mean_dy - x_hat * mean_dy_xhat)
        return grad_x, grad_weight, grad_bias, None


class _SynchronisedStatistics:
    """The forward pass of the CPU synchronised batch norms, before a BatchNorm2d or BatchNorm3d in
    the bases: the statistics of all ranks while training under DDP, that batch norm's otherwise."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and distributed.is_distributed()):
            return super().forward(x)
        y, mean, unbiased_var = _SyncBatchNormFunction.apply(x, self.weight, self.bias, self.eps)
        if self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked += 1
                momentum = (1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum)
                self.running_mean.mul_(1 - momentum).add_(mean.detach() * momentum)
                self.running_var.mul_(1 - momentum).add_(unbiased_var.detach() * momentum)
        return y


class CPUSyncBatchNorm(_SynchronisedStatistics, nn.BatchNorm2d):
    """BatchNorm2d whose training statistics cover the batches of all ranks (gloo, CPU).

    Behaves as BatchNorm2d in eval mode or in a single process.
    """


class CPUSyncBatchNorm3d(_SynchronisedStatistics, nn.BatchNorm3d):
    """BatchNorm3d (volumes) whose training statistics cover the batches of all ranks (gloo, CPU);
    the same function as CPUSyncBatchNorm, which reduces over every dimension but the channels."""


# the plain batch norm of each number of spatial dimensions -> its synchronised CPU twin
_SYNCED = {nn.BatchNorm2d: CPUSyncBatchNorm, nn.BatchNorm3d: CPUSyncBatchNorm3d}


def convert_sync_batchnorm(module: nn.Module, device: torch.device) -> nn.Module:
    """`module` with its batch-norm layers synchronised across ranks: PyTorch's on CUDA, ours on CPU."""
    if device.type == "cuda":
        return nn.SyncBatchNorm.convert_sync_batchnorm(module)
    plain = next((kind for kind in _SYNCED if isinstance(module, kind)), None)
    if plain is not None and not isinstance(module, _SynchronisedStatistics) and module.affine:
        synced = _SYNCED[plain](module.num_features, module.eps, module.momentum, module.affine,
                                module.track_running_stats)
        synced.weight, synced.bias = module.weight, module.bias  # the same Parameter objects
        synced.running_mean, synced.running_var = module.running_mean, module.running_var
        synced.num_batches_tracked = module.num_batches_tracked
        synced.train(module.training)
        return synced
    for name, child in module.named_children():
        module.add_module(name, convert_sync_batchnorm(child, device))
    return module
