"""Opening the buffers of the other ranks of a node: CUDA IPC handles passed over MPI.

Processes on one node can map each other's GPU memory: the owner asks the
driver for a handle to an allocation (``cudaIpcGetMemHandle``), hands it to a
peer, and the peer maps the allocation into its own address space
(``cudaIpcOpenMemHandle``); the peer's kernels then read the owner's memory
directly, with no copy through the host. torch wraps both ends, as
torch/multiprocessing/reductions.py uses them: ``UntypedStorage._share_cuda_()``
gives the handle (with a reference counter that keeps the owner's block
allocated while a peer maps it, and an event the peer waits on when it opens
it) and ``UntypedStorage._new_shared_cuda(...)`` opens it. The node-aware IPC
all-reduce (ipc_allreduce.py) builds on this module:

* `unavailable`: whether IPC works for a tensor on a communicator, decided once
  per communicator and device by a probe (each rank shares a small buffer, each
  peer on its node opens and reads it) and agreed by all ranks, so that all of
  them use IPC or none does; the reason why not is logged once;
* `peer_tensors`: every node rank's buffer of the current call. A buffer is
  registered once: the ranks of the node exchange handles (an MPI allgather of
  picklable tuples) and open them. Afterwards each call exchanges only the
  (address, size) of each rank's buffer, which is also the node-wide barrier
  that says every input is ready; a combination not seen before is registered
  (a new tensor, or a new combination of known ones). At most `MAX_REGISTERED`
  registrations stay, the least recently used go first.

A handle is opened at most once per process and kept while its owner's storage
lives, however often registrations that use it come and go: torch counts the
openers of a CUDA IPC handle (the reference counter that keeps the owner's block
allocated), one per process. Each rank exports a storage once, under a serial
number of its own, and its peers keep what they opened under (rank, serial). When
a rank's exported storage is freed it says so in the next call's exchange; every
rank of the node then drops the peers' mapping of it and each registration that
used it, so an address reused by a new tensor is never read through a stale
mapping, and the owner's memory is released.

How memory is shared is an `Opener`: `CudaOpener` unless a test injects another
(`use_opener`), e.g. one that shares CPU tensors through shared-memory files, so
that the exchange, the cache and the algorithm run on machines without a GPU.
"""

from __future__ import annotations

import functools
import logging
import os
import pickle
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from mpi4py import MPI
from torch.multiprocessing.reductions import StorageWeakRef

from .faults import CommTimeoutError, allgather_bytes, wait
from .topology import NodeLayout, node_layout

log = logging.getLogger(__name__)

ENVIRONMENT_VARIABLE = "DEEPSPEECH_CUDA_IPC"
"""``1`` on every rank: "auto" may send large CUDA buffers through IPC (choice.py);
``0`` (on any rank) keeps CUDA tensors on the staged path even where ``ipc`` is named.
Unset, only a named ``ipc`` takes it: the all-reduce alone is measured on a GPU, training
through it is not yet. A caller that settled
the question itself (training's execution plan) passes ``asked`` instead."""

MAX_REGISTERED = 32
"""Buffers kept registered per communicator: more than a model has gradient buckets,
so buckets kept between steps stay registered. An evicted registration's peer storages
stay open (each handle is opened once per process): registering it again opens nothing."""

_PROBE_ELEMENTS = 64


class IpcUnavailable(RuntimeError):
    """This process cannot map a peer's memory; the message says why."""


class Opener(Protocol):
    """How the memory of a rank's storage is handed to another process of its node."""

    def unavailable(self, tensor: torch.Tensor) -> str | None:
        """Why tensors like ``tensor`` cannot be shared at all (None: they can)."""

    def share(self, storage: torch.UntypedStorage) -> Any:
        """A picklable handle to ``storage`` that another process of the node can open."""

    def open(self, handle: Any, device: torch.device) -> torch.UntypedStorage:
        """The storage behind a peer's ``handle``, for kernels on ``device``."""


@functools.cache
def _visible_gpus() -> dict[str, int]:
    """UUID -> index of every GPU this process sees (ranks may number them differently)."""
    return {str(torch.cuda.get_device_properties(i).uuid): i
            for i in range(torch.cuda.device_count())}


class CudaOpener:
    """CUDA IPC through torch's own handles; a handle names its GPU by UUID."""

    def unavailable(self, tensor: torch.Tensor) -> str | None:
        if not tensor.is_cuda:
            return "CPU tensors (CUDA IPC shares GPU memory only)"
        if os.environ.get(ENVIRONMENT_VARIABLE, "1").strip().lower() in ("0", "false", "no"):
            return f"{ENVIRONMENT_VARIABLE}=0"
        return None

    def share(self, storage: torch.UntypedStorage) -> Any:
        uuid = str(torch.cuda.get_device_properties(storage.device.index).uuid)
        return uuid, storage._share_cuda_()

    def open(self, handle: Any, device: torch.device) -> torch.UntypedStorage:
        uuid, fields = handle
        index = _visible_gpus().get(uuid)
        if index is None:
            raise IpcUnavailable(f"its GPU {uuid} is not visible to this process "
                                 "(CUDA_VISIBLE_DEVICES)")
        if index != device.index and not torch.cuda.can_device_access_peer(device.index, index):
            raise IpcUnavailable(f"cuda:{device.index} has no peer access to cuda:{index}")
        # (owner's device index, handle, size, offset, ref counter, its offset, event,
        # event sync required): the index is in the owner's numbering; the event is not
        # waited on, the owner synchronizes before any peer reads (and opening it on each
        # registration would leak an event handle each time)
        _, memory, size, offset, counter, counter_offset, event, _ = fields
        return torch.UntypedStorage._new_shared_cuda(index, memory, size, offset, counter,
                                                     counter_offset, event, False)


_opener: Opener = CudaOpener()


def use_opener(opener: Opener | None) -> None:
    """Share memory with ``opener`` from now on (None: CUDA IPC); before any all-reduce."""
    global _opener
    _opener = CudaOpener() if opener is None else opener


@dataclass
class _Export:
    """A storage of this rank that its node peers may have opened."""

    serial: int  # its name in the peers' caches: unique in this process
    alive: StorageWeakRef
    handle: Any


@dataclass
class _Registration:
    serials: tuple[int, ...]  # each node rank's export, by which the registration goes stale
    peers: list[torch.Tensor | None]  # each node rank's buffer, None for this rank's own


class _NodeState:
    """What this module keeps per node layout (so per communicator)."""

    def __init__(self) -> None:
        self.reasons: dict[tuple[torch.device, Opener], str] = {}  # "": IPC works
        self.auto: bool | None = None  # every rank asked "auto" to take IPC
        self.registered: OrderedDict[tuple, _Registration] = OrderedDict()
        self.exports: dict[int, _Export] = {}  # storage address -> this rank's export
        self.freed: list[int] = []  # serials of exports freed here, not yet announced
        self.opened: dict[tuple[int, int], torch.Tensor] = {}  # (local rank, serial) -> bytes
        self.registrations = 0
        self.serials = 0


_states: weakref.WeakKeyDictionary[NodeLayout, _NodeState] = weakref.WeakKeyDictionary()
_logged: set[str] = set()


def _state(layout: NodeLayout) -> _NodeState:
    state = _states.get(layout)
    if state is None:
        state = _states[layout] = _NodeState()
    return state


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


def node_sync(layout: NodeLayout, flat: torch.Tensor, stage: str, timeout_s: float) -> None:
    """This rank's GPU work on ``flat`` is done, then a barrier of the node's ranks."""
    if flat.is_cuda:
        torch.cuda.current_stream(flat.device).synchronize()
    wait(layout.node.Ibarrier(), timeout_s, lambda: _late(layout, stage, timeout_s))


def _late(layout: NodeLayout, stage: str, timeout_s: float) -> CommTimeoutError:
    rank = layout.world_ranks[layout.local]
    return CommTimeoutError(f"allreduce(ipc) on rank {rank}: not all ranks of this node "
                            f"{layout.world_ranks} arrived within {timeout_s} s ({stage})",
                            rank=rank)


def ready_for_auto(flat: torch.Tensor, comm: MPI.Comm, timeout_s: float,
                   ranks_per_node: int | None = None, asked: bool | None = None) -> bool:
    """Whether "auto" may take the IPC path for ``flat`` (a CUDA tensor): asked for on every
    rank (``asked``, or where None ``ENVIRONMENT_VARIABLE``; agreed once per communicator,
    so that no two ranks choose differently) and possible. How large a buffer must be is
    the size rule's part (choice.py)."""
    state = _state(node_layout(comm, ranks_per_node))
    if state.auto is None:
        if asked is None:
            asked = os.environ.get(ENVIRONMENT_VARIABLE, "").strip() == "1"
        state.auto = all(part == b"1" for part in allgather_bytes(
            comm, b"1" if asked else b"0", timeout_s, "allreduce(ipc) auto"))
    if not state.auto:
        return False
    return unavailable(flat, comm, timeout_s, ranks_per_node) is None


def unavailable(flat: torch.Tensor, comm: MPI.Comm, timeout_s: float,
                ranks_per_node: int | None = None, *, forced: bool = False) -> str | None:
    """Why the IPC all-reduce cannot run for ``flat`` on ``comm`` (None: it can).

    Collective over ``comm`` the first time per device and opener, then cached:
    every rank gets the same answer. A reason is logged once per process, as a
    warning where IPC was asked for by name (``forced``).
    """
    layout = node_layout(comm, ranks_per_node)
    state = _state(layout)
    key = (flat.device, _opener)
    reason = state.reasons.get(key)
    if reason is None:
        if layout.nodes == comm.Get_size():
            mine = _opener.unavailable(flat) or "no two ranks share a node"
        else:
            mine = _probe(flat, layout, timeout_s)
        reason = state.reasons[key] = _agree(comm, mine, timeout_s)
        if reason and reason not in _logged and comm.Get_rank() == 0:
            _logged.add(reason)
            (log.warning if forced else log.info)(
                "allreduce: no CUDA IPC for %s tensors (%s); the size rule's algorithm "
                "runs instead (for GPU buffers: staged through host memory)",
                flat.device.type, reason)
    return reason or None


def _agree(comm: MPI.Comm, mine: str, timeout_s: float) -> str:
    """The first rank's reason, the same on every rank ("" if no rank has one)."""
    reasons = [part.decode() for part in allgather_bytes(
        comm, mine.encode(), timeout_s, "allreduce(ipc) agreement")]
    found = [(rank, reason) for rank, reason in enumerate(reasons) if reason]
    if not found:
        return ""
    if len(found) == len(reasons) and len(set(reasons)) == 1:
        return reasons[0]
    return f"rank {found[0][0]}: {found[0][1]}"


def _probe(flat: torch.Tensor, layout: NodeLayout, timeout_s: float) -> str:
    """This rank's reason not to use IPC ("" if none): whether it can share a small
    buffer and read each node peer's. Collective over the node, whatever the answer."""
    reason = _opener.unavailable(flat) or ""
    size, me = layout.local_size, layout.local
    values = torch.arange(size * _PROBE_ELEMENTS, dtype=torch.int32).view(size, -1)
    probe, handle = None, None
    if not reason and size > 1:
        probe = values[me].to(flat.device, copy=True)
        try:
            handle = _opener.share(probe.untyped_storage())
        except Exception as error:  # any failure to share means: not this way
            reason = f"cannot share its memory: {_first_line(error)}"
        if flat.is_cuda:
            torch.cuda.synchronize(flat.device)
    handles = [pickle.loads(blob) for blob in allgather_bytes(
        layout.node, pickle.dumps(handle), timeout_s, "allreduce(ipc) probe")]
    for j, peer in enumerate(handles):
        if reason:
            break
        if j == me or peer is None:
            continue  # a rank that cannot share says so itself
        try:
            seen = _bytes_of(_opener.open(peer, flat.device))[: _PROBE_ELEMENTS * 4]
            if not torch.equal(seen.view(torch.int32).cpu(), values[j]):
                reason = f"read wrong values through rank {layout.world_ranks[j]}'s handle"
        except Exception as error:  # the driver refused: fall back, saying why
            reason = (f"cannot open the memory of rank {layout.world_ranks[j]}: "
                      f"{_first_line(error)}")
    node_sync(layout, flat, "probe read", timeout_s)  # ``probe`` lives until every peer read it
    return reason


def _bytes_of(storage: torch.UntypedStorage) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)


def peer_tensors(flat: torch.Tensor, layout: NodeLayout,
                 timeout_s: float) -> list[torch.Tensor | None]:
    """Each node rank's buffer of this call (None at this rank's index), once every
    rank's input is ready. Collective over the node; registers ``flat`` if needed."""
    if layout.local_size == 1:
        return [None]  # alone on its node: nothing to share
    state = _state(layout)
    _note_freed(state)
    mine = np.array([flat.data_ptr(), flat.numel() * flat.element_size(), len(state.freed)],
                    dtype=np.int64)
    everyone = np.empty((layout.local_size, 3), dtype=np.int64)
    if flat.is_cuda:
        torch.cuda.current_stream(flat.device).synchronize()
    wait(layout.node.Iallgather(mine, everyone), timeout_s,
         lambda: _late(layout, "inputs ready", timeout_s))
    if len(set(everyone[:, 1].tolist())) > 1:
        raise ValueError(f"allreduce(ipc): the ranks of a node {layout.world_ranks} pass "
                         f"buffers of different sizes {everyone[:, 1].tolist()} (bytes)")
    if everyone[:, 2].any():
        _forget_freed(layout, state, timeout_s)
    key = (flat.dtype, flat.device, tuple(map(tuple, everyone[:, :2].tolist())))
    entry = state.registered.get(key)
    if entry is None:
        entry = _register(flat, layout, state, timeout_s)
        state.registered[key] = entry
        if len(state.registered) > MAX_REGISTERED:
            state.registered.popitem(last=False)  # its mappings stay in ``state.opened``
    else:
        state.registered.move_to_end(key)
    return entry.peers


def _note_freed(state: _NodeState) -> None:
    """Move this rank's exports whose storage was freed to ``state.freed``."""
    for address, export in list(state.exports.items()):
        if export.alive.expired():
            del state.exports[address]
            state.freed.append(export.serial)


def _forget_freed(layout: NodeLayout, state: _NodeState, timeout_s: float) -> None:
    """Every rank's freed exports, announced to the node: their mappings and the
    registrations that use them go on every rank (collective over the node)."""
    freed = [set(pickle.loads(blob)) for blob in allgather_bytes(
        layout.node, pickle.dumps(state.freed), timeout_s, "allreduce(ipc) freed buffers")]
    state.freed.clear()
    for j, serials in enumerate(freed):
        for serial in serials:
            state.opened.pop((j, serial), None)
    for key, entry in list(state.registered.items()):
        if any(serial in serials for serial, serials in zip(entry.serials, freed, strict=True)):
            del state.registered[key]


def _register(flat: torch.Tensor, layout: NodeLayout, state: _NodeState,
              timeout_s: float) -> _Registration:
    """Exchange handles to ``flat`` with the node and open the peers' not yet open
    (collective)."""
    storage = flat.untyped_storage()
    itemsize = flat.element_size()
    me, rank = layout.local, layout.world_ranks[layout.local]
    serial = -1
    try:
        export = _export(state, storage)
        serial = export.serial
        handle = (export.handle, flat.storage_offset() * itemsize, flat.numel() * itemsize)
        problem = ""
    except Exception as error:
        handle, problem = None, f"rank {rank} cannot share its buffer: {_first_line(error)}"
    exchanged = [pickle.loads(blob) for blob in allgather_bytes(
        layout.node, pickle.dumps((serial, handle, problem)), timeout_s,
        "allreduce(ipc) registration")]
    peers: list[torch.Tensor | None] = [None] * layout.local_size
    problems = [problem for _, _, problem in exchanged if problem]
    for j, (peer_serial, peer, _) in enumerate(exchanged):
        if j == me or peer is None:
            continue
        shared, offset, nbytes = peer
        try:
            raw = state.opened.get((j, peer_serial))
            if raw is None:
                raw = state.opened[(j, peer_serial)] = _bytes_of(
                    _opener.open(shared, flat.device))
            peers[j] = raw[offset : offset + nbytes].view(flat.dtype)
        except Exception as error:
            problems.append(f"rank {rank} cannot open rank {layout.world_ranks[j]}'s buffer: "
                            f"{_first_line(error)}")
    everyone = allgather_bytes(layout.node, "; ".join(problems).encode(), timeout_s,
                               "allreduce(ipc) registration")
    failed = sorted({text.decode() for text in everyone if text})
    if failed:
        raise RuntimeError(f"allreduce(ipc) on rank {rank}: {'; '.join(failed)} (the probe "
                           f"had passed); set {ENVIRONMENT_VARIABLE}=0 to use the staged path")
    state.registrations += 1
    return _Registration(tuple(peer_serial for peer_serial, _, _ in exchanged), peers)


def _export(state: _NodeState, storage: torch.UntypedStorage) -> _Export:
    """This rank's export of ``storage``, made once per storage."""
    export = state.exports.get(storage.data_ptr())
    if export is None or export.alive.expired():
        if export is not None:
            state.freed.append(export.serial)
        state.serials += 1
        export = state.exports[storage.data_ptr()] = _Export(
            state.serials, StorageWeakRef(storage), _opener.share(storage))
    return export


def registrations(comm: MPI.Comm, ranks_per_node: int | None = None) -> tuple[int, int]:
    """(registrations made so far, registrations held) for ``comm``."""
    state = _state(node_layout(comm, ranks_per_node))
    return state.registrations, len(state.registered)


def peers_open(comm: MPI.Comm, ranks_per_node: int | None = None) -> int:
    """How many peer storages this process holds open for ``comm``."""
    return len(_state(node_layout(comm, ranks_per_node)).opened)
