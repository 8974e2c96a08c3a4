"""One optimizer step's arithmetic, written once: the trainer runs it on real batches and
``deepspeech bench train`` times it on synthetic ones.

The loss is CTC summed over the utterances (the caller divides by the global batch
size, so how a batch is cut into micro-batches does not change the gradient); the
update unscales (mixed precision), clips the gradient norm and steps.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from deepspeech.data.dataset import Batch
from deepspeech.model.ctc_loss import ctc_loss_sum


def compute_loss(model: nn.Module, batch: Batch, device: torch.device,
                 autocast_dtype: torch.dtype | None, label_width: int | None = None) -> Tensor:
    """CTC loss summed over ``batch``'s utterances, the model run under autocast;
    ``label_width`` fixes the loss's shapes on a GPU (``ctc_loss_sum``)."""
    with torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
        log_probs, out_lengths = model(batch.features.to(device),
                                       batch.feature_lengths.to(device))
    return ctc_loss_sum(log_probs, out_lengths, batch.targets, batch.target_lengths,
                        label_width=label_width)


def apply_gradients(model: nn.Module, optimizer: torch.optim.Optimizer,
                    scaler: torch.amp.GradScaler, grad_clip: float) -> None:
    """Unscale, clip the gradient norm to ``grad_clip`` (0: no clipping) and step."""
    scaler.unscale_(optimizer)
    if grad_clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    scaler.step(optimizer)
    scaler.update()
