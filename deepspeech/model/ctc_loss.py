"""The CTC loss, summed over utterances, computed where it is deterministic.

PyTorch's CUDA CTC backward accumulates gradients with atomic adds, so its
bits change from run to run (``torch.use_deterministic_algorithms`` refuses
it), and cuDNN's deterministic CTC takes only batches whose utterances all
have the same length, which bucketed batches of real speech never do. The CPU
kernel is deterministic, so CPU training keeps it; on a GPU the loss is our
own Triton kernels (:mod:`deepspeech.model.kernels.ctc`). Sending the
log-probabilities to the CPU kernel instead, as GPU training first did, cost
most of a Deep Speech 2 step on an H100 (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor


def ctc_loss_sum(log_probs: Tensor, lengths: Tensor, targets: Tensor, target_lengths: Tensor,
                 zero_infinity: bool = False, label_width: int | None = None) -> Tensor:
    """Float32 CTC loss of ``[B, T, classes]`` log-probabilities summed over the batch.

    Blank is class 0; ``targets`` are concatenated. The result lives on
    ``log_probs``' device and its gradient flows back there. ``label_width`` (GPU only:
    ``gpu_ctc_loss``) fixes the shapes for a CUDA graph.
    """
    if log_probs.is_cuda:
        from deepspeech.model.kernels.ctc import gpu_ctc_loss  # Triton: only where there is CUDA

        return gpu_ctc_loss(log_probs.float(), lengths, targets, target_lengths,
                            zero_infinity, label_width).sum()
    return F.ctc_loss(log_probs.float().transpose(0, 1), targets, lengths, target_lengths,
                      blank=0, reduction="sum", zero_infinity=zero_infinity)
