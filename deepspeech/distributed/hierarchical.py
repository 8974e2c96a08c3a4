"""Node-aware all-reduce: shared memory inside a node, the ring between nodes.

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
   node's result, all-reduce it among themselves with the flat algorithm (ring,
   or recursive doubling when small), and publish it in the leader's slot;
4. every rank copies the finished slices (or the leader's whole result) back.

Per rank and per byte of buffer that is one copy in, a share of the
reduction, one copy to publish it and one copy out, with no MPI message and
two node-wide syncs per call. With 2 ranks on one node that beats the flat
algorithms below 16 MiB, where the data stays in cache and the ring's
per-message costs dominate; above, the ring moves less memory (its
single-copy transfers read the peer's buffer directly) and wins
(docs/BENCHMARKS.md). Across nodes only one rank per node sends, which
divides the inter-node traffic by the ranks per node.

The node-wide syncs are sequence counters in a 64-byte header of each slot,
written after and read before a memory fence (``Win.Sync``), not MPI
barriers: they cost a microsecond and, when a rank fails to arrive, the
timeout names it. Buffers larger than the window block (16 MiB by default)
are reduced block by block, so /dev/shm holds at most two blocks per rank.

Each slice is reduced by one rank in a fixed order and then copied, so the
result is bitwise identical on all ranks and from run to run.

The window and the node communicators live until `release_node_layouts`
(``Communicator.close`` calls it; an exit handler frees what is left). MPI must
not be left to free them: Open MPI 5 frees leftover windows late inside
``MPI_Finalize``, where the barrier of the window's free hung 6 of 9 2-rank
training runs.
"""

from __future__ import annotations

import atexit
import os
import time
from typing import Any

import numpy as np
import torch
from mpi4py import MPI

from .faults import SPIN_POLLS, CommTimeoutError, wait
from .ring import chunk_bounds
from .transport import Buffer, Op

DEFAULT_WINDOW_BYTES = 16 << 20
_HEADER = 64  # bytes: one cache line holding the sync counter

_keyval: int | None = None
_live_layouts: list[NodeLayout] = []  # creation order, for the exit handler


class NodeLayout:
    """The node structure of a communicator and the node's shared window (cached on it)."""

    def __init__(self, comm: MPI.Comm, ranks_per_node: int | None) -> None:
        rank = comm.Get_rank()
        if ranks_per_node is None:
            self.node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
        else:  # tests and launchers that know better: consecutive ranks share a "node"
            self.node = comm.Split(rank // ranks_per_node, key=rank)
        self.local = self.node.Get_rank()
        self.local_size = self.node.Get_size()
        self.leaders = comm.Split(0 if self.local == 0 else MPI.UNDEFINED, key=rank)
        leader_count = self.leaders.Get_size() if self.local == 0 else 0
        self.nodes = self.node.bcast(leader_count, root=0)
        self.world_ranks: list[int] = self.node.allgather(rank)
        self.window: MPI.Win | None = None
        self.capacity = 0  # data bytes per half slot
        self.calls = 0  # blocks reduced so far: their parity picks the half
        self.slots: list[torch.Tensor] = []  # uint8 views of every local rank's two halves
        self.flags: list[np.ndarray] = []  # every local rank's sync counter
        self.sequence = 0
        self._typed: dict[tuple[torch.dtype, int], list[Buffer]] = {}

    def typed_slots(self, dtype: torch.dtype, half: int) -> list[Buffer]:
        """Every local rank's slot half ``half`` seen as elements of ``dtype`` (cached)."""
        views = self._typed.get((dtype, half))
        if views is None:
            start, stop = half * self.capacity, (half + 1) * self.capacity
            views = [Buffer(slot[start:stop].view(dtype)) for slot in self.slots]
            self._typed[dtype, half] = views
        return views

    def ensure_window(self, nbytes: int, timeout_s: float) -> None:
        """Make every slot hold at least ``nbytes`` (collective over the node)."""
        if nbytes <= self.capacity:
            return
        if self.window is not None:
            self.window.Unlock_all()
            self.window.Free()
        capacity = 1 << max(nbytes - 1, 4095).bit_length()  # grow by powers of two
        info = MPI.Info.Create()
        info.Set("alloc_shared_noncontig", "true")  # each slot on its owner's NUMA node
        self.window = MPI.Win.Allocate_shared(_HEADER + 2 * capacity, 1, info, self.node)
        info.Free()
        self.window.Lock_all(MPI.MODE_NOCHECK)
        self.slots, self.flags = [], []
        for j in range(self.local_size):
            memory, _ = self.window.Shared_query(j)
            raw = np.frombuffer(memory, dtype=np.uint8, count=_HEADER + 2 * capacity)
            self.flags.append(raw[:8].view(np.int64))
            self.slots.append(torch.from_numpy(raw[_HEADER:]))
        self.capacity = capacity
        self.calls = 0
        self._typed = {}
        self.flags[self.local][0] = 0
        self.sequence = 0
        self.window.Sync()
        rank = self.world_ranks[self.local]
        wait(self.node.Ibarrier(), timeout_s, lambda: CommTimeoutError(
            f"allreduce(hierarchical) on rank {rank}: the ranks of this node "
            f"{self.world_ranks} did not all create the shared window within {timeout_s} s",
            rank=rank))

    def sync(self, stage: str, timeout_s: float) -> None:
        """Node-wide barrier on the slot counters; names the ranks missing on timeout."""
        window = self.window
        assert window is not None
        window.Sync()  # our writes to shared memory are visible before the counter
        self.sequence += 1
        sequence = self.sequence
        self.flags[self.local][0] = sequence
        deadline = None
        polls = 0
        for j, flag in enumerate(self.flags):
            while flag[0] < sequence:
                polls += 1
                if polls > SPIN_POLLS:
                    os.sched_yield()
                    if deadline is None:
                        deadline = time.monotonic() + timeout_s
                    elif time.monotonic() > deadline:
                        raise self._late(stage, sequence, timeout_s, j)
                window.Sync()
        window.Sync()  # and their writes are visible to our reads

    def _late(self, stage: str, sequence: int, timeout_s: float, first: int) -> CommTimeoutError:
        missing = [self.world_ranks[j] for j, flag in enumerate(self.flags) if flag[0] < sequence]
        rank = self.world_ranks[self.local]
        who = ", ".join(f"rank {r}" for r in missing) or f"rank {self.world_ranks[first]}"
        return CommTimeoutError(
            f"allreduce(hierarchical) on rank {rank}: {who} did not arrive within "
            f"{timeout_s} s ({stage})", rank=rank, peer=missing[0] if missing else None)

    def free(self) -> None:
        """Free the window and the node communicators (collective over the node)."""
        if self.window is not None:
            self.window.Unlock_all()
            self.window.Free()
            self.window = None
        self.slots, self.flags, self._typed, self.capacity = [], [], {}, 0
        if self.leaders != MPI.COMM_NULL:
            self.leaders.Free()
        self.node.Free()


def node_layout(comm: MPI.Comm, ranks_per_node: int | None = None) -> NodeLayout:
    """The (cached) node layout of ``comm``; collective on first use."""
    global _keyval
    if _keyval is None:
        _keyval = MPI.Comm.Create_keyval()
    layouts: dict[Any, NodeLayout] | None = comm.Get_attr(_keyval)
    if layouts is None:
        layouts = {}
        comm.Set_attr(_keyval, layouts)
    if ranks_per_node not in layouts:
        layouts[ranks_per_node] = NodeLayout(comm, ranks_per_node)
        _live_layouts.append(layouts[ranks_per_node])
    return layouts[ranks_per_node]


def release_node_layouts(comm: MPI.Comm) -> None:
    """Free the node layouts cached on ``comm`` (collective over ``comm``)."""
    cached = comm.Get_attr(_keyval) if _keyval is not None else None
    if cached is None:
        return
    comm.Delete_attr(_keyval)
    for layout in cached.values():
        _live_layouts.remove(layout)
        layout.free()


def _release_leftover_layouts() -> None:
    """Exit handler: free the layouts nobody released, in the order they were made.

    All ranks share that order unless several threads made layouts at once;
    such programs close their communicators themselves, in a fixed order.
    """
    if MPI.Is_finalized():
        return
    while _live_layouts:
        _live_layouts.pop(0).free()


atexit.register(_release_leftover_layouts)


def hierarchical_allreduce(
    flat: torch.Tensor,
    op: Op,
    comm: MPI.Comm,
    *,
    timeout_s: float,
    divide_by: int | None,
    segment_elems: int,
    staging: bool | None = None,
    ranks_per_node: int | None = None,
    window_bytes: int = DEFAULT_WINDOW_BYTES,
) -> None:
    """Reduce the 1-D CPU tensor ``flat`` in place over ``comm``, node-aware."""
    if flat.is_cuda:
        raise ValueError("allreduce(hierarchical) works on CPU tensors; use the ring for CUDA")
    layout = node_layout(comm, ranks_per_node)
    itemsize = flat.element_size()
    block = max(1, window_bytes // itemsize)
    layout.ensure_window(min(flat.numel(), block) * itemsize, timeout_s)
    if flat.numel() <= block:
        _reduce_block(layout, flat, op, timeout_s, divide_by, segment_elems, staging)
        return
    for start in range(0, flat.numel(), block):
        _reduce_block(layout, flat[start : start + block], op, timeout_s, divide_by,
                      segment_elems, staging)


def _reduce_block(layout: NodeLayout, flat: torch.Tensor, op: Op, timeout_s: float,
                  divide_by: int | None, segment_elems: int, staging: bool | None) -> None:
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
        from .allreduce import _flat_allreduce

        for j in range(1, size):
            mine.copy_from(parts[j], parts[j + 1], slots[j], parts[j])
        _flat_allreduce(flat, op, layout.leaders, timeout_s=timeout_s, divide_by=divide_by,
                        segment_elems=segment_elems, staging=staging,
                        name="allreduce(hierarchical, between nodes)")
        slots[0].copy_from(0, n, mine, 0)
    layout.sync("node result published", timeout_s)
    if local != 0:
        mine.copy_from(0, n, slots[0], 0)


# Where the node-aware variant measured faster than the flat algorithms (2 ranks on
# one node, docs/BENCHMARKS.md): from HIERARCHICAL_MIN_BYTES up to, not including,
# HIERARCHICAL_MAX_BYTES. Above, the ring's single-copy transfers move less memory.
HIERARCHICAL_MIN_BYTES = 0
HIERARCHICAL_MAX_BYTES = 16 << 20


def hierarchical_wins(comm: MPI.Comm, nbytes: int) -> bool:
    """Whether ``algorithm="auto"`` should run the node-aware variant.

    Only where it was measured to win: every rank on one node (several nodes
    could not be measured here) and a buffer in the measured range. Collective
    on the first call for ``comm`` (it learns the node layout).
    """
    if not HIERARCHICAL_MIN_BYTES <= nbytes < HIERARCHICAL_MAX_BYTES:
        return False
    layout = node_layout(comm)
    return layout.nodes == 1 and layout.local_size > 1
