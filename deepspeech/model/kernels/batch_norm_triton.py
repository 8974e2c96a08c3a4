"""The masked batch norm's Triton kernels (``batch_norm.py`` is their autograd function).

A map ``x`` is ``[B, C, H, T]`` with any strides; its statistics count the frames where
the ``[B, T]`` mask is 1. Each program takes one channel and one fixed block of the
channel's ``B * H * T`` elements, so a channel's sums are partial sums in a fixed
tiling, added up afterwards in a fixed order: no atomics, the same bits every run.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _element(x_ptr, mask_ptr, c, block, B, H, T, stride_b, stride_c, stride_h, stride_t,
             BLOCK: tl.constexpr):
    """The block's elements of channel ``c``: their offsets, their mask weights (0 for
    frames past their utterance), and which of them exist."""
    k = block * BLOCK + tl.arange(0, BLOCK)
    inside = k < B * H * T
    b = k // (H * T)
    rest = k % (H * T)
    h = rest // T
    t = rest % T
    offsets = b * stride_b + c * stride_c + h * stride_h + t * stride_t
    weights = tl.load(mask_ptr + b * T + t, mask=inside, other=0.0)
    return offsets, weights, inside


@triton.jit
def masked_sums_kernel(x_ptr, mask_ptr, shift_ptr, sums_ptr, B, H, T,
                       stride_b, stride_c, stride_h, stride_t, blocks,
                       SQUARED: tl.constexpr, BLOCK: tl.constexpr):
    """``sums[c, block]``: the block's masked sum of ``x - shift[c]`` (squared with
    ``SQUARED``): the mean's numerator with a zero shift, the variance's with the mean."""
    c = tl.program_id(0)
    block = tl.program_id(1)
    offsets, weights, inside = _element(x_ptr, mask_ptr, c, block, B, H, T, stride_b,
                                        stride_c, stride_h, stride_t, BLOCK)
    x = tl.load(x_ptr + offsets, mask=inside, other=0.0).to(tl.float32)
    centered = x - tl.load(shift_ptr + c)
    if SQUARED:
        centered = centered * centered
    tl.store(sums_ptr + c * blocks + block, tl.sum(centered * weights, axis=0))


@triton.jit
def normalize_kernel(x_ptr, mask_ptr, mean_ptr, rstd_ptr, weight_ptr, bias_ptr, y_ptr, B, H, T,
                     stride_b, stride_c, stride_h, stride_t, BLOCK: tl.constexpr):
    """``y = (x - mean) * rstd * weight + bias`` for every element, padding included (the
    caller masks), written contiguous ``[B, C, H, T]`` in float32."""
    c = tl.program_id(0)
    block = tl.program_id(1)
    offsets, _, inside = _element(x_ptr, mask_ptr, c, block, B, H, T, stride_b, stride_c,
                                  stride_h, stride_t, BLOCK)
    x = tl.load(x_ptr + offsets, mask=inside, other=0.0).to(tl.float32)
    y = (x - tl.load(mean_ptr + c)) * tl.load(rstd_ptr + c) * tl.load(weight_ptr + c) \
        + tl.load(bias_ptr + c)
    k = block * BLOCK + tl.arange(0, BLOCK)
    b = k // (H * T)
    channels = tl.num_programs(0)
    tl.store(y_ptr + (b * channels + c) * H * T + k % (H * T), y, mask=inside)


@triton.jit
def gradient_sums_kernel(x_ptr, mask_ptr, dy_ptr, mean_ptr, rstd_ptr, sums_ptr, B, H, T,
                         stride_b, stride_c, stride_h, stride_t, blocks,
                         BLOCK: tl.constexpr):
    """``sums[0, c, block]``: the block's sum of ``dy``; ``sums[1, c, block]``: of
    ``dy * x_hat``. Over every element: padding's outputs depend on the affine too.
    ``dy`` is contiguous ``[B, C, H, T]``."""
    c = tl.program_id(0)
    block = tl.program_id(1)
    offsets, _, inside = _element(x_ptr, mask_ptr, c, block, B, H, T, stride_b, stride_c,
                                  stride_h, stride_t, BLOCK)
    x = tl.load(x_ptr + offsets, mask=inside, other=0.0).to(tl.float32)
    k = block * BLOCK + tl.arange(0, BLOCK)
    channels = tl.num_programs(0)
    dy = tl.load(dy_ptr + (k // (H * T) * channels + c) * H * T + k % (H * T), mask=inside,
                 other=0.0)
    x_hat = (x - tl.load(mean_ptr + c)) * tl.load(rstd_ptr + c)
    tl.store(sums_ptr + c * blocks + block, tl.sum(dy, axis=0))
    tl.store(sums_ptr + (channels + c) * blocks + block, tl.sum(dy * x_hat, axis=0))


@triton.jit
def input_gradient_kernel(x_ptr, mask_ptr, dy_ptr, mean_ptr, rstd_ptr, weight_ptr,
                          dy_sum_ptr, dy_x_hat_sum_ptr, count_ptr, dx_ptr, B, H, T,
                          stride_b, stride_c, stride_h, stride_t, BLOCK: tl.constexpr):
    """``dx = rstd * weight * (dy - m / n * (sum dy + x_hat * sum dy x_hat))``, with m the
    element's mask weight and n the count of valid elements: only valid elements moved
    the statistics. Written contiguous ``[B, C, H, T]``."""
    c = tl.program_id(0)
    block = tl.program_id(1)
    offsets, weights, inside = _element(x_ptr, mask_ptr, c, block, B, H, T, stride_b,
                                        stride_c, stride_h, stride_t, BLOCK)
    x = tl.load(x_ptr + offsets, mask=inside, other=0.0).to(tl.float32)
    k = block * BLOCK + tl.arange(0, BLOCK)
    channels = tl.num_programs(0)
    out = (k // (H * T) * channels + c) * H * T + k % (H * T)
    dy = tl.load(dy_ptr + out, mask=inside, other=0.0)
    rstd = tl.load(rstd_ptr + c)
    x_hat = (x - tl.load(mean_ptr + c)) * rstd
    share = weights / tl.load(count_ptr)
    dx = rstd * tl.load(weight_ptr + c) * (
        dy - share * (tl.load(dy_sum_ptr + c) + x_hat * tl.load(dy_x_hat_sum_ptr + c)))
    tl.store(dx_ptr + out, dx, mask=inside)
