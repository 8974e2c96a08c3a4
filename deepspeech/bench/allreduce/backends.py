"""What each backend name of the benchmark runs: our algorithms (``@SEGMENT`` sets the
segment size, or the shared window's block for ``hierarchical``), ``MPI_Allreduce``,
gloo, and the half-buffer Sendrecv that bounds a 2-rank ring from above."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
from mpi4py import MPI

from deepspeech.bench.allreduce.sizes import parse_size
from deepspeech.distributed.algorithms import ALGORITHMS
from deepspeech.distributed.allreduce import DEFAULT_SEGMENT_BYTES, allreduce
from deepspeech.distributed.choice import builtin_algorithm
from deepspeech.distributed.flat import flat_allreduce
from deepspeech.distributed.hierarchical import hierarchical_allreduce
from deepspeech.distributed.transport import mpi_is_cuda_aware, staging_buffer

SENDRECV = "sendrecv"
FOREIGN_BACKENDS = ("mpi", "gloo")
# Backends that run one algorithm at every size, named after it ("ring" is taken:
# that backend follows the flat size rule).
PURE_BACKENDS = {{"ring": "ring-only", "recursive_doubling": "rd"}.get(name, name): name
                 for name in ALGORITHMS}
BACKENDS = ("auto", "ring", *PURE_BACKENDS) + FOREIGN_BACKENDS


def backends_argument(text: str) -> list[str]:
    """Names checked before any rank starts timing: a typo used to surface as a
    traceback (``ring@abc``) or, for ``@0``, as one-element segments."""
    backends = [name.strip() for name in text.split(",") if name.strip()]
    if not backends:
        raise argparse.ArgumentTypeError("no backend named")
    for name in backends:
        base, at, segment = name.partition("@")
        if base not in BACKENDS:
            raise argparse.ArgumentTypeError(
                f"unknown backend {name!r}; expected {', '.join(BACKENDS)} "
                f"(ours may add @SEGMENT)")
        if at and base in FOREIGN_BACKENDS:
            raise argparse.ArgumentTypeError(f"{name!r}: only our own backends take @SEGMENT")
        if at:
            try:
                size = parse_size(segment)
            except ValueError as error:
                raise argparse.ArgumentTypeError(f"{name!r}: {error}") from None
            if size <= 0:
                raise argparse.ArgumentTypeError(f"{name!r}: the segment must be positive")
    return backends

def make_runner(name: str, comm: MPI.Comm, timeout_s: float,
                 torch_comm: object | None) -> Callable[[torch.Tensor], object]:
    base, _, segment = name.partition("@")
    segment_bytes = parse_size(segment) if segment else None  # None: allreduce's default
    algorithms = {"auto": "auto", **PURE_BACKENDS}
    if base == "hierarchical" and segment:  # @ sets the shared window's block size
        def blocked(x: torch.Tensor) -> object:
            return hierarchical_allreduce(x, "sum", comm, timeout_s=timeout_s, divide_by=None,
                                          between_nodes=flat_allreduce,
                                          segment_elems=DEFAULT_SEGMENT_BYTES // 4,
                                          window_bytes=segment_bytes)
        return blocked
    if base in algorithms:
        algorithm = algorithms[base]
        return lambda x: allreduce(x, "sum", comm, algorithm=algorithm, timeout_s=timeout_s,
                                   segment_bytes=segment_bytes)
    if base == "ring":  # flat: what "auto" does when the node-aware variant is not chosen
        def flat(x: torch.Tensor) -> object:
            algorithm = builtin_algorithm(x.numel() * x.element_size(), comm, node_aware=False)
            return allreduce(x, "sum", comm, timeout_s=timeout_s, segment_bytes=segment_bytes,
                             algorithm=algorithm)
        return flat
    if base == "mpi":
        def mpi(x: torch.Tensor) -> object:
            if x.dtype in (torch.float16, torch.bfloat16):
                raise SystemExit("the mpi backend cannot reduce 16-bit floats; use --dtype "
                                 "float32")
            if x.is_cuda and not mpi_is_cuda_aware():
                return _staged_mpi_allreduce(comm, x)
            return comm.Allreduce(MPI.IN_PLACE, x if x.is_cuda else x.numpy(), op=MPI.SUM)
        return mpi
    if base == "gloo":
        assert torch_comm is not None
        return lambda x: torch_comm.allreduce(x, "sum")
    raise ValueError(f"unknown backend {name!r}")  # the command line checks names earlier

def _staged_mpi_allreduce(comm: MPI.Comm, x: torch.Tensor) -> None:
    """What a CUDA program does with an MPI that cannot read GPU memory: the whole
    buffer to a pinned host copy, MPI_Allreduce there, and back."""
    host = staging_buffer(x)
    host.copy_(x)
    comm.Allreduce(MPI.IN_PLACE, host.numpy(), op=MPI.SUM)
    x.copy_(host)

def sendrecv_runner(comm: MPI.Comm) -> Callable[[torch.Tensor], object]:
    """Exchange half the buffer with the partner rank (rank ^ 1): the ceiling's yardstick.

    It runs on the same buffer as the all-reduces, interleaved with them, so
    it sees the same caches: first half out, second half in.
    """
    rank, size = comm.Get_rank(), comm.Get_size()
    partner = rank ^ 1

    def sendrecv(x: torch.Tensor) -> object:
        # GPU buffers: the host link is what staged transfers cross, so time it there
        raw = (staging_buffer(x) if x.is_cuda else x).view(-1).view(torch.uint8).numpy()
        half = raw.size // 2
        if partner < size and half:
            comm.Sendrecv(raw[:half], partner, 11, raw[half : 2 * half], partner, 11)
        return None
    return sendrecv
