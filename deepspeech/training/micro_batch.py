"""How a micro-batch's loss and gradient are computed, chosen once per run.

Eagerly (``EagerMicroBatches``), or replayed as CUDA graphs padded to a shape class
(``cuda_graphs.GraphedMicroBatches``): ``build_runner`` settles ``train.cuda_graphs``
once, and the optimizer step, the worst-batch check and ``deepspeech bench train`` all
call the runner it returns. So the check tries the batch as the step will run it
(padded up to an eighth more frames, rehearsed while earlier graphs hold memory), and the
benchmark times what training runs.
"""

from __future__ import annotations

import logging
from typing import Protocol

import torch
from torch import Tensor, nn

from deepspeech.data.dataset import Batch
from deepspeech.errors import ConfigError
from deepspeech.training.cuda_graphs import GraphedMicroBatches, graphs_refused_because
from deepspeech.training.step import compute_loss

log = logging.getLogger(__name__)


class MicroBatchRunner(Protocol):
    """Forward, CTC loss and backward of one micro-batch."""

    def loss_and_backward(self, batch: Batch, global_size: int) -> Tensor:
        """``batch``'s summed CTC loss over ``global_size`` (a detached scalar on the run's
        device), its gradient added to the parameters' ``.grad``."""


class EagerMicroBatches:
    """The micro-batch as it comes, one kernel launch after another."""

    def __init__(self, model: nn.Module, device: torch.device,
                 autocast_dtype: torch.dtype | None, scaler: torch.amp.GradScaler) -> None:
        self.model, self.device, self.autocast_dtype, self.scaler = (
            model, device, autocast_dtype, scaler)

    def loss_and_backward(self, batch: Batch, global_size: int) -> Tensor:
        loss = compute_loss(self.model, batch, self.device, self.autocast_dtype) / global_size
        self.scaler.scale(loss).backward()
        return loss.detach()


def build_runner(cuda_graphs: bool | str, device: torch.device, gradient_hooks: bool,
                 model: nn.Module, autocast_dtype: torch.dtype | None,
                 scaler: torch.amp.GradScaler) -> MicroBatchRunner:
    """The runner ``train.cuda_graphs`` (true, false or auto) asks for: graphs where they can
    run (``gradient_hooks``: an all-reduce that starts inside backward rules them out);
    true where they cannot is an error, auto falls back to eager and says why on a GPU."""
    eager = EagerMicroBatches(model, device, autocast_dtype, scaler)
    if cuda_graphs is False:
        return eager
    refusal = graphs_refused_because(device, gradient_hooks)
    if refusal is None:
        return GraphedMicroBatches(model, device, autocast_dtype, scaler)
    if cuda_graphs is True:
        raise ConfigError(f"train.cuda_graphs: true, but {refusal}")
    if device.type == "cuda":
        log.info("CUDA graphs off: %s", refusal)
    return eager
