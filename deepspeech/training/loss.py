"""The CTC loss, summed over utterances, computed where it is deterministic.

PyTorch's CUDA CTC backward accumulates gradients with atomic adds, so its
bits change from run to run (``torch.use_deterministic_algorithms`` refuses
it), and cuDNN's deterministic CTC takes only batches whose utterances all
have the same length, which bucketed batches of real speech never do. The CPU
kernel is deterministic. Its inputs are the log-probabilities, ``[T, B,
classes]`` with a few dozen classes: small next to what the model computes,
so on a GPU they travel to the CPU and the loss travels back.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor


def ctc_loss_sum(log_probs: Tensor, lengths: Tensor, targets: Tensor, target_lengths: Tensor,
                 zero_infinity: bool = False) -> Tensor:
    """Float32 CTC loss of ``[B, T, classes]`` log-probabilities summed over the batch.

    Blank is class 0. The result lives on ``log_probs``' device and its gradient
    flows back there.
    """
    loss = F.ctc_loss(log_probs.float().cpu().transpose(0, 1), targets.cpu(), lengths.cpu(),
                      target_lengths.cpu(), blank=0, reduction="sum",
                      zero_infinity=zero_infinity)
    return loss.to(log_probs.device)
