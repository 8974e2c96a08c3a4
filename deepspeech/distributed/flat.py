"""The flat all-reduce: a flat algorithm over all ranks of a communicator.

"Flat" as opposed to node-aware: every rank exchanges messages with its peers
alike, wherever they run. `flat_allreduce` binds the tensor to this thread's
transport (transport.py), runs the named flat algorithm of the registry
(algorithms.py; by default the one the size rule of choice.py gives the
buffer) and, if it fails, discards the transports it left mid-transfer.
`allreduce` calls it for the flat algorithms and hands it to the node-aware
ones (hierarchical.py) for the exchange between node leaders.
"""

from __future__ import annotations

import torch
from mpi4py import MPI

from .algorithms import get_algorithm
from .choice import builtin_algorithm
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
    """A flat algorithm on a flat tensor (``algorithm=None``: by size).

    Raises ValueError naming the known flat algorithms for any other name.
    """
    if algorithm is None:
        algorithm = builtin_algorithm(flat.numel() * flat.element_size(), comm,
                                      node_aware=False)
    run = get_algorithm(algorithm, flat=True).run
    if comm.Get_size() == 1:
        if divide_by is not None:
            flat.div_(divide_by)
        return
    transport = get_transport(flat, min(segment_elems, flat.numel()), staging)
    try:
        quietly(run, transport, op, comm, segment_elems=segment_elems, timeout_s=timeout_s,
                divide_by=divide_by, name=name or f"allreduce({algorithm.replace('_', ' ')})")
    except BaseException:
        discard_transports()
        raise
