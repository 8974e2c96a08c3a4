"""``execution.batch_norm: fused``: training batch norm over the valid frames in a few
Triton passes (``batch_norm_triton.py``) instead of a dozen element-wise kernels.

The torch form (``layers.normalize_valid_frames``) multiplies by the mask, sums, centres,
squares, sums again, scales and shifts, each a pass over the map, and autograd saves
and replays as many in backward; on the ds2 step these made ~32 ms of 302 on an H100.
Here forward reads the map three times (the mean, the variance around it, the output)
and backward twice (two sums, the input's gradient), with float32 statistics whatever
the map's dtype. Partial sums come in a fixed tiling and are added in a fixed order:
bitwise the same run to run, and equal to the torch form up to float rounding.
"""

from __future__ import annotations

import torch
import triton
from torch import Tensor, nn

from deepspeech.model.kernels.batch_norm_triton import (
    gradient_sums_kernel,
    input_gradient_kernel,
    masked_sums_kernel,
    normalize_kernel,
)

BLOCK = 1024
"""Elements of one channel per program: a partial sum's span."""


def fused_normalize_valid_frames(norm: nn.modules.batchnorm._BatchNorm, x: Tensor,
                                 mask: Tensor) -> Tensor:
    """``layers.normalize_valid_frames`` by the kernels: ``[B, C, H, T]`` maps normalized
    with the statistics of the frames where ``mask`` ``[B, T]`` is True, the running
    statistics updated as ``nn.BatchNorm`` does; float32 out."""
    weights = mask.to(torch.float32).contiguous()
    channels = x.shape[1]
    weight = norm.weight if norm.affine else torch.ones(channels, device=x.device)
    bias = norm.bias if norm.affine else torch.zeros(channels, device=x.device)
    y, mean, var, count = _MaskedBatchNorm.apply(x, weights, weight, bias, norm.eps)
    with torch.no_grad():
        norm.num_batches_tracked += 1
        factor = norm.momentum if norm.momentum is not None \
            else 1.0 / float(norm.num_batches_tracked)
        unbiased = var * (count / (count - 1).clamp_min(1))
        norm.running_mean.lerp_(mean, factor)
        norm.running_var.lerp_(unbiased, factor)
    return y


class _MaskedBatchNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, weights: Tensor, weight: Tensor, bias: Tensor,
                eps: float) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        batch, channels, height, frames = x.shape
        grid = (channels, triton.cdiv(batch * height * frames, BLOCK))
        geometry = (batch, height, frames, *x.stride())
        count = weights.sum() * height
        zeros = torch.zeros(channels, device=x.device)
        mean = _channel_sums(x, weights, zeros, grid, geometry, squared=False) / count
        var = _channel_sums(x, weights, mean, grid, geometry, squared=True) / count
        rstd = torch.rsqrt(var + eps)
        y = torch.empty(x.shape, device=x.device, dtype=torch.float32)
        normalize_kernel[grid](x, weights, mean, rstd, weight.float().contiguous(),
                               bias.float().contiguous(), y, *geometry, BLOCK=BLOCK)
        ctx.save_for_backward(x, weights, weight, mean, rstd, count)
        ctx.grid, ctx.geometry = grid, geometry
        ctx.mark_non_differentiable(mean, var, count)
        return y, mean, var, count

    @staticmethod
    def backward(ctx, dy: Tensor, *_: Tensor) -> tuple[Tensor | None, ...]:
        x, weights, weight, mean, rstd, count = ctx.saved_tensors
        grid, geometry = ctx.grid, ctx.geometry
        dy = dy.float().contiguous()
        sums = torch.empty(2, grid[0], grid[1], device=x.device)
        gradient_sums_kernel[grid](x, weights, dy, mean, rstd, sums, *geometry, grid[1],
                                   BLOCK=BLOCK)
        dy_sum, dy_x_hat_sum = sums.sum(dim=2)
        dx = torch.empty(x.shape, device=x.device, dtype=torch.float32)
        input_gradient_kernel[grid](x, weights, dy, mean, rstd, weight.float().contiguous(),
                                    dy_sum, dy_x_hat_sum, count.reshape(1), dx, *geometry,
                                    BLOCK=BLOCK)
        return dx.to(x.dtype), None, dy_x_hat_sum.to(weight.dtype), dy_sum.to(weight.dtype), None


def _channel_sums(x: Tensor, weights: Tensor, shift: Tensor, grid: tuple[int, int],
                  geometry: tuple[int, ...], squared: bool) -> Tensor:
    """Each channel's masked sum of ``x - shift`` (squared), from fixed partial sums."""
    partial = torch.empty(grid, device=x.device)
    masked_sums_kernel[grid](x, weights, shift, partial, *geometry, grid[1], SQUARED=squared,
                             BLOCK=BLOCK)
    return partial.sum(dim=1)
