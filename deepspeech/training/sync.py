"""How the training loop talks to other processes: one small interface.

The loop calls ``prepare`` once, ``micro_batch_done`` after each micro-batch's
backward and ``finish_step`` once per step; ``LocalSync`` is the single-process
case where all of these are (almost) nothing. The data-parallel implementation
lives in ``deepspeech.training.data_parallel`` and uses ``deepspeech.distributed``.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from deepspeech.execution import ExecutionPlan


class GradientSync(Protocol):
    """Gradient averaging and the few collectives the training loop needs."""

    rank: int
    size: int
    # Seconds the training thread spent blocked on communication (for the logs).
    comm_wait_seconds: float
    # Whether gradients leave from hooks while backward runs (the overlapped all-reduce):
    # a CUDA graph's replay fires no hooks.
    gradient_hooks: bool

    def check_same(self, value: str, what: str) -> None:
        """Fail on every rank, naming ``what``, unless all ranks pass the same ``value``."""

    def prepare(self, model: torch.nn.Module, plan: ExecutionPlan) -> None:
        """Make every rank start from rank 0's weights; GPU buffers travel as ``plan`` says
        (CUDA IPC, CUDA-aware MPI)."""

    def start_micro_batch(self, last: bool) -> None:
        """Called before each micro-batch's forward; ``last`` for the step's last one."""

    def micro_batch_done(self, model: torch.nn.Module) -> None:
        """Called after each micro-batch's backward."""

    def finish_step(self, model: torch.nn.Module, local_loss: torch.Tensor,
                    stop: bool = False) -> tuple[float, bool]:
        """Reduce gradients (summed over all micro-batches of all ranks); return the global
        loss, non-finite on every rank if it is non-finite on any, and whether any rank
        passed ``stop`` (it travels with the loss: no collective of its own)."""

    def gather_objects(self, value: Any) -> list[Any]:
        """Every rank's ``value`` in rank order, on every rank (the pre-flight relies on it)."""

    def sum_counts(self, values: list[float]) -> list[float]:
        """Element-wise sum over ranks (evaluation counts)."""

    def close(self) -> None:
        """Release communication resources (collective); the sync is unusable afterwards."""


class LocalSync:
    """One process: gradients are already complete after backward."""

    rank = 0
    size = 1
    comm_wait_seconds = 0.0
    gradient_hooks = False

    def check_same(self, value: str, what: str) -> None:
        return None

    def prepare(self, model: torch.nn.Module, plan: ExecutionPlan) -> None:
        return None

    def start_micro_batch(self, last: bool) -> None:
        return None

    def micro_batch_done(self, model: torch.nn.Module) -> None:
        return None

    def finish_step(self, model: torch.nn.Module, local_loss: torch.Tensor,
                    stop: bool = False) -> tuple[float, bool]:
        return float(local_loss), stop

    def gather_objects(self, value: Any) -> list[Any]:
        return [value]

    def sum_counts(self, values: list[float]) -> list[float]:
        return list(values)

    def close(self) -> None:
        return None
