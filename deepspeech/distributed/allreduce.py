"""`allreduce`: the one function the rest of the project calls.

It checks the tensor, picks an algorithm and a transport, and runs it:

* recursive doubling (recursive_doubling.py) below a crossover size, where
  message latency dominates;
* the pipelined ring (ring.py) above it, where bandwidth dominates;
* the node-aware variant (hierarchical.py) when asked for, and by default
  where it measured faster: all ranks on one node and buffers below 16 MiB
  (see `choose_algorithm`);
* or, on CPU tensors, whatever a rules file measured on this machine says
  (tuning.py, ``deepspeech bench allreduce --tune``).

``algorithm=`` forces one of them; "auto" is what training should use.

CUDA tensors on an MPI library that is not CUDA-aware travel through pinned
host memory segment by segment (transport.py); a tensor no larger than one
segment is copied to the host once, reduced there and copied back.

The choice depends only on the byte count, the world size, the node layout and
the rules file, which all ranks share (the rules are compared on first use), so
all ranks always run the same algorithm and every result is bitwise identical
across ranks and runs.
"""

from __future__ import annotations

import functools

import torch
from mpi4py import MPI

from . import costmodel, tuning
from .faults import DEFAULT_TIMEOUT_S
from .hierarchical import hierarchical_allreduce, hierarchical_wins
from .recursive_doubling import recursive_doubling_allreduce
from .ring import ring_allreduce
from .transport import (
    discard_transports,
    get_transport,
    mpi_is_cuda_aware,
    quietly,
    staging_buffer,
)

OPS = ("sum", "mean", "max", "min")
ALGORITHMS = ("auto", "ring", "recursive_doubling", "hierarchical")
DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16,
          torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)

DEFAULT_SEGMENT_BYTES = 1 << 20
"""Ring segment size. Measured on 2 ranks: see docs/BENCHMARKS.md, "Segment size"."""

STAGED_SEGMENT_BYTES = 4 << 20
"""Segment size when CUDA buffers are staged through host memory: each segment costs
two synchronizing copies, so larger ones win (1.3-1.6x over 1 MiB from 8 MiB up on an
H100 shared by 2 ranks; docs/BENCHMARKS.md, "The GPU paths")."""


CROSSOVER_BYTES_2_RANKS = 512 << 10
"""Below this recursive doubling beat the ring on 2 ranks (docs/BENCHMARKS.md)."""


@functools.cache
def crossover_bytes(world_size: int) -> int:
    """Buffers smaller than this use recursive doubling instead of the ring.

    Measured for 2 ranks; for other world sizes the cost model (costmodel.py)
    scales the measured value. A constant of the code, so the same on all ranks.
    """
    if world_size <= 1:
        return 0
    model = costmodel.DEFAULT
    scale = model.crossover_bytes(world_size) / max(1, model.crossover_bytes(2))
    return int(CROSSOVER_BYTES_2_RANKS * scale)


def choose_algorithm(nbytes: int, comm: MPI.Comm, cuda: bool = False,
                     timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[str, int | None]:
    """The algorithm ``algorithm="auto"`` runs for ``nbytes`` on ``comm``, and its
    segment size (None: the default).

    A rules file measured on this machine decides where one is active and fits
    the communicator (tuning.py). Otherwise the built-in thresholds: the
    node-aware variant where it measured faster (all ranks on one node, CPU,
    buffers below 16 MiB; see hierarchical.py), otherwise recursive doubling
    below the crossover and the ring above it.
    """
    rules = None if cuda else tuning.rules_for(comm, timeout_s)
    if rules is not None:
        rule = rules.rule_for(nbytes)
        return rule.algorithm, rule.segment_bytes
    return builtin_algorithm(nbytes, comm, cuda)


def builtin_algorithm(nbytes: int, comm: MPI.Comm, cuda: bool = False) -> tuple[str, None]:
    """What `choose_algorithm` picks without a rules file: the incumbent that
    ``bench allreduce --tune`` keeps unless a measured rule beats it."""
    if not cuda and hierarchical_wins(comm, nbytes):
        return "hierarchical", None
    if nbytes < crossover_bytes(comm.Get_size()):
        return "recursive_doubling", None
    return "ring", None


def _check(tensor: torch.Tensor, op: str, algorithm: str) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"allreduce needs a torch.Tensor, got {type(tensor).__name__}")
    if op not in OPS:
        raise ValueError(f"allreduce: unknown op {op!r}; expected one of {', '.join(OPS)}")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"allreduce: unknown algorithm {algorithm!r}; "
                         f"expected one of {', '.join(ALGORITHMS)}")
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
) -> torch.Tensor:
    """Reduce ``tensor`` in place across all ranks of ``comm`` and return it.

    ``op``: sum, mean, max or min. ``staging``: None picks direct MPI access
    for CPU tensors and for CUDA on a CUDA-aware MPI, host staging otherwise;
    True forces staging (also on CPU, for tests). ``segment_bytes``: the
    pipelining unit (default: `STAGED_SEGMENT_BYTES` for staged CUDA tensors,
    `DEFAULT_SEGMENT_BYTES` otherwise). ``ranks_per_node`` groups
    consecutive ranks into "nodes" for the hierarchical algorithm instead of
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
    if algorithm == "auto":
        algorithm, tuned_segment_bytes = choose_algorithm(nbytes, comm, flat.is_cuda, timeout_s)
        segment_bytes = segment_bytes or tuned_segment_bytes
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
    if staged_cuda and nbytes <= segment_bytes and algorithm != "hierarchical":
        # One segment anyway: a single copy each way, and the algorithm runs on the
        # host copy without a device round trip per message.
        host = staging_buffer(flat)
        host.copy_(flat)
        _flat_allreduce(host, reduce_op, comm, timeout_s=timeout_s, divide_by=divide_by,
                        segment_elems=segment_elems, staging=False, algorithm=algorithm)
        flat.copy_(host)
    elif algorithm == "hierarchical":
        quietly(hierarchical_allreduce, flat, reduce_op, comm, timeout_s=timeout_s,
                divide_by=divide_by, segment_elems=segment_elems, staging=staging,
                ranks_per_node=ranks_per_node)
    else:
        _flat_allreduce(flat, reduce_op, comm, timeout_s=timeout_s, divide_by=divide_by,
                        segment_elems=segment_elems, staging=staging, algorithm=algorithm)
    return tensor


def _flat_allreduce(
    flat: torch.Tensor,
    op: str,
    comm: MPI.Comm,
    *,
    timeout_s: float,
    divide_by: int | None,
    segment_elems: int,
    staging: bool | None,
    algorithm: str | None = None,
    name: str | None = None,
) -> None:
    """Ring or recursive doubling on a flat tensor (``algorithm=None``: by size)."""
    if comm.Get_size() == 1:
        if divide_by is not None:
            flat.div_(divide_by)
        return
    if algorithm is None:
        nbytes = flat.numel() * flat.element_size()
        small = nbytes < crossover_bytes(comm.Get_size())
        algorithm = "recursive_doubling" if small else "ring"
    run = ring_allreduce if algorithm == "ring" else recursive_doubling_allreduce
    transport = get_transport(flat, min(segment_elems, flat.numel()), staging)
    try:
        quietly(run, transport, op, comm, segment_elems=segment_elems, timeout_s=timeout_s,
                divide_by=divide_by, name=name or f"allreduce({algorithm.replace('_', ' ')})")
    except BaseException:
        discard_transports()
        raise
