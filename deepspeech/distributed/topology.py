"""Which ranks share a node, and the shared memory they reduce through.

A node is a host: its ranks can read each other's memory, ranks on other
nodes are reached over the network. `node_layout` learns a communicator's
node structure once (``Split_type(COMM_TYPE_SHARED)``, or consecutive groups
of ``ranks_per_node`` ranks for tests) and caches it on the communicator as a
`NodeLayout`: the node communicator, the communicator of the node leaders
(local rank 0), the node count, and the node's MPI shared-memory window
(``Win.Allocate_shared``), one slot per local rank, that the node-aware
all-reduce (hierarchical.py) works in.

The node-wide syncs are sequence counters in a 64-byte header of each slot,
written after and read before a memory fence (``Win.Sync``), not MPI
barriers: they cost a microsecond and, when a rank fails to arrive, the
timeout names it.

The window and the node communicators live until `release_node_layouts`
(``Communicator.close`` calls it; an exit handler frees what is left). MPI must
not be left to free them: Open MPI 5 frees leftover windows late inside
``MPI_Finalize``, where the barrier of the window's free hung 6 of 9 2-rank
training runs.
"""

from __future__ import annotations

import atexit
import os
from typing import Any

import numpy as np
import torch
from mpi4py import MPI

from .faults import SPIN_POLLS, CommTimeoutError, Deadline, wait
from .transport import Buffer

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
                        deadline = Deadline(timeout_s)
                    elif deadline.passed():
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
