"""Ring all-reduce: reduce-scatter then all-gather, pipelined in segments.

The algorithm (as in baidu-allreduce, after Patarasuk and Yuan 2009)
--------------------------------------------------------------------
N ranks sit on a ring: rank r receives only from its left neighbour
``(r - 1) % N`` and sends only to its right neighbour ``(r + 1) % N``. The
buffer of n elements is cut into N chunks of n/N elements (chunk sizes differ
by at most one; chunks may be empty when n < N).

Reduce-scatter, N-1 steps. At step k (k = 0 .. N-2) rank r

* sends chunk ``(r - k) % N`` to the right, and
* receives chunk ``(r - k - 1) % N`` from the left and adds it into its own
  copy of that chunk.

The chunk a rank sends at step k is the one it received and reduced at step
k-1, so every chunk travels once around the ring collecting one contribution
per rank. Example with N = 3 (a, b, c are the chunks; a0 means "rank 0's a")::

    step 0: r0 sends a0 -> r1    r1 sends b1 -> r2    r2 sends c2 -> r0
            r1 has a0+a1         r2 has b1+b2         r0 has c2+c0
    step 1: r0 sends c -> r1     r1 sends a -> r2     r2 sends b -> r0
            r1 has c2+c0+c1      r2 has a0+a1+a2      r0 has b1+b2+b0

After step N-2 rank r owns the complete reduction of chunk ``(r + 1) % N``.

All-gather, N-1 steps. At step k rank r sends chunk ``(r + 1 - k) % N`` (its
complete chunk at step 0, afterwards the one it just received) to the right and
receives chunk ``(r - k) % N`` from the left, overwriting its copy. After N-1
steps everyone holds every complete chunk.

Each rank sends and receives 2(N-1)/N of the buffer in total, independent of
N: that is why the ring is bandwidth-optimal, and why its 2(N-1) latency terms
make it a poor choice for small buffers (see recursive_doubling.py).

Determinism. Every chunk is reduced in a fixed order (starting at the rank
after its owner and going around the ring) by a fixed rank, and the
all-gather only copies bits. So for a given world size the result is the
same, bit for bit, on every rank and in every run.

The code follows this text: `plain_ring_allreduce` is the algorithm just
described, one message per chunk and step; `ring_allreduce` runs the same
steps in segments, pipelined (explained where it starts), and hands buffers
whose chunks are one segment anyway to the plain ring.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from mpi4py import MPI

from .faults import CommTimeoutError, wait
from .transport import Op, Transport

TAG = 7701
DEFAULT_DEPTH = 2


def chunk_bounds(n: int, parts: int) -> list[int]:
    """Boundaries of ``parts`` near-equal contiguous chunks of ``n`` elements."""
    return [(i * n) // parts for i in range(parts + 1)]


def plain_ring_allreduce(transport: Transport, op: Op, comm: MPI.Comm, bounds: list[int],
                         timeout_s: float, divide_by: int | None, name: str) -> None:
    """The ring as explained above: N-1 reduce-scatter steps, then N-1 all-gather
    steps, each chunk one message per step (``bounds``: from `chunk_bounds`).

    `ring_allreduce` runs it when every chunk fits in one segment and MPI reads
    the tensor itself (direct transport): buffers up to one segment per rank
    are common (gradient buckets), and at those sizes the bookkeeping of the
    pipeline costs as much as the transfer.
    """
    size, rank = comm.Get_size(), comm.Get_rank()
    left, right = (rank - 1) % size, (rank + 1) % size
    last = size - 2
    sends: list[tuple[MPI.Request, str]] = []
    sent_from: dict[int, MPI.Request] = {}

    def late(what: str, peer: int, stage: str) -> CommTimeoutError:
        return CommTimeoutError(f"{name} on rank {rank}: {what} rank {peer} within "
                                f"{timeout_s} s ({stage})", rank=rank, peer=peer)

    def send(chunk: int, stage: str) -> None:
        a, b = bounds[chunk], bounds[chunk + 1]
        if b > a:
            request = transport.isend(comm, a, b, right, TAG)
            sends.append((request, stage))
            sent_from[chunk] = request

    transport.start()
    send(rank, "reduce-scatter step 0")
    for step in range(size - 1):  # reduce-scatter: reduce chunk r-k-1, pass it on
        chunk = (rank - step - 1) % size
        a, b = bounds[chunk], bounds[chunk + 1]
        stage = f"reduce-scatter step {step}"
        if b > a:
            request, token = transport.irecv_reduce(comm, b - a, left, TAG)
            wait(request, timeout_s, lambda s=stage: late("no message from", left, s))
            transport.finish_reduce(token, a, b, op)
            if step == last and divide_by is not None:
                transport.data.divide(a, b, divide_by)
        send(chunk, f"reduce-scatter step {step + 1}" if step < last else "all-gather step 0")
    for step in range(size - 1):  # all-gather: copy chunk r-k, pass it on
        chunk = (rank - step) % size
        a, b = bounds[chunk], bounds[chunk + 1]
        stage = f"all-gather step {step}"
        if b > a:
            earlier = sent_from.pop(chunk, None)  # its reduce-scatter send reads this memory
            if earlier is not None:
                wait(earlier, timeout_s, lambda s=stage: late("no message taken by", right, s))
            request, _ = transport.irecv_copy(comm, a, b, left, TAG)
            wait(request, timeout_s, lambda s=stage: late("no message from", left, s))
        if step < last:
            send(chunk, f"all-gather step {step + 1}")
    for request, stage in sends:
        wait(request, timeout_s, lambda s=stage: late("no message taken by", right, s))
    transport.finish()


# The same steps, in segments
# ---------------------------
# A chunk is sent as several messages ("segments", ``segment_bytes`` each, about
# 1 MiB by default, see docs/BENCHMARKS.md for the measurement). The receive
# side keeps ``depth`` segment receives posted ahead, so while rank r reduces
# segment j of a chunk, segment j+1 is already on its way; and as soon as
# segment j is reduced it is sent on, which starts the next step for that
# segment before the current step has finished for the whole chunk. The
# pipeline therefore runs across steps and phases: the last reduce-scatter step
# hands each finished segment straight to the all-gather. Segments also keep the
# working set of a reduction in cache: with single-copy shared-memory transports
# the receiver copies a segment into a scratch buffer that it reads back right
# away, which is why a pipelined ring in Python beats MPI_Allreduce on large
# buffers.
#
# MPI guarantees that messages between one pair of ranks with one tag arrive in
# the order they were sent, so both sides only need to agree on the order of
# segments, which they compute from (n, N, segment size) alone.
#
# `segment_bounds` cuts the chunks, `Outbox` keeps the sends to the right
# neighbour in order, and `ring_allreduce` runs the pipeline.


def segment_bounds(start: int, stop: int, segment_elems: int) -> list[tuple[int, int]]:
    """Cut ``[start, stop)`` into near-equal segments of at most ``segment_elems``."""
    length = stop - start
    if length <= 0:
        return []
    count = -(-length // segment_elems)
    return [(start + (j * length) // count, start + ((j + 1) * length) // count)
            for j in range(count)]


class Outbox:
    """Sends to one peer, posted in the order added, at most ``limit`` in flight.

    MPI matches messages between two ranks in the order they were posted, so
    every send to a peer goes through one outbox. With a limit (staging: each
    send in flight holds a host buffer) sends wait in the queue and are posted
    by `pump`, which the caller also runs while it waits for a receive: the
    peer may need our next send before it can produce the message we wait for.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._queue: deque[tuple[Callable[[], MPI.Request], Any]] = deque()
        self._flight: deque[tuple[MPI.Request, Any]] = deque()
        self.posted: deque[tuple[MPI.Request, Any]] = deque()  # sends not known complete
        self.count = 0  # sends posted so far

    def add(self, post: Callable[[], MPI.Request], label: Any) -> None:
        """Queue a send; ``post()`` issues it and returns its request."""
        self._queue.append((post, label))

    def pump(self) -> None:
        flight = self._flight
        while flight and flight[0][0].Test():
            flight.popleft()
        while self._queue and len(flight) < self._limit:
            post, label = self._queue.popleft()
            request = post()
            flight.append((request, label))
            self.posted.append((request, label))
            self.count += 1

    def has_room(self) -> bool:
        """A send added now would be posted at once."""
        flight = self._flight
        while flight and flight[0][0].Test():
            flight.popleft()
        return not self._queue and len(flight) < self._limit

    def prune(self) -> None:
        """Forget the oldest sends that have completed."""
        posted = self.posted
        while posted and posted[0][0].Test():
            posted.popleft()

    @property
    def idle(self) -> bool:
        """Nothing is waiting to be posted."""
        return not self._queue

    def post_through(self, count: int, timeout_s: float,
                     on_timeout: Callable[[Any], CommTimeoutError]) -> None:
        """Make sure the first ``count`` sends are posted, waiting for room if need be."""
        self.pump()
        while self.count < count and self._queue:  # the flight is full: wait for its oldest
            oldest, label = self._flight[0]
            wait(oldest, timeout_s, lambda label=label: on_timeout(label))
            self.pump()

    def drain(self, timeout_s: float, on_timeout: Callable[[Any], CommTimeoutError]) -> None:
        """Post what is left and wait for every send; ``on_timeout(label)`` names a late one."""
        self.post_through(1 << 62, timeout_s, on_timeout)
        for request, label in self.posted:
            wait(request, timeout_s, lambda label=label: on_timeout(label))
        self.posted.clear()


def ring_allreduce(
    transport: Transport,
    op: Op,
    comm: MPI.Comm,
    *,
    segment_elems: int,
    timeout_s: float,
    divide_by: int | None = None,
    depth: int = DEFAULT_DEPTH,
    name: str = "allreduce(ring)",
) -> None:
    """Reduce the tensor behind ``transport`` in place over ``comm`` with the ring algorithm.

    ``divide_by`` (the mean) is applied once to each complete chunk before the
    all-gather, so every rank gets the same rounded bits.
    """
    size, rank = comm.Get_size(), comm.Get_rank()
    data = transport.data
    if size == 1:
        if divide_by is not None:
            data.divide(0, data.tensor.numel(), divide_by)
        transport.finish()
        return
    left, right = (rank - 1) % size, (rank + 1) % size
    bounds = chunk_bounds(data.tensor.numel(), size)
    if not transport.staged and bounds[-1] - bounds[-2] <= segment_elems:  # the largest chunk
        plain_ring_allreduce(transport, op, comm, bounds, timeout_s, divide_by, name)
        return
    segments = [segment_bounds(bounds[c], bounds[c + 1], segment_elems) for c in range(size)]
    last = size - 2  # index of the last step of each phase

    def receives() -> Iterator[tuple[bool, int, int, int, int]]:
        """(is_reduce_scatter, step, chunk, start, stop) in the order they arrive."""
        for step in range(size - 1):
            chunk = (rank - step - 1) % size
            for start, stop in segments[chunk]:
                yield True, step, chunk, start, stop
        for step in range(size - 1):
            chunk = (rank - step) % size
            for start, stop in segments[chunk]:
                yield False, step, chunk, start, stop

    def phase(is_rs: bool, step: int) -> str:
        return f"{'reduce-scatter' if is_rs else 'all-gather'} step {step}"

    def no_message(is_rs: bool, step: int) -> CommTimeoutError:
        return CommTimeoutError(
            f"{name} on rank {rank}: no message from rank {left} within {timeout_s} s "
            f"({phase(is_rs, step)})", rank=rank, peer=left)

    def not_taken(is_rs: bool, step: int) -> CommTimeoutError:
        return CommTimeoutError(
            f"{name} on rank {rank}: rank {right} took no message within {timeout_s} s "
            f"({phase(is_rs, step)})", rank=rank, peer=right)

    # Every send to the right goes through one outbox, in stream order. Direct
    # transports post at once; staging copies each segment to the host, so only
    # a few sends are in flight. The reduce-scatter sends of a direct transport
    # read straight from their chunk, which the all-gather may overwrite only
    # once they have completed: they are remembered per chunk.
    outbox = Outbox(depth + 1 if transport.staged else 1 << 62)
    pump = outbox.pump if transport.staged else None
    sends_from_chunk: dict[int, list[MPI.Request]] = {}

    def send(start: int, stop: int, chunk: int, label: tuple[bool, int],
             arrived: Any = None, forward: bool = False) -> None:
        if forward and outbox.has_room():  # pass the received copy straight on
            outbox.add(lambda: transport.forward(comm, arrived, start, stop, right, TAG), label)
        else:
            if forward:  # it would wait in the queue: free its buffer, send from the tensor
                transport.drop(arrived)
            outbox.add(lambda: transport.isend(comm, start, stop, right, TAG), label)
        outbox.pump()
        if label[0] and pump is None:  # posted already: direct transports do not queue
            sends_from_chunk.setdefault(chunk, []).append(outbox.posted[-1][0])

    transport.start()
    for start, stop in segments[rank]:  # reduce-scatter step 0 sends our own chunk
        send(start, stop, rank, (True, 0))

    pending = receives()
    posted: deque[tuple[tuple[bool, int, int, int, int], MPI.Request, Any]] = deque()
    held: list[tuple[bool, int, int, int, int]] = []  # next task, until its chunk is free

    def post_more(block: bool = False) -> None:
        while len(posted) < depth:
            task = held.pop() if held else next(pending, None)
            if task is None:
                return
            is_rs, step, chunk, start, stop = task
            if is_rs:
                request, token = transport.irecv_reduce(comm, stop - start, left, TAG)
            else:
                earlier = sends_from_chunk.get(chunk, [])
                while earlier and (block or earlier[-1].Test()):
                    wait(earlier.pop(), timeout_s, lambda step=step: not_taken(True, step))
                if earlier:  # still being sent: receive into it later
                    held.append(task)
                    return
                request, token = transport.irecv_copy(comm, start, stop, left, TAG)
            posted.append((task, request, token))

    post_more()
    if not posted:
        post_more(block=True)
    while posted:
        task, request, token = posted.popleft()
        is_rs, step, chunk, start, stop = task
        wait(request, timeout_s, lambda is_rs=is_rs, step=step: no_message(is_rs, step), pump)
        if is_rs:
            transport.finish_reduce(token, start, stop, op)
            if step == last and divide_by is not None:
                data.divide(start, stop, divide_by)
            # reduce-scatter step+1, or all-gather step 0 once the chunk is complete
            send(start, stop, chunk, (True, step + 1) if step < last else (False, 0))
        else:
            arrived = transport.finish_copy(token, start, stop)
            if step < last:
                send(start, stop, chunk, (False, step + 1), arrived, forward=True)
            else:
                transport.drop(arrived)
        post_more()
        if not posted:
            post_more(block=True)  # nothing else to wait for
        outbox.prune()

    outbox.drain(timeout_s, lambda label: not_taken(*label))
    transport.finish()
