"""How a micro-batch's loss and gradient are computed, chosen once per run.

Eagerly (``EagerMicroBatches``), or replayed as CUDA graphs padded to a shape class
(``cuda_graphs.GraphedMicroBatches``), as the run's execution plan settled
``execution.cuda_graphs``: ``build_runner`` builds it once, and the optimizer step, the
worst-batch check and ``deepspeech bench train`` all call the runner it returns. So the
check tries the batch as the step will run it (padded up to an eighth more frames,
rehearsed while earlier graphs hold memory), and the benchmark times what training runs.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor, nn

from deepspeech.data.dataset import Batch
from deepspeech.execution import ExecutionPlan
from deepspeech.training.cuda_graphs import GraphedMicroBatches
from deepspeech.training.step import compute_loss


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


def build_runner(plan: ExecutionPlan, model: nn.Module,
                 scaler: torch.amp.GradScaler) -> MicroBatchRunner:
    """The runner ``plan`` settled on: graphs or eager, in its precision on its device."""
    runner = GraphedMicroBatches if plan.cuda_graphs else EagerMicroBatches
    return runner(model, plan.torch_device, plan.autocast_dtype, scaler)
