"""Seeds, deterministic kernels and RNG state capture.

Non-determinism is a bug: the same config, seed and thread count must give the
same bits. The intra-op thread count is part of that contract because oneDNN's
convolution gradients depend on it; it is set once per process from the config.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch


def make_deterministic(seed: int, num_threads: int) -> None:
    """Seed every generator and restrict torch to deterministic kernels."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.set_num_threads(num_threads)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    random.seed(seed)
    np.random.seed(seed % (1 << 32))
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    """Every RNG state of this process, as checkpoint-safe data (no pickled objects)."""
    kind, keys, position, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "python": _to_lists(random.getstate()),
        "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)),
                  "position": int(position), "has_gauss": int(has_gauss),
                  "cached": float(cached)},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what ``rng_state`` captured."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    numpy = state["numpy"]
    np.random.set_state((numpy["kind"], numpy["keys"].numpy().astype(np.uint32),
                         numpy["position"], numpy["has_gauss"], numpy["cached"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _to_lists(value: Any) -> Any:
    return [_to_lists(v) for v in value] if isinstance(value, tuple) else value


def state_dict_digest(state_dict: dict[str, torch.Tensor]) -> str:
    """SHA-256 over names, dtypes, shapes and raw bytes: equal digests mean equal bits."""
    digest = hashlib.sha256()
    for name in sorted(state_dict):
        tensor = state_dict[name].detach().cpu().contiguous().reshape(-1)
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()


@contextlib.contextmanager
def no_trace(model: torch.nn.Module) -> Iterator[None]:
    """Train mode inside, for a forward and backward that must not count (a rehearsal);
    afterwards the batch-norm statistics and counters, the mode and every RNG as before,
    and no gradients (a caller that had some keeps its own copy)."""
    buffers = {name: buffer.clone() for name, buffer in model.named_buffers()}
    rng, was_training = rng_state(), model.training
    model.train()
    try:
        yield
    finally:
        model.zero_grad(set_to_none=True)
        with torch.no_grad():
            for name, buffer in model.named_buffers():
                buffer.copy_(buffers[name])
        model.train(was_training)
        set_rng_state(rng)
