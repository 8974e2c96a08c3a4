"""What the all-reduce sees and computes on a real cluster (ranks on several hosts).

    _worker_cluster.py layout      each rank prints one line: LAYOUT {json}
    _worker_cluster.py torch       an all-reduce on the torch backend (gloo), started by mpirun
    _worker_cluster.py allreduce   every algorithm x dtype x op against MPI_Allreduce;
                                   rank 0 prints "ALL OK: N cases on R ranks, K nodes"

Inputs are small integers (stored as floats for float dtypes), whose sums are exact
in any order, so every result must equal MPI_Allreduce's bit for bit; a hash of all
results must be the same on every rank. Any failure aborts the job.
"""

from __future__ import annotations

import hashlib
import json
import socket
import sys

import numpy as np
import torch
from mpi4py import MPI

from deepspeech.distributed import abort_on_error, allreduce, check_same
from deepspeech.distributed.allreduce import DTYPES
from deepspeech.distributed.choice import choose_algorithm
from deepspeech.distributed.topology import node_layout

torch.set_num_threads(1)
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
TIMEOUT = 30.0
MPI_OPS = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "mean": MPI.SUM}
# float16/bfloat16 hold every integer up to 256 exactly: keep sums of 4 ranks below that
SMALL = {torch.uint8: (0, 4), torch.int8: (-4, 5), torch.float16: (-20, 21),
         torch.bfloat16: (-20, 21)}


def layout() -> None:
    """One line per rank: its host and the node structure the node-aware code uses."""
    found = node_layout(comm)
    print("LAYOUT " + json.dumps({
        "rank": rank, "host": socket.gethostname(), "nodes": found.nodes,
        "local": found.local, "local_size": found.local_size,
        "node_ranks": found.world_ranks,
        "leaders": found.leaders.allgather(rank) if found.local == 0 else None,
        "auto": {size: choose_algorithm(size, comm)[0] for size in (512 << 10, 1 << 20, 64 << 20)},
    }), flush=True)


def torch_backend() -> None:
    """The torch backend under mpirun: rank 0 publishes its rendezvous address through MPI,
    which must be one that the other node reaches."""
    from deepspeech.distributed import make_communicator

    communicator = make_communicator("torch", TIMEOUT)
    x = torch.full((1000,), float(rank + 1))
    communicator.allreduce(x, "sum")
    assert torch.equal(x, torch.full((1000,), float(size * (size + 1) // 2))), x[:4]
    communicator.close()
    if rank == 0:
        print(f"TORCH OK on {size} ranks", flush=True)


def exact_input(n: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    low, high = SMALL.get(dtype, (-1000, 1001))
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    return torch.randint(low, high, (n,), generator=g).to(dtype)


def reference(x: torch.Tensor, op: str) -> torch.Tensor:
    """MPI_Allreduce on a float64 (or same-integer) copy; mean divides in the dtype."""
    wide = x.double() if x.is_floating_point() else x.clone()
    comm.Allreduce(MPI.IN_PLACE, wide.numpy(), op=MPI_OPS[op])
    result = wide.to(x.dtype)
    return result.div_(size) if op == "mean" else result


def allreduce_cases() -> int:
    """Every algorithm x dtype x op x size; returns the number of cases."""
    results = hashlib.sha256()
    cases = 0
    # 4099: odd, several ring chunks; 300001 floats: more than one 1 MiB segment, and above
    # the two leaders' crossover, so the node-aware variant rings between the nodes
    sizes = (1, 3, 5, 4099, 300001)
    for algorithm in ("ring", "hierarchical", "auto"):
        for dtype in DTYPES:
            ops = ("sum", "max", "min") + (("mean",) if dtype.is_floating_point else ())
            for op in ops:
                for n in sizes:
                    if n > 4099 and op != "sum":
                        continue
                    cases += 1
                    x = exact_input(n, dtype, cases)
                    want = reference(x, op)
                    allreduce(x, op, comm, algorithm=algorithm, timeout_s=TIMEOUT,
                              segment_bytes=64 << 10)
                    what = f"{algorithm} {dtype} {op} n={n}"
                    if not torch.equal(x.view(torch.uint8), want.view(torch.uint8)):
                        bad = (x != want).nonzero()[:5].flatten().tolist()
                        raise AssertionError(f"rank {rank}: {what}: differs from MPI_Allreduce "
                                             f"at {bad}: {x[bad].tolist()} != {want[bad].tolist()}")
                    results.update(what.encode() + x.view(torch.uint8).numpy().tobytes())
    check_same(comm, results.hexdigest(), "the results of all cases", TIMEOUT)
    return cases


if __name__ == "__main__":
    with abort_on_error(comm):
        if sys.argv[1] == "layout":
            layout()
        elif sys.argv[1] == "torch":
            torch_backend()
        else:
            count = np.array([allreduce_cases()])
            comm.Allreduce(MPI.IN_PLACE, count, op=MPI.MIN)
            if rank == 0:
                print(f"ALL OK: {int(count[0])} cases on {size} ranks, "
                      f"{node_layout(comm).nodes} nodes", flush=True)
