"""The CTC loss on a GPU, bitwise reproducible: two Triton kernels and a matrix product.

One program per utterance walks its frames in order, all label positions of a
frame at once; the forward pass keeps every alpha, the backward pass runs the
beta recursion and writes how much probability passes through each label
position at each frame. Summing those positions into classes is a float64
matrix product with a one-hot matrix. Nothing is accumulated with atomics, so
the bits do not depend on thread timing, unlike PyTorch's CUDA CTC backward.
The recursion is in log space in float32, as PyTorch's kernels compute it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch import Tensor

from deepspeech.data.dataset import longest_transcript
from deepspeech.device import capturing_graph

BLANK = 0
MINUS_INF = tl.constexpr(float("-inf"))


def gpu_ctc_loss(log_probs: Tensor, lengths: Tensor, targets: Tensor, target_lengths: Tensor,
                 zero_infinity: bool = False, label_width: int | None = None) -> Tensor:
    """Per-utterance CTC loss ``[B]`` of ``[B, T, classes]`` float32 log-probabilities.

    Equal to ``F.ctc_loss(..., reduction="none")`` up to float rounding, with the
    same gradient convention (the gradient through the log-softmax that produced
    the log-probabilities). Blank is class 0; ``targets`` are concatenated.
    ``label_width``, at least the longest transcript, fixes the label dimension and
    so the shapes: with targets already on the GPU nothing is read back to the host,
    which a CUDA graph's capture needs (the caller then checks the lengths itself).
    """
    if not capturing_graph(lengths):
        # The kernels would silently compute a wrong loss for these; PyTorch's CTC refuses them.
        shortest, longest = (int(value) for value in torch.aminmax(lengths))
        if shortest < 1 or longest > log_probs.shape[1]:
            raise ValueError(f"CTC input lengths must lie in [1, {log_probs.shape[1]}] (the "
                             f"log-probabilities' frames), got {shortest} to {longest}")
    if label_width is None:  # from the transcripts where they are, on the host in training
        label_width = longest_transcript(target_lengths)
    device = log_probs.device
    extended = extended_targets(targets.to(device), target_lengths.to(device), label_width)
    skippable = torch.zeros_like(extended, dtype=torch.int8)
    skippable[:, 2:] = (extended[:, 2:] != BLANK) & (extended[:, 2:] != extended[:, :-2])
    return _GpuCTC.apply(log_probs.contiguous(), lengths.to(device).long(),
                         target_lengths.to(device).long(), extended, skippable, zero_infinity)


def extended_targets(targets: Tensor, target_lengths: Tensor,
                     label_width: int | None = None) -> Tensor:
    """``[B, 2 W + 1]`` label sequences with a blank before, between and after the labels,
    where W is ``label_width`` or else the longest transcript.

    Positions past an utterance's own ``2 L_b + 1`` hold blanks and are never read.
    """
    target_lengths = target_lengths.long()
    device = target_lengths.device
    if label_width is None:
        label_width = longest_transcript(target_lengths)
    starts = torch.cumsum(target_lengths, 0) - target_lengths
    offsets = torch.arange(label_width, device=device)
    inside = offsets < target_lengths[:, None]
    extended = torch.full((len(target_lengths), 2 * label_width + 1), BLANK, dtype=torch.long,
                          device=device)
    if targets.numel():
        index = (starts[:, None] + offsets).clamp(max=targets.numel() - 1)
        extended[:, 1::2] = torch.where(inside, targets.long()[index], BLANK)
    return extended


@triton.jit
def _log_add3(a, b, c):
    top = tl.maximum(tl.maximum(a, b), c)
    shift = tl.where(top == MINUS_INF, 0.0, top)
    total = tl.exp(a - shift) + tl.exp(b - shift) + tl.exp(c - shift)
    return tl.where(top == MINUS_INF, MINUS_INF, shift + tl.log(total))


@triton.jit
def _utterance(lengths, target_lengths, extended, positions, BLOCK: tl.constexpr):
    """This program's utterance: its frames, its used label positions and their labels."""
    utterance = tl.program_id(0)
    s = tl.arange(0, BLOCK)
    frames = tl.load(lengths + utterance)
    used = 2 * tl.load(target_lengths + utterance) + 1
    inside = s < used
    label = tl.load(extended + utterance * positions + s, mask=inside, other=0)
    return utterance, s, frames, used, inside, label


@triton.jit
def _alpha_kernel(log_probs, stride_batch, stride_frame, lengths, target_lengths, extended,
                  skippable, alpha, nll, max_frames, positions, BLOCK: tl.constexpr):
    utterance, s, frames, used, inside, label = _utterance(lengths, target_lengths, extended,
                                                           positions, BLOCK)
    skip = tl.load(skippable + utterance * positions + s, mask=inside, other=0) != 0
    emissions = log_probs + utterance * stride_batch + label
    rows = alpha + utterance * max_frames * positions

    emit = tl.load(emissions, mask=inside, other=MINUS_INF)
    current = tl.where(s < 2, emit, MINUS_INF)
    tl.store(rows + s, current, mask=inside)
    # Every program steps through the batch's longest utterance; a shorter one keeps
    # its last alpha, which the loss below reads. (`while`, not `range`: Triton's
    # interpreter, which runs the tests on CPUs, cannot take a runtime `range` bound.)
    t = 1
    while t < max_frames:
        # every position of frame t - 1 is stored before any is read shifted
        tl.debug_barrier()
        previous = rows + (t - 1) * positions
        one_back = tl.load(previous + s - 1, mask=inside & (s >= 1), other=MINUS_INF,
                           cache_modifier=".cg")
        two_back = tl.load(previous + s - 2, mask=inside & skip, other=MINUS_INF,
                           cache_modifier=".cg")
        emit = tl.load(emissions + t * stride_frame, mask=inside, other=MINUS_INF)
        running = t < frames
        current = tl.where(running, _log_add3(current, one_back, two_back) + emit, current)
        tl.store(rows + t * positions + s, current, mask=inside & running)
        t += 1

    last = tl.max(tl.where(s == used - 1, current, MINUS_INF), axis=0)
    before_last = tl.max(tl.where(s == used - 2, current, MINUS_INF), axis=0)
    # A tensor, not the constexpr itself: Triton 3.8's interpreter cannot take a constexpr
    # argument into tl.where inside the called function.
    nothing = tl.full([], MINUS_INF, last.dtype)
    tl.store(nll + utterance, -_log_add3(last, before_last, nothing))


@triton.jit
def _occupancy_kernel(log_probs, stride_batch, stride_frame, lengths, target_lengths, extended,
                      skippable, alpha, nll, betas, occupancy, max_frames, positions,
                      BLOCK: tl.constexpr):
    utterance, s, frames, used, inside, label = _utterance(lengths, target_lengths, extended,
                                                           positions, BLOCK)
    # a label reached from two positions below: the skip seen from the position it skips from
    skip_up = tl.load(skippable + utterance * positions + s + 2, mask=(s + 2) < used,
                      other=0) != 0
    log_likelihood = -tl.load(nll + utterance)
    emissions = log_probs + utterance * stride_batch + label
    alphas = alpha + utterance * max_frames * positions
    out = occupancy + utterance * max_frames * positions
    pair = betas + utterance * 2 * BLOCK  # beta of two frames, alternating

    current = tl.full([BLOCK], MINUS_INF, tl.float32)
    t = max_frames - 1
    while t >= 0:
        # beta of frame t + 1 is whole before it is read shifted; the other half of
        # the pair, written next, was last read before the previous barrier
        tl.debug_barrier()
        following = pair + ((t + 1) % 2) * BLOCK
        one_ahead = tl.load(following + s + 1, mask=((s + 1) < used) & (t + 1 < frames),
                            other=MINUS_INF, cache_modifier=".cg")
        two_ahead = tl.load(following + s + 2, mask=skip_up & (t + 1 < frames),
                            other=MINUS_INF, cache_modifier=".cg")
        emit = tl.load(emissions + t * stride_frame, mask=inside, other=MINUS_INF)
        last_frame = tl.where(s >= used - 2, emit, MINUS_INF)
        current = tl.where(t == frames - 1, last_frame,
                           _log_add3(current, one_ahead, two_ahead) + emit)
        running = t < frames
        tl.store(pair + (t % 2) * BLOCK + s, current, mask=inside & running)
        a = tl.load(alphas + t * positions + s, mask=inside & running, other=MINUS_INF)
        tl.store(out + t * positions + s, tl.exp(a + current - emit - log_likelihood),
                 mask=inside & running)
        t -= 1


def _launch_shape(positions: int) -> tuple[int, int]:
    block = triton.next_power_of_2(positions)
    return block, 4 if block <= 512 else 8


class _GpuCTC(torch.autograd.Function):
    @staticmethod
    def forward(ctx, log_probs: Tensor, lengths: Tensor, target_lengths: Tensor,
                extended: Tensor, skippable: Tensor, zero_infinity: bool) -> Tensor:
        batch, frames, _ = log_probs.shape
        positions = extended.shape[1]
        block, warps = _launch_shape(positions)
        alpha = log_probs.new_empty(batch, frames, positions)
        nll = log_probs.new_empty(batch)
        _alpha_kernel[(batch,)](log_probs, log_probs.stride(0), log_probs.stride(1), lengths,
                                target_lengths, extended, skippable, alpha, nll, frames,
                                positions, BLOCK=block, num_warps=warps)
        impossible = torch.isinf(nll)
        ctx.save_for_backward(log_probs, lengths, target_lengths, extended, skippable, alpha,
                              nll, impossible)
        ctx.zero_infinity = zero_infinity
        if zero_infinity:
            return torch.where(impossible, 0.0, nll)
        return nll

    @staticmethod
    def backward(ctx, grad_loss: Tensor):
        log_probs, lengths, target_lengths, extended, skippable, alpha, nll, impossible = (
            ctx.saved_tensors)
        batch, frames, classes = log_probs.shape
        positions = extended.shape[1]
        block, warps = _launch_shape(positions)
        occupancy = torch.zeros_like(alpha)  # frames past an utterance's end stay 0
        betas = log_probs.new_empty(batch, 2, block)
        _occupancy_kernel[(batch,)](log_probs, log_probs.stride(0), log_probs.stride(1),
                                    lengths, target_lengths, extended, skippable, alpha, nll,
                                    betas, occupancy, frames, positions, BLOCK=block,
                                    num_warps=warps)
        one_hot = F.one_hot(extended, classes).double()  # [B, S, classes]
        per_class = torch.bmm(occupancy.double(), one_hot).float()
        running = (torch.arange(frames, device=log_probs.device)[None, :]
                   < lengths[:, None])[:, :, None]
        gradient = torch.where(running, log_probs.exp() - per_class, 0.0)
        if ctx.zero_infinity:
            gradient = torch.where(impossible[:, None, None], 0.0, gradient)
        return gradient * grad_loss[:, None, None], None, None, None, None, None
