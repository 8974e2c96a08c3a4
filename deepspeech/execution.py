"""The execution plan: how this run computes, settled once and logged.

The config's ``execution`` section says what was asked for, with ``auto`` where the
machine should decide; two environment variables may override it
(``DEEPSPEECH_CUDA_IPC``, ``DEEPSPEECH_MPI_CUDA_AWARE``: launchers and cluster
modules set them for every job). ``resolve_plan`` is the one place that turns these,
the device and the gradient sync into decisions: what runs where is read from the
``ExecutionPlan`` it returns, never tested again on a tensor. The layers take their part
of it as a ``ModelMode``; the micro-batch runner, the loader and the communicator
theirs. The plan is logged as one line per decision with why it came out so, and saved
in checkpoints, so that a resume can say what it changes.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from deepspeech.config import ExecutionConfig
from deepspeech.errors import ConfigError
from deepspeech.model.mode import ModelMode

log = logging.getLogger(__name__)

CUDA_IPC_VARIABLE = "DEEPSPEECH_CUDA_IPC"
MPI_CUDA_AWARE_VARIABLE = "DEEPSPEECH_MPI_CUDA_AWARE"

AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
"""``execution.precision`` -> the dtype autocast runs matrix work in (fp32: no autocast)."""

ARITHMETIC_KEYS = ("rnn_kernel", "batch_norm", "precision", "cuda_graphs", "features_on",
                   "cuda_ipc")
"""Decisions that change the arithmetic, so the bits of the weights: eager and replayed
gradients differ in their last bits, the IPC all-reduce may sum in another order. Where
GPU buffers meet MPI (``mpi_cuda_aware``) moves the same bytes either way."""


@dataclass(frozen=True)
class ExecutionPlan:
    """Every ``auto`` of the execution section settled for one process and its device."""

    device: str
    rnn_kernel: str
    batch_norm: str
    precision: str
    cuda_graphs: bool
    features_on: str
    cuda_ipc: bool
    mpi_cuda_aware: bool
    reasons: dict[str, str] = dataclasses.field(default_factory=dict, compare=False)
    """Why a decision came out as it did, by key, where it was not simply asked for."""

    @property
    def torch_device(self) -> torch.device:
        return torch.device(self.device)

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        return AUTOCAST_DTYPES.get(self.precision)

    @property
    def model_mode(self) -> ModelMode:
        """What the layers need to know: which recurrence, and whether every frame runs at
        fixed shapes (a GPU: no host round trips, CUDA graphs) or only the valid ones."""
        return ModelMode(rnn_kernel=self.rnn_kernel,
                         fixed_shapes=self.torch_device.type == "cuda",
                         batch_norm=self.batch_norm)

    def to_dict(self) -> dict[str, Any]:
        """The decisions as plain data, for checkpoints (reasons left out)."""
        return {field.name: getattr(self, field.name)
                for field in dataclasses.fields(self) if field.name != "reasons"}

    def describe(self) -> list[str]:
        """One line per decision, ``key=value (why)``."""
        lines = []
        for key, value in self.to_dict().items():
            shown = str(value).lower() if isinstance(value, bool) else value
            why = self.reasons.get(key)
            lines.append(f"{key}={shown}" + (f" ({why})" if why else ""))
        return lines


def resolve_plan(config: ExecutionConfig, device: torch.device, *,
                 gradient_hooks: bool = False, environ: dict[str, str] | None = None
                 ) -> ExecutionPlan:
    """Settle ``config`` for a process on ``device``; ``gradient_hooks``: the gradient sync
    starts reducing during backward (no graph can be captured around it). Asking for
    what cannot run here is a ``ConfigError`` naming the key."""
    environ = os.environ if environ is None else environ
    reasons: dict[str, str] = {}
    on_cuda = device.type == "cuda"
    if config.precision == "fp16" and not on_cuda:
        raise ConfigError(f"execution.precision: fp16 needs a CUDA device, and this run is on "
                          f"{device.type}; use bf16 or fp32 there")
    if config.rnn_kernel == "persistent" and not on_cuda:
        reasons["rnn_kernel"] = (f"Triton runs on CUDA: on {device.type} tensors the "
                                 "recurrence is torch.nn.GRU's, on the same parameters")
    batch_norm = config.batch_norm
    if batch_norm == "fused" and not on_cuda:
        batch_norm = "torch"
        reasons["batch_norm"] = (f"fused runs on CUDA: on {device.type} the torch form, the "
                                 "arithmetic the CPU recipes were trained with")
    cuda_graphs = _settle_graphs(config.cuda_graphs, device, gradient_hooks, reasons)
    cuda_ipc = _settle_switch("cuda_ipc", config.cuda_ipc, CUDA_IPC_VARIABLE, environ,
                              on_cuda, reasons, auto=lambda: (False, "off until training through "
                                                              "it is measured"))
    mpi_cuda_aware = _settle_switch("mpi_cuda_aware", config.mpi_cuda_aware,
                                    MPI_CUDA_AWARE_VARIABLE, environ, on_cuda, reasons,
                                    auto=_probe_mpi_cuda_support)
    if config.mpi_cuda_aware is True and mpi_cuda_aware and MPI_CUDA_AWARE_VARIABLE not in \
            environ and not _probe_mpi_cuda_support()[0]:
        raise ConfigError(f"execution.mpi_cuda_aware: true, but {_probe_mpi_cuda_support()[1]}"
                          f": it would be handed GPU memory it cannot read; set "
                          f"{MPI_CUDA_AWARE_VARIABLE}=1 if it is CUDA-aware all the same")
    return ExecutionPlan(device=str(device), rnn_kernel=config.rnn_kernel,
                         batch_norm=batch_norm,
                         precision=config.precision, cuda_graphs=cuda_graphs,
                         features_on=config.features_on, cuda_ipc=cuda_ipc,
                         mpi_cuda_aware=mpi_cuda_aware, reasons=reasons)


def inference_plan(config: ExecutionConfig, device: torch.device) -> ExecutionPlan:
    """The plan of evaluation, transcription and serving: the kernel and the device's
    mode from ``config``, nothing that only training uses (graphs, all-reduce)."""
    return resolve_plan(dataclasses.replace(config, precision="fp32", cuda_graphs=False,
                                            cuda_ipc=False, mpi_cuda_aware=False), device)


def log_plan(plan: ExecutionPlan) -> None:
    log.info("execution plan:\n  %s", "\n  ".join(plan.describe()))


def _settle_graphs(asked: bool | str, device: torch.device, gradient_hooks: bool,
                   reasons: dict[str, str]) -> bool:
    from deepspeech.training.cuda_graphs import graphs_refused_because

    if asked is False:
        return False
    refusal = graphs_refused_because(device, gradient_hooks)
    if refusal is None:
        if asked == "auto":
            reasons["cuda_graphs"] = "auto: a CUDA device"
        return True
    if asked is True:
        raise ConfigError(f"execution.cuda_graphs: true, but {refusal}")
    reasons["cuda_graphs"] = f"auto: {refusal}"
    return False


def _settle_switch(key: str, asked: bool | str, variable: str, environ: dict[str, str],
                   on_cuda: bool, reasons: dict[str, str],
                   auto: Callable[[], tuple[bool, str]]) -> bool:
    """A true/false/auto key that only CUDA tensors use, which ``variable`` overrides."""
    forced = environ.get(variable, "").strip().lower()
    if forced:
        if forced not in ("0", "1", "true", "false", "yes", "no"):
            raise ConfigError(f"{variable}={environ[variable]!r}: expected 0 or 1 "
                              f"(it overrides execution.{key})")
        value = forced in ("1", "true", "yes")
        reasons[key] = f"{variable}={environ[variable]} overrides execution.{key}: {asked}"
        return value and on_cuda
    if not on_cuda:
        if asked is True:
            raise ConfigError(f"execution.{key}: true needs a CUDA device, and this run is "
                              "on the CPU")
        return False
    if asked == "auto":
        value, why = auto()
        reasons[key] = f"auto: {why}"
        return value
    return asked


def _probe_mpi_cuda_support() -> tuple[bool, str]:
    from deepspeech.distributed.transport import mpi_library, mpi_reports_cuda_support

    supported = mpi_reports_cuda_support()
    return supported, f"{mpi_library()} {'reports' if supported else 'does not report'} " \
                      "CUDA support"
