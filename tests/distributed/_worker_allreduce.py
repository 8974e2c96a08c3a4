"""Many all-reduce cases in one MPI job; exits non-zero (abort) at the first wrong result.

Exact cases use small integers stored as floats, whose sums are exact in any
order, so our result must equal MPI_Allreduce's bit for bit. With the device
argument ``cuda`` the tensors live on the GPU (the reference still runs on
host copies) and every algorithm that takes CUDA tensors is checked.
"""

from __future__ import annotations

import hashlib
import sys

import numpy as np
import torch
from mpi4py import MPI

from deepspeech.distributed import abort_on_error, allreduce, check_same
from deepspeech.distributed.algorithms import ALGORITHMS
from deepspeech.distributed.transport import get_transport, mpi_is_cuda_aware

torch.set_num_threads(1)
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
TIMEOUT = 20.0
DEVICE = torch.device(sys.argv[3] if len(sys.argv) > 3 else "cpu")
MPI_OPS = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}
cases = 0
results = hashlib.sha256()  # every result, in order: must be the same bits on every rank


def reference(x: torch.Tensor, op: str) -> torch.Tensor:
    """MPI_Allreduce on a float64 (or native integer) copy, cast back."""
    wide = x.cpu().double() if x.is_floating_point() else x.cpu().clone()
    comm.Allreduce(MPI.IN_PLACE, wide.numpy(), op=MPI_OPS["sum" if op == "mean" else op])
    if op == "mean":  # the sum is exact: divide in the dtype like we do
        return wide.to(x.dtype).div_(size).to(x.device)
    return wide.to(x.dtype).to(x.device)


def exact_input(n: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    low, high = (0, 4) if dtype in (torch.uint8, torch.int8) else (-20, 21)
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    return torch.randint(low, high, (n,), generator=g).to(dtype).to(DEVICE)


def check(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    """Bitwise equality with the reference; results are hashed for a final cross-rank check."""
    global cases
    cases += 1
    got, want = got.cpu(), want.cpu()
    if not torch.equal(got.view(torch.uint8) if got.numel() else got,
                       want.view(torch.uint8) if want.numel() else want):
        bad = (got != want).nonzero()[:5].flatten().tolist()
        raise AssertionError(f"rank {rank}: {what}: differs from MPI_Allreduce at {bad}: "
                             f"{got[bad].tolist()} != {want[bad].tolist()}")
    results.update(what.encode())
    results.update(got.view(torch.uint8).numpy().tobytes())


def main(large: int, matrix: str) -> None:
    """``matrix``: "full" (every dtype and plan) or "narrow" (float32, int64, bfloat16)."""
    sizes = sorted({0, 1, size - 1, size + 1, 17, 4099})
    dtypes = [torch.float32, torch.int64, torch.bfloat16]
    if matrix == "full":
        dtypes += [torch.float64, torch.float16, torch.int32, torch.int8, torch.uint8]
    # (algorithm, staging, segment bytes): small segments take the pipelined paths,
    # 1 MiB the one-message paths
    plans = [("auto", None, 1 << 20), ("ring", False, 1 << 20), ("ring", False, 256),
             ("ring", True, 512), ("recursive_doubling", False, 1 << 20),
             ("recursive_doubling", False, 300), ("recursive_doubling", True, 300),
             ("hierarchical", None, 1 << 20)]
    if DEVICE.type == "cuda":  # the node-aware variant reduces in host shared memory
        plans = [(algorithm, None if staging is False else staging, segment)
                 for algorithm, staging, segment in plans if algorithm != "hierarchical"]
    seed = 0
    for algorithm, staging, segment in plans:
        for dtype in dtypes:
            for n in sizes:
                seed += 1
                ops = ["sum"]
                if dtype in (torch.float32, torch.bfloat16, torch.int64) and n < 1000:
                    ops += ["max", "min"] + (["mean"] if dtype.is_floating_point else [])
                for op in ops:
                    x = exact_input(n, dtype, seed)
                    want = reference(x, op)
                    allreduce(x, op, comm, algorithm=algorithm, staging=staging,
                              segment_bytes=segment, timeout_s=TIMEOUT)
                    check(x, want, f"{algorithm} staging={staging} seg={segment} {dtype} "
                          f"n={n} {op}")

    # multi-dimensional input, large buffer, several segments in flight
    x = exact_input(large, torch.float32, 99).view(-1, 7) if large % 7 == 0 else None
    if x is not None:
        want = reference(x.view(-1), "sum").view_as(x)
        allreduce(x, "sum", comm, algorithm="ring", segment_bytes=64 << 10, timeout_s=TIMEOUT)
        check(x, want, "ring 2-D large")

    # random floats: close to the float64 sum, identical on all ranks, same in every run
    g = torch.Generator().manual_seed(rank)
    # every registered algorithm, so that one added to the registry is checked here too
    algorithms = [name for name, entry in ALGORITHMS.items()
                  if DEVICE.type == "cpu" or not entry.node_aware]
    for algorithm in algorithms:
        for dtype, tolerance in ((torch.float32, 1e-5), (torch.bfloat16, 5e-2)):
            x = torch.randn(20011, generator=g).to(dtype).to(DEVICE)
            exact = x.double().cpu()
            comm.Allreduce(MPI.IN_PLACE, exact.numpy(), op=MPI.SUM)
            first, second = x.clone(), x.clone()
            allreduce(first, "sum", comm, algorithm=algorithm, segment_bytes=8192,
                      timeout_s=TIMEOUT)
            allreduce(second, "sum", comm, algorithm=algorithm, segment_bytes=8192,
                      timeout_s=TIMEOUT)
            error = (first.double().cpu() - exact).abs().max().item()
            assert error <= tolerance * exact.abs().max().item() * size, (algorithm, dtype, error)
            check(second, first, f"{algorithm} {dtype} random: run to run")

    # the staged path keeps only the segments in flight on the host
    x = exact_input(1 << 18, torch.float32, 7)
    want = reference(x, "sum")
    allreduce(x, "sum", comm, algorithm="ring", staging=True, segment_bytes=4096,
              timeout_s=TIMEOUT)
    check(x, want, "staged ring, 256 segments")
    host = get_transport(x, 1024, True)
    # on a GPU, received segments wait for their asynchronous copy to the device too
    # (an H100 shared by 2 ranks held 20-22)
    limit = 16 if DEVICE.type == "cpu" else 32
    assert host.buffers_allocated <= limit, f"staging held {host.buffers_allocated} segments"

    # hierarchical with several "nodes" (consecutive pairs of ranks)
    if size >= 4 and DEVICE.type == "cpu":
        for n in (0, 3, 5000, 300001):
            for op in ("sum", "mean"):
                x = exact_input(n, torch.float32, n)
                want = reference(x, op)
                allreduce(x, op, comm, algorithm="hierarchical", ranks_per_node=2,
                          segment_bytes=1 << 14, timeout_s=TIMEOUT)
                check(x, want, f"hierarchical 2 ranks per node n={n} {op}")

    if DEVICE.type == "cuda" and not mpi_is_cuda_aware():  # MPI would crash reading GPU memory
        try:
            allreduce(exact_input(8, torch.float32, 1), "sum", comm, staging=False)
        except ValueError:
            pass
        else:
            raise AssertionError("staging=False on a CUDA tensor was accepted")

    # misuse fails loudly and the same way on every rank
    for bad, error in ((torch.ones(4, 4).t(), ValueError), (torch.ones(3, dtype=torch.int64),
                                                            TypeError)):
        try:
            allreduce(bad, "mean" if error is TypeError else "sum", comm)
        except error:
            pass
        else:
            raise AssertionError(f"no {error.__name__} for {bad.dtype} {bad.shape}")


if __name__ == "__main__":
    with abort_on_error(comm):
        main(int(sys.argv[2]) if len(sys.argv) > 2 else 7 * 50_000,
             sys.argv[1] if len(sys.argv) > 1 else "full")
        check_same(comm, results.hexdigest(), "the results of all cases", TIMEOUT)
        counts = np.array([cases])
        comm.Allreduce(MPI.IN_PLACE, counts, op=MPI.MIN)
        if rank == 0:
            print(f"ALL OK: {int(counts[0])} cases on {size} ranks", flush=True)
