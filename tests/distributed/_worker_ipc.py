"""The IPC all-reduce in one MPI job; exits non-zero (abort) at the first wrong result.

    _worker_ipc.py cpu [RANKS_PER_NODE]   shared-memory files stand in for CUDA IPC
    _worker_ipc.py cuda                   real CUDA IPC, every rank on the node's GPU 0

On CPU an injected opener shares tensors through torch's shared-memory files,
so the handle exchange, the registration cache and the algorithm run for real;
then the default (CUDA) opener must refuse CPU tensors with a named reason. On a
GPU the path must actually be taken (not fall back), and give the staged ring's
bits and MPI_Allreduce's on exact data.
"""

from __future__ import annotations

import collections
import hashlib
import logging
import pickle
import sys

import numpy as np
import torch
import torch.multiprocessing
from mpi4py import MPI

from deepspeech.distributed import abort_on_error, allreduce, check_same, ipc
from deepspeech.distributed.topology import node_layout

torch.set_num_threads(1)
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
TIMEOUT = 20.0
DEVICE = torch.device(sys.argv[1] if len(sys.argv) > 1 else "cpu")
RANKS_PER_NODE = int(sys.argv[2]) if len(sys.argv) > 2 else None
results = hashlib.sha256()  # every result, in order: must be the same bits on every rank
cases = 0


class SharedFileOpener:
    """CPU storages in shared-memory files (torch's file_system strategy) as "IPC"."""

    def unavailable(self, tensor: torch.Tensor) -> str | None:
        return "GPU tensors (this opener shares CPU memory)" if tensor.is_cuda else None

    def share(self, storage: torch.UntypedStorage) -> object:
        if not storage.is_shared():
            storage.share_memory_()
        return storage._share_filename_cpu_()

    def open(self, handle: object, device: torch.device) -> torch.UntypedStorage:
        return torch.UntypedStorage._new_shared_filename_cpu(*handle)


class CountingOpener(SharedFileOpener):
    """Counts how often each handle is opened: torch's CUDA IPC wants once per process."""

    def __init__(self) -> None:
        self.opens: collections.Counter[bytes] = collections.Counter()

    def open(self, handle: object, device: torch.device) -> torch.UntypedStorage:
        self.opens[pickle.dumps(handle)] += 1
        return super().open(handle, device)

    def check_once(self, what: str) -> None:
        again = [count for count in self.opens.values() if count > 1]
        assert not again, f"rank {rank}: {what}: handles opened {again} times"


def new(values: torch.Tensor) -> torch.Tensor:
    """A buffer for the IPC path: shared memory on CPU, the GPU otherwise."""
    if DEVICE.type == "cpu":
        return values.clone().share_memory_()
    return values.to(DEVICE, copy=True)


def check(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    global cases
    cases += 1
    got, want = got.cpu(), want.cpu()
    if not torch.equal(got.view(torch.uint8), want.view(torch.uint8)):
        bad = (got != want).nonzero()[:5].flatten().tolist()
        raise AssertionError(f"rank {rank}: {what}: differs at {bad}: {got[bad].tolist()} "
                             f"!= {want[bad].tolist()}")
    results.update(what.encode())
    results.update(got.view(torch.uint8).numpy().tobytes())


def mpi_reference(x: torch.Tensor, op: str) -> torch.Tensor:
    """MPI_Allreduce of an exact (integer-valued) input, in float64 or int64."""
    wide = x.cpu().double() if x.is_floating_point() else x.cpu().clone()
    mpi_op = {"sum": MPI.SUM, "mean": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}[op]
    comm.Allreduce(MPI.IN_PLACE, wide.numpy(), op=mpi_op)
    if op == "mean":
        return wide.to(x.dtype).div_(size)
    return wide.to(x.dtype)


def staged(x: torch.Tensor, op: str) -> torch.Tensor:
    """The staged ring's result for ``x`` (through pinned host segments on a GPU)."""
    copy = x.clone()
    allreduce(copy, op, comm, algorithm="ring", staging=True, segment_bytes=1 << 12,
              timeout_s=TIMEOUT)
    return copy


def run_ipc(x: torch.Tensor, op: str = "sum", algorithm: str = "ipc") -> torch.Tensor:
    return allreduce(x, op, comm, algorithm=algorithm, timeout_s=TIMEOUT,
                     ranks_per_node=RANKS_PER_NODE)


def exact(n: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    return torch.randint(-20, 21, (n,), generator=g).to(dtype)


def main() -> None:
    layout = node_layout(comm, RANKS_PER_NODE)
    single_node = layout.nodes == 1
    alone = layout.local_size == 1  # a node of one rank shares nothing
    probe = torch.zeros(1, device=DEVICE)
    reason = ipc.unavailable(probe, comm, TIMEOUT, RANKS_PER_NODE)
    assert reason is None, f"rank {rank}: IPC unavailable: {reason}"

    # exact data: MPI_Allreduce's bits, for every op; a new buffer (registration) each time
    seed = 0
    for dtype in (torch.float32, torch.int64, torch.bfloat16, torch.float64):
        for n in sorted({1, size - 1, size + 1, 17, 4099, 100003} - {0}):
            ops = ["sum", "max", "min"] + (["mean"] if dtype.is_floating_point else [])
            for op in ops if n < 5000 else ["sum"]:
                seed += 1
                x = new(exact(n, dtype, seed))
                want = mpi_reference(x, op)
                check(run_ipc(x, op), want, f"exact {dtype} n={n} {op}")
    made, held = ipc.registrations(comm, RANKS_PER_NODE)
    assert held <= ipc.MAX_REGISTERED and (made >= seed or alone), (made, held)

    # integers as the fixed-point mode makes them: large, exact in any order
    g = torch.Generator().manual_seed(rank)
    x = new(torch.randint(-(2**61) // size, 2**61 // size, (50_001,), generator=g))
    want = mpi_reference(x, "sum")
    check(run_ipc(x), want, "fixed-point int64")

    # random floats: on one node the staged ring's bits (the same order of the sum)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for n in (7, 20011):
            for op in ("sum", "mean"):
                values = torch.randn(n, generator=g).to(dtype)
                want = staged(new(values), op)
                got = run_ipc(new(values), op)
                if single_node:
                    check(got, want, f"random {dtype} n={n} {op} against the staged ring")
                else:
                    assert torch.allclose(got.double().cpu(), want.double().cpu(),
                                          rtol=0.05, atol=0.05 * size), (dtype, n, op)
                    check(got, got, f"random {dtype} n={n} {op} across nodes")

    # a registered buffer is reused: one registration, however many calls
    values = torch.arange(3001, dtype=torch.float32) * (rank + 1)
    kept = new(values)
    run_ipc(kept)
    made, _ = ipc.registrations(comm, RANKS_PER_NODE)
    for _ in range(3):
        kept.copy_(values)
        check(run_ipc(kept), mpi_reference(new(values), "sum"), "kept buffer")
    assert ipc.registrations(comm, RANKS_PER_NODE)[0] == made, "a kept buffer re-registered"

    # one rank swaps its buffer: the whole node registers anew, and reads the new one
    replacement = new(values) if rank == 0 else kept
    replacement.copy_(values)
    check(run_ipc(replacement), mpi_reference(new(values), "sum"), "rank 0's new buffer")
    with_rank_0 = 0 in layout.world_ranks and not alone  # other nodes keep theirs
    assert ipc.registrations(comm, RANKS_PER_NODE)[0] == made + with_rank_0, "registrations"

    # a buffer freed on one rank: its registration goes on every rank of the node
    _, held = ipc.registrations(comm, RANKS_PER_NODE)
    if rank == 0:
        del kept
    kept = replacement
    kept.copy_(values)
    run_ipc(kept)
    assert ipc.registrations(comm, RANKS_PER_NODE)[1] < held or not with_rank_0, "stale kept"

    # views at an offset into a larger buffer
    big = new(torch.zeros(10_000))
    for start, n in ((0, 4000), (4000, 5997)):
        view = big[start : start + n]
        view.copy_(exact(n, torch.float32, start))
        want = mpi_reference(view, "sum")
        before = ipc.registrations(comm, RANKS_PER_NODE)[0]
        check(run_ipc(view), want, f"view at {start}")
        assert ipc.registrations(comm, RANKS_PER_NODE)[0] == before + (not alone), "view"

    # buffers of different sizes are refused on every rank of the node
    if single_node and size > 1:
        try:
            run_ipc(new(torch.ones(10 + rank)))
        except ValueError as error:
            assert "different sizes" in str(error), error
        else:
            raise AssertionError("buffers of different sizes were reduced")


def open_once(opener: CountingOpener) -> None:
    """Each peer handle opened once per process: past `MAX_REGISTERED` registrations, for
    new combinations of known buffers and for views; a freed buffer's mapping goes."""
    layout = node_layout(comm, RANKS_PER_NODE)
    peers = layout.local_size - 1
    opens = sum(opener.opens.values())
    count = ipc.MAX_REGISTERED + 5
    values = torch.arange(1001, dtype=torch.float32) * (rank + 1)
    buffers = [new(values) for _ in range(count)]
    for shift in (0, 0, 1, 2):  # the same combinations again, then new ones of the same
        for i in range(count):
            mine = buffers[(i + shift * (layout.local == 0)) % count]
            mine.copy_(values)
            check(run_ipc(mine), mpi_reference(values, "sum"), f"kept buffers, shift {shift}")
    made, held = ipc.registrations(comm, RANKS_PER_NODE)
    assert held == ipc.MAX_REGISTERED and made >= 3 * count, (made, held)
    assert sum(opener.opens.values()) - opens == count * peers, "kept buffers reopened"
    opener.check_once("kept buffers")

    big = new(torch.zeros(4000))
    for _ in range(2):
        for start in (0, 1000, 2000):
            view = big[start : start + 1000]
            view.copy_(values[:1000])
            check(run_ipc(view), mpi_reference(values[:1000], "sum"), f"view at {start}")
    assert sum(opener.opens.values()) - opens == (count + 1) * peers, "views reopened"
    opener.check_once("views")

    before = ipc.peers_open(comm, RANKS_PER_NODE)
    if rank == 0:
        del buffers[-1]
    big[:1000].copy_(values[:1000])
    check(run_ipc(big[:1000]), mpi_reference(values[:1000], "sum"), "after a free")
    shares_with_0 = 0 in layout.world_ranks and rank != 0
    assert ipc.peers_open(comm, RANKS_PER_NODE) == before - shares_with_0, "freed, still open"


def cpu_fallback() -> None:
    """The CUDA opener refuses CPU tensors: named once, and the size rule's path runs."""
    ipc.use_opener(None)
    messages: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())
    logger = logging.getLogger("deepspeech.distributed.ipc")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    reason = ipc.unavailable(torch.zeros(1), comm, TIMEOUT)
    assert reason == "CPU tensors (CUDA IPC shares GPU memory only)", reason
    for seed in range(3):
        x = exact(1001, torch.float32, seed)
        check(allreduce(x.clone(), "sum", comm, algorithm="ipc", timeout_s=TIMEOUT),
              allreduce(x.clone(), "sum", comm, timeout_s=TIMEOUT), "fallback")
    if rank == 0:
        assert len(messages) == 1 and reason in messages[0], messages


if __name__ == "__main__":
    with abort_on_error(comm):
        if DEVICE.type == "cpu":
            torch.multiprocessing.set_sharing_strategy("file_system")
            opener = CountingOpener()
            ipc.use_opener(opener)
        main()
        if DEVICE.type == "cpu":
            opener.check_once("every case")
            open_once(opener)
        if DEVICE.type == "cpu":
            cpu_fallback()
        check_same(comm, results.hexdigest(), "the results of all cases", TIMEOUT)
        counts = np.array([cases])
        comm.Allreduce(MPI.IN_PLACE, counts, op=MPI.MIN)
        if rank == 0:
            print(f"ALL OK: {int(counts[0])} cases on {size} ranks", flush=True)
