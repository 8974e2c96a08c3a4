"""`allreduce`: the one function the rest of the project calls.

It checks the tensor, picks an algorithm and a transport, and runs it. Which
algorithm ``algorithm="auto"`` runs is decided in one place, choice.py: the IPC
path (ipc_allreduce.py: reduce-scatter and all-gather as reads of the peers' GPU
memory, the host only between nodes) for CUDA tensors of 1 MiB and more where every
rank asked for it (``ipc=True``, or where the caller leaves it None,
``DEEPSPEECH_CUDA_IPC=1``) and can open its node's GPU memory (ipc.py); a rules
file measured on this machine for CPU tensors (tuning.py); otherwise the size rule.

``algorithm=`` forces one of them by its name in the registry (algorithms.py);
"auto" is what training should use. A forced ``ipc`` where IPC does not work
runs the size rule's choice instead and logs why, once.

CUDA tensors on an MPI library that is not CUDA-aware travel through pinned
host memory segment by segment (transport.py); a tensor no larger than one
segment is copied to the host once, reduced there and copied back.

The choice depends only on the byte count, the world size, the node layout, the
rules file (the rules are compared on first use) and the IPC probe (agreed by
all ranks), which all ranks share, so all ranks always run the same algorithm
and every result is bitwise identical across ranks and runs. On one node the
IPC path sums in the ring's order: with 2 ranks it gives the staged path's bits
at every size, with more above the recursive-doubling crossover.
"""

from __future__ import annotations

import torch
from mpi4py import MPI

from . import ipc
from .algorithms import ALGORITHMS, get_algorithm
from .choice import builtin_algorithm, choose_algorithm
from .faults import DEFAULT_TIMEOUT_S
from .flat import flat_allreduce
from .transport import mpi_is_cuda_aware, quietly, staging_buffer

OPS = ("sum", "mean", "max", "min")
DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16,
          torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)

DEFAULT_SEGMENT_BYTES = 1 << 20
"""Ring segment size. Measured on 2 ranks: see docs/BENCHMARKS.md, "Segment size"."""

STAGED_SEGMENT_BYTES = 4 << 20
"""Segment size when CUDA buffers are staged through host memory: each segment costs
two synchronizing copies, so larger ones win (1.3-1.6x over 1 MiB from 8 MiB up on an
H100 shared by 2 ranks; docs/BENCHMARKS.md, "The GPU paths")."""


def _resolve(algorithm: str, flat: torch.Tensor, comm: MPI.Comm, timeout_s: float,
             staging: bool | None, ranks_per_node: int | None,
             ipc_asked: bool | None) -> tuple[str, int | None]:
    """The algorithm that runs for ``flat`` (``algorithm``: a name or "auto") and its
    tuned segment size (None: the default). Collective the first time a CUDA tensor
    or a named ``ipc`` meets ``comm`` (the IPC probe); ``staging=True`` keeps "auto"
    on the staged path."""
    nbytes = flat.numel() * flat.element_size()
    segment_bytes = None
    if algorithm == "auto":
        def ipc_ready() -> bool:
            return staging is not True and ipc.ready_for_auto(flat, comm, timeout_s,
                                                               ranks_per_node, ipc_asked)

        algorithm, segment_bytes = choose_algorithm(nbytes, comm, flat.is_cuda, timeout_s,
                                                    ipc_ready)
    if algorithm == "ipc" and ipc.unavailable(flat, comm, timeout_s, ranks_per_node,
                                              forced=True):
        return builtin_algorithm(nbytes, comm, node_aware=not flat.is_cuda), None
    return algorithm, segment_bytes


def _check(tensor: torch.Tensor, op: str, algorithm: str) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"allreduce needs a torch.Tensor, got {type(tensor).__name__}")
    if op not in OPS:
        raise ValueError(f"allreduce: unknown op {op!r}; expected one of {', '.join(OPS)}")
    if algorithm != "auto" and algorithm not in ALGORITHMS:
        raise ValueError(f"allreduce: unknown algorithm {algorithm!r}; "
                         f"expected one of auto, {', '.join(ALGORITHMS)}")
    if tensor.dtype not in DTYPES:
        raise TypeError(f"allreduce: dtype {tensor.dtype} is not supported; "
                        f"use one of {', '.join(str(d) for d in DTYPES)}")
    if op == "mean" and not tensor.is_floating_point():
        raise TypeError(f"allreduce: op 'mean' needs a floating-point tensor, got {tensor.dtype}; "
                        "sum the integers and divide yourself")
    if not tensor.is_contiguous():
        raise ValueError("allreduce works in place on contiguous memory; pass "
                         "tensor.contiguous() and copy the result back")


def allreduce(
    tensor: torch.Tensor,
    op: str = "sum",
    comm: MPI.Comm = MPI.COMM_WORLD,
    *,
    algorithm: str = "auto",
    timeout_s: float = DEFAULT_TIMEOUT_S,
    segment_bytes: int | None = None,
    staging: bool | None = None,
    ranks_per_node: int | None = None,
    ipc: bool | None = None,
) -> torch.Tensor:
    """Reduce ``tensor`` in place across all ranks of ``comm`` and return it.

    ``op``: sum, mean, max or min. ``staging``: None picks direct MPI access
    for CPU tensors and for CUDA on a CUDA-aware MPI, host staging otherwise;
    True forces staging (also on CPU, for tests; and keeps "auto" off the
    IPC path). ``ipc``: whether "auto" may take the IPC path for CUDA tensors
    (None: as ``DEEPSPEECH_CUDA_IPC`` says). ``segment_bytes``: the
    pipelining unit (default: `STAGED_SEGMENT_BYTES` for staged CUDA tensors,
    `DEFAULT_SEGMENT_BYTES` otherwise). ``ranks_per_node`` groups
    consecutive ranks into "nodes" for the node-aware algorithms instead of
    asking MPI which ranks share memory (for tests). Raises `CommTimeoutError`
    when a peer is silent for ``timeout_s`` (wrap the program in
    `abort_on_error` so the job then ends).
    """
    _check(tensor, op, algorithm)
    size = comm.Get_size()
    if size == 1 or tensor.numel() == 0:
        return tensor
    flat = tensor if tensor.dim() == 1 else tensor.view(-1)
    nbytes = flat.numel() * flat.element_size()
    algorithm, tuned_segment_bytes = _resolve(algorithm, flat, comm, timeout_s, staging,
                                              ranks_per_node, ipc)
    segment_bytes = segment_bytes or tuned_segment_bytes
    chosen = get_algorithm(algorithm)
    reduce_op = "sum" if op == "mean" else op
    divide_by = size if op == "mean" else None
    if flat.is_cuda and staging is False and not mpi_is_cuda_aware():
        raise ValueError("allreduce(staging=False) would hand GPU memory to an MPI library "
                         "that is not CUDA-aware; leave staging=None")
    if staging is None:
        staging = flat.is_cuda and not mpi_is_cuda_aware()
    staged_cuda = flat.is_cuda and staging
    if segment_bytes is None:
        segment_bytes = STAGED_SEGMENT_BYTES if staged_cuda else DEFAULT_SEGMENT_BYTES
    segment_elems = max(1, segment_bytes // flat.element_size())
    if staged_cuda and nbytes <= segment_bytes and not chosen.node_aware:
        # One segment anyway: a single copy each way, and the algorithm runs on the
        # host copy without a device round trip per message.
        host = staging_buffer(flat)
        host.copy_(flat)
        flat_allreduce(host, reduce_op, comm, timeout_s=timeout_s, divide_by=divide_by,
                       segment_elems=segment_elems, staging=False, algorithm=algorithm)
        flat.copy_(host)
    elif chosen.node_aware:
        quietly(chosen.run, flat, reduce_op, comm, between_nodes=flat_allreduce,
                timeout_s=timeout_s, divide_by=divide_by, segment_elems=segment_elems,
                staging=staging, ranks_per_node=ranks_per_node)
    else:
        flat_allreduce(flat, reduce_op, comm, timeout_s=timeout_s, divide_by=divide_by,
                       segment_elems=segment_elems, staging=staging, algorithm=algorithm)
    return tensor

