"""How the layers compute, as the execution plan settled it for the model's device.

A layer never asks a tensor where it lives: the plan (``deepspeech.execution``) decides
once and the model is built with its ``ModelMode``. The default is the CPU's mode, the
arithmetic the CPU recipes' weights were trained with.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelMode:
    rnn_kernel: str = "torch"
    """One of ``deepspeech.model.rnn_kernels.RNN_KERNELS``."""
    fixed_shapes: bool = False
    """Run every frame, padding included, and mask afterwards: fixed shapes and nothing
    read back to the host, as a GPU wants (CUDA graphs). False: gather the valid frames
    and run only those, less work on a CPU."""
    batch_norm: str = "torch"
    """Training batch norm over the valid frames: ``torch`` (``normalize_valid_frames``)
    or ``fused`` (``deepspeech.model.kernels.batch_norm``, Triton)."""


CPU_MODE = ModelMode()
