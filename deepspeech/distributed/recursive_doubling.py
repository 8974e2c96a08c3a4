"""Recursive-doubling all-reduce, for buffers too small for the ring.

The ring pays 2(N-1) message latencies, which dominate when the buffer is
small. Recursive doubling pays log2(N) of them, at the price of sending the
whole buffer at every step (log2(N) times the data of the ring's 2(N-1)/N).
`allreduce` switches to it below a measured crossover size.

Power-of-two N. At step k (k = 0 .. log2(N)-1) rank r exchanges its whole
buffer with partner ``r XOR 2**k`` and both add what they received. After step
k every rank holds the sum over its group of 2**(k+1) ranks, so after
log2(N) steps everyone holds the total. Example, N = 4::

    step 0: 0<->1, 2<->3   ranks 0,1 hold x0+x1; ranks 2,3 hold x2+x3
    step 1: 0<->2, 1<->3   every rank holds (x0+x1)+(x2+x3)

Both partners compute ``a + b`` from the same two values and floating-point
addition is commutative, so partners end with identical bits at every step,
and all ranks end with the same result.

Other N (the standard fold-in, as in MPICH). Let P be the largest power of two
<= N and E = N - P the extra ranks. Before the doubling, the first 2E ranks
pair up: each even rank r < 2E sends its buffer to r+1, which adds it, and then
sits out. The remaining P ranks (the odd ones among the first 2E, and all
ranks >= 2E) run the power-of-two algorithm with virtual ranks 0..P-1.
Afterwards each odd rank r < 2E sends the result back to r-1. Example, N = 3::

    fold:    0 -> 1               rank 1 holds x0+x1
    step 0:  1 <-> 2              ranks 1,2 hold (x0+x1)+x2
    unfold:  1 -> 0               rank 0 receives the same bits

Each exchange is cut into segments so that the reduction of segment j overlaps
the transfer of segment j+1, like the ring.
"""

from __future__ import annotations

import functools
from collections import deque
from typing import Any

from mpi4py import MPI

from .faults import CommTimeoutError, wait
from .ring import DEFAULT_DEPTH, Outbox, segment_bounds
from .transport import Op, Transport

TAG = 7702


def recursive_doubling_allreduce(
    transport: Transport,
    op: Op,
    comm: MPI.Comm,
    *,
    segment_elems: int,
    timeout_s: float,
    divide_by: int | None = None,
    depth: int = DEFAULT_DEPTH,
    name: str = "allreduce(recursive doubling)",
) -> None:
    """Reduce the tensor behind ``transport`` in place over ``comm`` by recursive doubling."""
    size, rank = comm.Get_size(), comm.Get_rank()
    data = transport.data
    segments = segment_bounds(0, data.tensor.numel(), segment_elems)
    power = 1 << (size.bit_length() - 1)
    extra = size - power
    if extra == 0 and len(segments) == 1 and not transport.staged:
        transport.start()
        _one_segment(transport, op, comm, segments[0][1], timeout_s, name)
        if divide_by is not None:
            data.divide(0, segments[0][1], divide_by)
        transport.finish()
        return

    def timeout(what: str, peer: int, stage: str) -> CommTimeoutError:
        return CommTimeoutError(f"{name} on rank {rank}: {what} rank {peer} within "
                                f"{timeout_s} s ({stage})", rank=rank, peer=peer)

    # staging copies each segment to the host: only a few sends in flight then
    limit = depth + 1 if transport.staged else 1 << 62

    def sender(peer: int) -> Outbox:
        outbox = Outbox(limit)
        for j, (a, b) in enumerate(segments):
            outbox.add(functools.partial(transport.isend, comm, a, b, peer, TAG), j)
        outbox.pump()
        return outbox

    def send_all(peer: int, stage: str) -> None:
        sender(peer).drain(timeout_s, lambda j: timeout("no message taken by", peer, stage))

    def exchange_reduce(peer: int, stage: str, send: bool = True) -> None:
        def late(_: object) -> CommTimeoutError:
            return timeout("no message taken by", peer, stage)

        outbox = sender(peer) if send else None
        pump = outbox.pump if outbox is not None and not outbox.idle else None
        posted: deque[tuple[int, MPI.Request, Any]] = deque()
        upcoming = 0
        while True:
            while len(posted) < depth and upcoming < len(segments):
                a, b = segments[upcoming]
                posted.append((upcoming, *transport.irecv_reduce(comm, b - a, peer, TAG)))
                upcoming += 1
            if not posted:
                break
            j, request, token = posted.popleft()
            wait(request, timeout_s, lambda: timeout("no message from", peer, stage), pump)
            if outbox is not None:  # our copy of segment j must be on its way first
                if transport.staged:  # sent from a host copy: posting is enough
                    outbox.post_through(j + 1, timeout_s, late)
                else:  # MPI may still be reading the tensor itself
                    wait(outbox.posted[j][0], timeout_s, lambda: late(None))
            transport.finish_reduce(token, *segments[j], op)
            if pump is not None:
                pump()
        if outbox is not None:
            outbox.drain(timeout_s, lambda j: timeout("no message taken by", peer, stage))

    def receive_copy(peer: int, stage: str) -> None:
        for a, b in segments:
            request, token = transport.irecv_copy(comm, a, b, peer, TAG)
            wait(request, timeout_s, lambda: timeout("no message from", peer, stage))
            transport.drop(transport.finish_copy(token, a, b))

    transport.start()
    if rank < 2 * extra:
        if rank % 2 == 0:  # fold into rank+1, sit out, get the result back
            send_all(rank + 1, "fold-in")
            receive_copy(rank + 1, "fold-out")
            virtual = -1
        else:
            exchange_reduce(rank - 1, "fold-in", send=False)
            virtual = rank // 2
    else:
        virtual = rank - extra

    if virtual >= 0:
        mask, step = 1, 0
        while mask < power:
            partner = virtual ^ mask
            peer = partner * 2 + 1 if partner < extra else partner + extra
            exchange_reduce(peer, f"step {step}")
            mask, step = mask << 1, step + 1
        if rank < 2 * extra:
            send_all(rank - 1, "fold-out")
    if divide_by is not None:
        data.divide(0, data.tensor.numel(), divide_by)
    transport.finish()


def _one_segment(transport: Transport, op: Op, comm: MPI.Comm, n: int, timeout_s: float,
                 name: str) -> None:
    """Power-of-two world, one segment, direct transport: the common small case, lean."""
    size, rank = comm.Get_size(), comm.Get_rank()
    mask, step = 1, 0
    while mask < size:
        peer = rank ^ mask
        request, token = transport.irecv_reduce(comm, n, peer, TAG)
        sent = transport.isend(comm, 0, n, peer, TAG)
        wait(request, timeout_s, lambda p=peer, k=step: CommTimeoutError(
            f"{name} on rank {rank}: no message from rank {p} within {timeout_s} s (step {k})",
            rank=rank, peer=p))
        wait(sent, timeout_s, lambda p=peer, k=step: CommTimeoutError(
            f"{name} on rank {rank}: no message taken by rank {p} within {timeout_s} s "
            f"(step {k})", rank=rank, peer=p))
        transport.finish_reduce(token, 0, n, op)
        mask, step = mask << 1, step + 1
