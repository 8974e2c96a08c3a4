"""The flat all-reduce: the ring or recursive doubling over all ranks of a communicator.

"Flat" as opposed to node-aware: every rank exchanges messages with its peers
alike, wherever they run. `flat_allreduce` binds the tensor to this thread's
transport (transport.py), runs the chosen algorithm (by default the one the
size rule of choice.py gives the buffer) and, if it fails, discards the
transports it left mid-transfer. `allreduce` calls it for ``ring`` and
``recursive_doubling``; the node-aware variant (hierarchical.py) calls it for
the exchange between node leaders.
"""

from __future__ import annotations

import torch
from mpi4py import MPI

from .choice import builtin_algorithm
from .recursive_doubling import recursive_doubling_allreduce
from .ring import ring_allreduce
from .transport import Op, discard_transports, get_transport, quietly


def flat_allreduce(
    flat: torch.Tensor,
    op: Op,
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
        algorithm = builtin_algorithm(flat.numel() * flat.element_size(), comm,
                                      node_aware=False)
    run = ring_allreduce if algorithm == "ring" else recursive_doubling_allreduce
    transport = get_transport(flat, min(segment_elems, flat.numel()), staging)
    try:
        quietly(run, transport, op, comm, segment_elems=segment_elems, timeout_s=timeout_s,
                divide_by=divide_by, name=name or f"allreduce({algorithm.replace('_', ' ')})")
    except BaseException:
        discard_transports()
        raise
