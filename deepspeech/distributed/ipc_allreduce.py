"""All-reduce inside a node through the peers' GPU memory (CUDA IPC), never the host.

Ranks on one node map each other's buffers once (ipc.py) and then reduce by
reading their peers' memory with GPU kernels. With L ranks on the node the
buffer is cut into L slices (`chunk_bounds`, as the ring cuts its chunks) and
local rank i owns slice i:

1. inputs ready: each rank waits for its GPU work, then the node exchanges the
   buffers' addresses (ipc.py registers a buffer it has not seen);
2. reduce-scatter: rank i adds slice i of every peer into its own buffer, in the
   order i+1, i+2, ... (mod L), and divides it for a mean;
3. slices reduced: a node-wide sync;
4. all-gather: rank i copies slice j of rank j, for every j != i;
5. results copied: a node-wide sync, so that no rank returns (to a caller that
   may overwrite its buffer) while a peer still reads it.

A sync is: wait for this rank's GPU work, then a barrier of the node's ranks, so
a peer's kernels read only memory whose writes have finished. No rank writes
what another reads in the same phase: in step 2 rank i writes only slice i,
which nobody reads before step 4, where nobody writes it.

Order of the sum. Slice i is summed as ((x_i + x_{i+1}) + x_{i+2}) + ..., one
element-wise operation per peer in the buffer's dtype, which is exactly what the
ring (ring.py) does to chunk i: it starts at its owner and goes around. So on one
node a sum is bitwise the ring's (the staged path's for CUDA tensors, above the
recursive-doubling crossover) for any number of ranks, and with 2 ranks at every
size, since a + b = b + a; the same on every rank and in every run. (A mean over
a rank count that is not a power of two may differ in the last bit from a staged
buffer small enough to be divided on the host: CUDA divides by multiplying with
the reciprocal.) Integer sums (the fixed-point deterministic mode) are exact in
any order.

Across nodes, as in hierarchical.py: after step 3 each node leader (local rank 0)
copies its node's slices, all-reduces the node sums with the other leaders
through ``between_nodes`` (the flat dispatch: staged through host memory unless
MPI is CUDA-aware), the node syncs, and its other ranks copy the leader's result.

Per rank that is one pass over the buffer in GPU memory (its slice of the sum
reads L slices, the all-gather L-1), no host copy and three node-wide syncs per
call. A peer on another GPU is read through peer access (NVLink, PCIe): its
slice is copied to this rank's GPU before the reduction.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from mpi4py import MPI

from .ipc import node_sync, peer_tensors
from .ring import chunk_bounds
from .topology import node_layout
from .transport import Op, reduce_into


def ipc_allreduce(
    flat: torch.Tensor,
    op: Op,
    comm: MPI.Comm,
    *,
    between_nodes: Callable[..., None],
    timeout_s: float,
    divide_by: int | None,
    segment_elems: int,
    staging: bool | None = None,
    ranks_per_node: int | None = None,
) -> None:
    """Reduce the 1-D tensor ``flat`` in place over ``comm`` through the node peers' memory.

    Needs `ipc.unavailable` to have said yes for ``flat`` on ``comm`` (`allreduce`
    asks it and falls back otherwise). ``between_nodes``, ``segment_elems`` and
    ``staging``: for the leaders' exchange, as in `hierarchical_allreduce`.
    """
    layout = node_layout(comm, ranks_per_node)
    peers = peer_tensors(flat, layout, timeout_s)
    parts = chunk_bounds(flat.numel(), layout.local_size)
    single_node = layout.nodes == 1
    reduce_slice(flat, peers, parts, layout.local, op, divide_by if single_node else None)
    node_sync(layout, flat, "slices reduced", timeout_s)
    if single_node:
        gather_slices(flat, peers, parts, layout.local)
    else:
        if layout.local == 0:
            gather_slices(flat, peers, parts, 0)
            between_nodes(flat, op, layout.leaders, timeout_s=timeout_s, divide_by=divide_by,
                          segment_elems=segment_elems, staging=staging,
                          name="allreduce(ipc, between nodes)")
        node_sync(layout, flat, "node result published", timeout_s)
        if layout.local != 0:
            flat.copy_(_here(peers[0], flat.device))
    node_sync(layout, flat, "results copied", timeout_s)


def reduce_slice(mine: torch.Tensor, peers: list, parts: list[int], local: int, op: Op,
                 divide_by: int | None) -> None:
    """Step 2 for local rank ``local``: its slice of every peer (``peers[j]``, j != local)
    reduced into ``mine`` in the ring's order, then divided by ``divide_by``."""
    a, b = parts[local], parts[local + 1]
    if a == b:
        return
    target = mine[a:b]
    for k in range(1, len(peers)):
        peer = peers[(local + k) % len(peers)]
        reduce_into(target, _here(peer[a:b], mine.device), op)
    if divide_by is not None:
        target.div_(divide_by)


def gather_slices(mine: torch.Tensor, peers: list, parts: list[int], local: int) -> None:
    """Step 4 for local rank ``local``: every other rank's reduced slice into ``mine``."""
    for j, peer in enumerate(peers):
        a, b = parts[j], parts[j + 1]
        if j != local and b > a:
            mine[a:b].copy_(peer[a:b])


def _here(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` where element-wise kernels on ``device`` can read it."""
    return tensor if tensor.device == device else tensor.to(device)
