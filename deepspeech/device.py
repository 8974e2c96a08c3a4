"""Which device a process computes on: one rule for training, benchmarks and inference."""

from __future__ import annotations

import torch

from deepspeech.errors import ConfigError


def select_device(name: str, local_rank: int = 0, what: str = "train.device") -> torch.device:
    """``auto`` picks CUDA when present; the process of ``local_rank`` on its node takes
    GPU ``local_rank`` modulo the GPUs there (several processes may share one). ``what``
    names the setting in errors."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{what}: cuda requested but no CUDA device is available")
    if name == "cuda":
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    return torch.device(name)


def capturing_graph(tensor: torch.Tensor) -> bool:
    """Whether ``tensor``'s work is being recorded into a CUDA graph, where reading a value
    back to the host (a check on it) would break the capture."""
    return tensor.is_cuda and torch.cuda.is_current_stream_capturing()
