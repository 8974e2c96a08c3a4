"""The CTC loss on a GPU, bitwise reproducible: two Triton kernels (``ctc_triton.py``)
and a matrix product; this module is their autograd function and its entry point.

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
from torch import Tensor

from deepspeech.data.dataset import longest_transcript
from deepspeech.device import capturing_graph
from deepspeech.model.kernels.ctc_triton import alpha_kernel, occupancy_kernel

BLANK = 0


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
        alpha_kernel[(batch,)](log_probs, log_probs.stride(0), log_probs.stride(1), lengths,
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
        occupancy_kernel[(batch,)](log_probs, log_probs.stride(0), log_probs.stride(1),
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
