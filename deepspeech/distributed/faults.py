"""Timeouts and fail-fast checks for collective operations.

A synchronous data-parallel job is only as alive as its slowest rank: if one
process dies or hangs, every other one blocks in the next collective, and a
plain blocking ``MPI_Wait`` blocks forever, burning a cluster allocation while
the log says nothing. So no collective in this package blocks in MPI (only
one-time set-up does, where MPI has no non-blocking form: splitting a
communicator by node, creating a shared window, ``duplicate``). Every wait is a
poll of ``Request.Test`` against a deadline; when the deadline passes we raise
`CommTimeoutError`, whose message names the rank, the peer it was waiting for,
the operation and the step ("allreduce(ring) on rank 1: no message from rank 0
within 5.0 s (reduce-scatter step 0)"). Raising is not enough to end an MPI
job: the other ranks are still waiting. The caller's top level turns the
exception into ``MPI_Abort`` with `abort_on_error`, which makes ``mpirun`` kill
the whole job. After a timeout the communicator is not usable any more
(messages of the abandoned collective may still arrive): abort, do not retry.

Polling spins for a short while (a message usually arrives within
microseconds when ranks have a core each) and then yields the CPU between
polls, so oversubscribed runs (more ranks than cores) still make progress.
The timeout counts only time in which the waiting rank itself ran (`Deadline`):
a rank frozen (SIGSTOP, a debugger) past it and then resumed, as the launcher
does before it kills the ranks of an aborted job, would otherwise blame the
peer it was waiting for and abort the job a second time while the first abort
tears it down.

`check_same` catches ranks that disagree before any work starts (a different
config, a different model shape): they would otherwise deadlock or, worse,
silently all-reduce mismatched buffers. Only digests travel, unless they
differ: then the values do too, and a value that is a JSON object (a resolved
config) is named by the dotted keys that differ.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from mpi4py import MPI

DEFAULT_TIMEOUT_S = 300.0
"""Default limit on any single wait; a healthy step never waits this long."""
STALL_S = 1.0
"""A gap this long between two looks at the clock of one wait means that this process
was not running (stopped, or starved of CPU), not that its peer was late."""

def _spin_polls() -> int:
    """Polls before a waiting rank starts yielding its CPU to others.

    About 0.5 ms of busy polling when every rank has a core of its own; hardly
    any when the node runs more ranks than it has cores (oversubscribed), where
    a spinning rank would only delay the peer it waits for.
    """
    local = os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE") or os.environ.get("MPI_LOCALNRANKS")
    if local and local.isdigit() and int(local) > (os.cpu_count() or 1):
        return 16
    return 2000


SPIN_POLLS = _spin_polls()

log = logging.getLogger(__name__)


class CommTimeoutError(RuntimeError):
    """A collective waited longer than its timeout for a peer."""

    def __init__(self, message: str, *, rank: int, peer: int | None = None) -> None:
        super().__init__(message)
        self.rank = rank
        self.peer = peer


class RankMismatchError(ValueError):
    """Ranks disagree on a value that must be identical everywhere."""


class Deadline:
    """``timeout_s`` of waiting in which this process ran: time it spent stopped is not
    counted (see the module's docstring)."""

    __slots__ = ("_end", "_last")

    def __init__(self, timeout_s: float) -> None:
        self._last = time.monotonic()
        self._end = self._last + timeout_s

    def passed(self) -> bool:
        now = time.monotonic()
        if now - self._last > STALL_S:
            self._end += now - self._last
        self._last = now
        return now > self._end


def wait(
    request: MPI.Request,
    timeout_s: float,
    on_timeout: Callable[[], CommTimeoutError],
    progress: Callable[[], None] | None = None,
) -> None:
    """Poll ``request`` until it completes; raise ``on_timeout()`` after ``timeout_s``.

    ``progress`` (if any) runs every few polls: a chance to post more sends
    while waiting, which some pipelines need to avoid deadlock.
    """
    if request.Test():
        return
    deadline = Deadline(timeout_s)
    polls = 0
    test = request.Test
    while not test():
        polls += 1
        if polls & 15 == 0:
            if progress is not None:
                progress()
            if polls > SPIN_POLLS:
                os.sched_yield()
            if polls & 63 == 0 and deadline.passed():
                raise on_timeout()


def digest(value: bytes | str) -> bytes:
    """32-byte SHA-256 of ``value`` (str is UTF-8 encoded)."""
    return hashlib.sha256(_encoded(value)).digest()


def _encoded(value: bytes | str) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def check_same(
    comm: MPI.Comm, value: bytes | str, what: str, timeout_s: float = DEFAULT_TIMEOUT_S
) -> None:
    """Raise `RankMismatchError` on every rank unless all ranks hold the same ``value``.

    Only a 32-byte hash travels while the ranks agree, so ``value`` may be a whole
    serialised config; when they do not, the values travel too, to say what differs.
    """
    size = comm.Get_size()
    if size == 1:
        return
    mine = bytearray(digest(value))
    everyone = bytearray(32 * size)
    rank = comm.Get_rank()
    request = comm.Iallgather([mine, MPI.BYTE], [everyone, MPI.BYTE])
    wait(
        request,
        timeout_s,
        lambda: CommTimeoutError(
            f"check_same({what}) on rank {rank}: not all ranks answered within {timeout_s} s",
            rank=rank,
        ),
    )
    digests = [bytes(everyone[32 * r : 32 * (r + 1)]) for r in range(size)]
    if len(set(digests)) > 1:  # the same on every rank: all of them exchange the values
        values = allgather_bytes(comm, _encoded(value), timeout_s, f"check_same({what})")
        raise_if_different(digests, what, values)


def allgather_bytes(comm: MPI.Comm, data: bytes, timeout_s: float, operation: str) -> list[bytes]:
    """Every rank's ``data``, in rank order, on every rank (each wait bounded)."""
    rank, size = comm.Get_rank(), comm.Get_size()

    def late() -> CommTimeoutError:
        return CommTimeoutError(f"{operation} on rank {rank}: not all {size} ranks took part "
                                f"within {timeout_s} s", rank=rank)

    mine = np.frombuffer(data, dtype=np.uint8)
    counts = np.zeros(size, dtype=np.int64)
    wait(comm.Iallgather(np.array([mine.size], dtype=np.int64), counts), timeout_s, late)
    everything = np.empty(int(counts.sum()), dtype=np.uint8)
    displacements = np.concatenate([[0], np.cumsum(counts)[:-1]])
    wait(comm.Iallgatherv(mine, [everything, counts, displacements, MPI.BYTE]), timeout_s,
         late)
    return [everything[d : d + c].tobytes()
            for d, c in zip(displacements, counts, strict=True)]


def raise_if_different(digests: list[bytes], what: str,
                       values: list[bytes | str] | None = None) -> None:
    """Raise `RankMismatchError` naming the groups of ranks unless all ``digests`` agree;
    with every rank's ``values``, also what differs between them."""
    groups: dict[bytes, list[int]] = {}
    for r, value in enumerate(digests):
        groups.setdefault(value, []).append(r)
    if len(groups) == 1:
        return
    parts = [
        f"{_ranks(ranks)} {'have' if len(ranks) > 1 else 'has'} {h.hex()[:12]}"
        for h, ranks in sorted(groups.items(), key=lambda item: item[1][0])
    ]
    differences = _differing_keys(values) if values is not None else ""
    raise RankMismatchError(
        f"{what} differs across ranks: {'; '.join(parts)}{differences} "
        "(every rank must be started with the same inputs)"
    )


MAX_KEYS_SHOWN = 10


def _differing_keys(values: list[bytes | str]) -> str:
    """", keys that differ: train.seed (rank 0: 0; rank 1: 1)" when every value is a JSON
    object; empty otherwise."""
    try:
        parsed = [json.loads(value) for value in values]
    except (UnicodeDecodeError, ValueError):
        return ""
    if not all(isinstance(tree, dict) for tree in parsed):
        return ""
    flat = [dict(_leaves(tree)) for tree in parsed]
    keys = sorted({key for leaves in flat for key in leaves})
    absent = "(absent)"
    shown: list[str] = []
    for key in keys:
        texts = [json.dumps(leaves[key]) if key in leaves else absent for leaves in flat]
        if len(set(texts)) == 1:
            continue
        by_text: dict[str, list[int]] = {}
        for r, text in enumerate(texts):
            by_text.setdefault(text, []).append(r)
        sides = "; ".join(f"{_ranks(ranks)}: {text}" for text, ranks in by_text.items())
        shown.append(f"{key} ({sides})")
    if not shown:
        return ""
    more = f" and {len(shown) - MAX_KEYS_SHOWN} more" if len(shown) > MAX_KEYS_SHOWN else ""
    return f"; keys that differ: {', '.join(shown[:MAX_KEYS_SHOWN])}{more}"


def _leaves(tree: dict, prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _ranks(ranks: list[int]) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


@contextlib.contextmanager
def abort_on_error(comm: Any = None, exit_code: int = 1) -> Iterator[None]:
    """Turn any exception escaping the block into an abort of the whole job.

    ``comm`` is an mpi4py communicator (default ``COMM_WORLD``) or a
    `Communicator`. Use it at the top level of a multi-process program, so
    that ``mpirun`` (or torchrun) ends every rank instead of leaving them
    waiting. In a single process the exception propagates unchanged.
    """
    comm = MPI.COMM_WORLD if comm is None else comm
    try:
        yield
    except BaseException as error:
        is_mpi = isinstance(comm, MPI.Comm)
        size = comm.Get_size() if is_mpi else comm.size
        if size == 1 or (isinstance(error, SystemExit) and not error.code):
            raise
        rank = comm.Get_rank() if is_mpi else comm.rank
        if logging.getLogger().hasHandlers():
            log.critical("rank %d: %s: %s; aborting the job", rank, type(error).__name__, error)
        print(f"rank {rank}: {type(error).__name__}: {error}; aborting the job",
              file=sys.stderr, flush=True)
        if is_mpi:
            comm.Abort(exit_code)
        else:
            comm.abort(exit_code)
