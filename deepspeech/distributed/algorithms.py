"""The all-reduce algorithms by name: the one map every other module reads.

`ALGORITHMS` maps each name to its function and, where the cost model prices
it, its cost formula:

* ``ring``: the pipelined ring, bandwidth-optimal for large buffers (ring.py);
* ``recursive_doubling``: log2(N) whole-buffer exchanges, for small buffers
  (recursive_doubling.py);
* ``hierarchical``: node-aware, shared memory inside a node and a flat
  algorithm between nodes (hierarchical.py);
* ``ipc``: node-aware for GPU buffers, the node's ranks reading each other's
  GPU memory through CUDA IPC and the node leaders staging between nodes
  (ipc_allreduce.py). Where IPC does not work (CPU tensors, GPUs without peer
  access, a refused handle) `allreduce` runs what ``auto`` would without it and
  logs why once (ipc.py).

`allreduce(algorithm=...)` and a rules file (tuning.py) accept these names, the
flat dispatch (flat.py) runs the flat ones, the cost model (costmodel.py)
prices those with a formula and the benchmark times each; `get_algorithm` refuses
any other name, naming the known ones. Which one ``auto`` runs for a buffer
size is the size rule's decision (choice.py).

To add an algorithm: write its function (a flat one takes a transport, like
`ring_allreduce`), then add its entry below with its cost formula. It can then
be forced, named in a rules file, benchmarked (``deepspeech bench allreduce
--backends NAME``) and compared by the cost model; ``auto`` runs it where a
rules file or the size rule says so.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

from .hierarchical import hierarchical_allreduce
from .ipc_allreduce import ipc_allreduce
from .recursive_doubling import recursive_doubling_allreduce
from .ring import ring_allreduce

Coefficients = tuple[float, float, float]
"""Multipliers of the machine constants (alpha, beta, gamma) in an algorithm's time."""

CostFormula = Callable[[float, int], Coefficients]
"""``(n bytes, N ranks) -> Coefficients``, for N >= 2 (costmodel.py explains the model)."""


def ring_cost(nbytes: float, world_size: int) -> Coefficients:
    """2(N-1) messages; each rank sends 2(N-1)/N of the buffer and reduces (N-1)/N of it."""
    share = (world_size - 1) / world_size
    return 2.0 * (world_size - 1), 2.0 * nbytes * share, nbytes * share


def folded(core: CostFormula) -> CostFormula:
    """A power-of-two algorithm's cost on any N: the extra ranks are folded in and out
    (one send with a reduction and one send: 2 alpha + 2 n beta + n gamma) around
    ``core`` on the largest power of two below N, as recursive_doubling.py does."""
    @functools.wraps(core)
    def cost(nbytes: float, world_size: int) -> Coefficients:
        power = 1 << (world_size.bit_length() - 1)
        fold = (2.0, 2.0 * nbytes, nbytes) if power != world_size else (0.0, 0.0, 0.0)
        a, b, c = core(nbytes, power)
        return a + fold[0], b + fold[1], c + fold[2]
    return cost


@folded
def recursive_doubling_cost(nbytes: float, power: int) -> Coefficients:
    """log2(N) exchanges of the whole buffer, each one reduced."""
    steps = math.log2(power)
    return steps, nbytes * steps, nbytes * steps


@dataclass(frozen=True)
class Algorithm:
    """One all-reduce algorithm: the function that runs it and what it costs.

    A flat algorithm runs as ``run(transport, op, comm, *, segment_elems,
    timeout_s, divide_by, name)`` on the tensor behind a transport (ring.py).
    A node-aware one runs as ``run(flat, op, comm, *, timeout_s, divide_by,
    segment_elems, staging, ranks_per_node, between_nodes)`` on a 1-D tensor
    (CPU for ``hierarchical``, GPU for ``ipc``), with ``between_nodes`` the flat
    dispatch (flat.py) for the node leaders' exchange (hierarchical.py).
    ``cost``: None where the cost model has no formula.
    """

    run: Callable[..., None]
    cost: CostFormula | None = None
    node_aware: bool = False


ALGORITHMS: dict[str, Algorithm] = {
    "ring": Algorithm(ring_allreduce, cost=ring_cost),
    "recursive_doubling": Algorithm(recursive_doubling_allreduce, cost=recursive_doubling_cost),
    "hierarchical": Algorithm(hierarchical_allreduce, node_aware=True),
    "ipc": Algorithm(ipc_allreduce, node_aware=True),
}


def get_algorithm(name: str, *, flat: bool = False) -> Algorithm:
    """The entry for ``name``; with ``flat``, only a flat algorithm (one that sends
    messages between all ranks alike, with no notion of nodes) is accepted."""
    known = [key for key, entry in ALGORITHMS.items() if not (flat and entry.node_aware)]
    if name not in known:
        kind = "flat all-reduce algorithm" if flat else "all-reduce algorithm"
        raise ValueError(f"unknown {kind} {name!r}; expected one of {', '.join(known)}")
    return ALGORITHMS[name]
