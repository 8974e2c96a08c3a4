"""What ``allreduce(algorithm="auto")`` runs: the whole decision, in one place.

`choose_algorithm` takes, in order: the IPC path for large CUDA buffers where every rank
asked for it and can share its GPU memory (ipc.py); for CPU buffers, a rules file
measured on this machine (tuning.py, ``deepspeech bench allreduce --tune``); otherwise
the size rule, `builtin_algorithm`:

* the node-aware variant (hierarchical.py) where it measured faster: all
  ranks on one node and buffers below 16 MiB; across nodes where ranks share
  a node, from 1 MiB up;
* otherwise recursive doubling (recursive_doubling.py) below a crossover size,
  where message latency dominates;
* and the ring (ring.py) above it, where bandwidth dominates.

The size rule is written once: the flat dispatch (flat.py) and the benchmark (the
incumbent a tuned rule must beat) call it too. Every input of the decision (the byte
count, the world size, the node layout, the rules file, the IPC agreement) is the same
on all ranks, so all ranks always pick the same algorithm. The names it gives are those
of the registry (algorithms.py), which refuses any other; a newly registered algorithm
runs under ``auto`` only once this module, or a rules file, names it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from mpi4py import MPI

from . import costmodel, tuning
from .faults import DEFAULT_TIMEOUT_S
from .topology import node_layout

IPC_MIN_BYTES = 1 << 20
"""CUDA buffers from this size up take the IPC path where every rank asked for it: below,
the staged path measured faster (one H100, 2 ranks: IPC at 0.31x the staged ring's speed
at 256 KiB, 2.4x at 4 MiB and 25x at 64 MiB; docs/BENCHMARKS.md)."""

CROSSOVER_BYTES_2_RANKS = 512 << 10
"""Below this recursive doubling beat the ring on 2 ranks (docs/BENCHMARKS.md)."""

# Where the node-aware variant measured faster than the flat algorithms (2 ranks on
# one node, docs/BENCHMARKS.md): from HIERARCHICAL_MIN_BYTES up to, not including,
# HIERARCHICAL_MAX_BYTES. Above, the ring's single-copy transfers move less memory.
HIERARCHICAL_MIN_BYTES = 0
HIERARCHICAL_MAX_BYTES = 16 << 20

# Across nodes with 2 ranks per node (docs/BENCHMARKS.md, "Across nodes"), from 1 MiB up:
# over 1 Gbit/s links 1.36-1.40x the flat ring (only one rank per node sends). Where the
# cores limit instead of the link (10 Gbit/s or unshaped links, 4 ranks on 2 cores) it
# loses to the ring from 16 MiB up (0.68-0.79x); `--tune` on the real nodes decides there.
# Smaller than 1 MiB: not measured.
HIERARCHICAL_ACROSS_NODES_MIN_BYTES = 1 << 20


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


def hierarchical_wins(comm: MPI.Comm, nbytes: int) -> bool:
    """Whether the size rule picks the node-aware variant.

    Only where it was measured to win: on one node, a buffer in the measured
    range; across nodes, where some ranks share a node (the node count is the
    same on every rank, unlike a node's own rank count), from
    ``HIERARCHICAL_ACROSS_NODES_MIN_BYTES`` up. Collective on the first call
    for ``comm`` (it learns the node layout).
    """
    layout = node_layout(comm)
    if layout.nodes == 1:
        return layout.local_size > 1 and HIERARCHICAL_MIN_BYTES <= nbytes < HIERARCHICAL_MAX_BYTES
    return layout.nodes < comm.Get_size() and nbytes >= HIERARCHICAL_ACROSS_NODES_MIN_BYTES


def builtin_algorithm(nbytes: int, comm: MPI.Comm, *, node_aware: bool = True) -> str:
    """The algorithm for ``nbytes`` on ``comm`` by the size rule.

    ``node_aware=False`` leaves the node-aware variant out (CUDA tensors, which
    it does not take; the exchange between node leaders, which is flat), so
    only the crossover decides; then nothing is collective.
    """
    if node_aware and hierarchical_wins(comm, nbytes):
        return "hierarchical"
    if nbytes < crossover_bytes(comm.Get_size()):
        return "recursive_doubling"
    return "ring"


def choose_algorithm(nbytes: int, comm: MPI.Comm, cuda: bool = False,
                     timeout_s: float = DEFAULT_TIMEOUT_S,
                     ipc_ready: Callable[[], bool] | None = None) -> tuple[str, int | None]:
    """What ``allreduce(algorithm="auto")`` runs for ``nbytes`` on ``comm``, and its
    segment size (None: the default): the whole of "auto", in this order.

    * CUDA buffers from ``IPC_MIN_BYTES`` up: the IPC path where ``ipc_ready()`` says
      every rank asked for it and can share its memory (collective the first time: ipc.py);
    * CPU buffers: a rules file measured on this machine, where one is active and fits
      the communicator (tuning.py);
    * otherwise the size rule, without the node-aware variant for CUDA buffers.
    """
    if cuda and nbytes >= IPC_MIN_BYTES and ipc_ready is not None and ipc_ready():
        return "ipc", None
    rules = None if cuda else tuning.rules_for(comm, timeout_s)
    if rules is not None:
        rule = rules.rule_for(nbytes)
        return rule.algorithm, rule.segment_bytes
    return builtin_algorithm(nbytes, comm, node_aware=not cuda), None
