"""Node-aware all-reduce: shared memory inside a node, a flat algorithm between nodes.

Ranks on one node can read each other's memory, so sending them messages
(each a copy through the MPI library) is a detour. This variant:

1. groups the ranks of each node (``Split_type(COMM_TYPE_SHARED)``) and gives
   them one MPI shared-memory window (``Win.Allocate_shared``) with a slot of
   twice the buffer's size per rank (two halves used in turn, so that a call
   needs no sync to know that the previous one is done with its half);
2. reduces inside the node: with L ranks on the node the buffer is cut into L
   slices and local rank i owns slice i. Each rank copies the slices it does
   not own into its slot; after a node-wide sync, rank i reads slice i from
   every other slot (in local-rank order), reduces it into its own tensor and
   publishes the result in its slot;
3. if there are several nodes, the node leaders (local rank 0) collect the
   node's result, all-reduce it among themselves with ``between_nodes`` (the
   flat dispatch of flat.py, which `allreduce` passes in: the ring, or
   recursive doubling when small), and publish it in the leader's slot;
4. every rank copies the finished slices (or the leader's whole result) back.

Per rank and per byte of buffer that is one copy in, a share of the
reduction, one copy to publish it and one copy out, with no MPI message and
two node-wide syncs per call. With 2 ranks on one node that beats the flat
algorithms below 16 MiB, where the data stays in cache and the ring's
per-message costs dominate; above, the ring moves less memory (its
single-copy transfers read the peer's buffer directly) and wins
(docs/BENCHMARKS.md). Across nodes only one rank per node sends, which
divides the inter-node traffic by the ranks per node.

The node layout, the shared window and the node-wide syncs (sequence
counters in each slot, which name a rank that fails to arrive) live in
topology.py. Buffers larger than the window block (16 MiB by default) are
reduced block by block, so /dev/shm holds at most two blocks per rank.

Each slice is reduced by one rank in a fixed order and then copied, so the
result is bitwise identical on all ranks and from run to run.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from mpi4py import MPI

from .ring import chunk_bounds
from .topology import NodeLayout, node_layout
from .transport import Buffer, Op

DEFAULT_WINDOW_BYTES = 16 << 20
"""Block size: larger buffers are reduced in blocks of this many bytes through the window."""


def hierarchical_allreduce(
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
    window_bytes: int = DEFAULT_WINDOW_BYTES,
) -> None:
    """Reduce the 1-D CPU tensor ``flat`` in place over ``comm``, node-aware.

    ``between_nodes``: the all-reduce among node leaders, called like
    `flat_allreduce` (flat.py), which is what `allreduce` passes.
    """
    if flat.is_cuda:
        raise ValueError("allreduce(hierarchical) works on CPU tensors; use the ring for CUDA")
    layout = node_layout(comm, ranks_per_node)
    itemsize = flat.element_size()
    block = max(1, window_bytes // itemsize)
    layout.ensure_window(min(flat.numel(), block) * itemsize, timeout_s)
    if flat.numel() <= block:
        _reduce_block(layout, flat, op, between_nodes, timeout_s, divide_by, segment_elems,
                      staging)
        return
    for start in range(0, flat.numel(), block):
        _reduce_block(layout, flat[start : start + block], op, between_nodes, timeout_s,
                      divide_by, segment_elems, staging)


def _reduce_block(layout: NodeLayout, flat: torch.Tensor, op: Op,
                  between_nodes: Callable[..., None], timeout_s: float, divide_by: int | None,
                  segment_elems: int, staging: bool | None) -> None:
    n, local, size = flat.numel(), layout.local, layout.local_size
    mine = Buffer(flat)
    # Blocks alternate between the two halves of every slot: a rank may fill one
    # half while a slower peer still copies the previous block out of the other.
    # Reusing a half two blocks later is safe: everyone has passed the "slots
    # written" sync of the block in between, so is done with this half.
    slots = layout.typed_slots(flat.dtype, layout.calls % 2)
    layout.calls += 1
    parts = chunk_bounds(n, size)
    a, b = parts[local], parts[local + 1]
    single_node = layout.nodes == 1

    slots[local].copy_from(0, a, mine, 0)
    slots[local].copy_from(b, n, mine, b)
    layout.sync("slots written", timeout_s)
    for j in range(size):
        if j != local:
            mine.reduce(a, b, slots[j], op, a)
    if single_node and divide_by is not None:
        mine.divide(a, b, divide_by)
    slots[local].copy_from(a, b, mine, a)
    layout.sync("slices reduced", timeout_s)

    if single_node:
        for j in range(size):
            if j != local:
                mine.copy_from(parts[j], parts[j + 1], slots[j], parts[j])
        return
    if local == 0:
        for j in range(1, size):
            mine.copy_from(parts[j], parts[j + 1], slots[j], parts[j])
        between_nodes(flat, op, layout.leaders, timeout_s=timeout_s, divide_by=divide_by,
                      segment_elems=segment_elems, staging=staging,
                      name="allreduce(hierarchical, between nodes)")
        slots[0].copy_from(0, n, mine, 0)
    layout.sync("node result published", timeout_s)
    if local != 0:
        mine.copy_from(0, n, slots[0], 0)
