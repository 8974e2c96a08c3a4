"""A rules file steers ``allreduce``; ranks that disagree on it are stopped.

    _worker_tuning.py RULES follow     every rank reads RULES
    _worker_tuning.py RULES mismatch   only rank 0 does
    _worker_tuning.py RULES elsewhere  every rank reads RULES, measured for another layout:
                                       the built-in choice stays
"""

from __future__ import annotations

import sys

import torch
from mpi4py import MPI

from deepspeech.distributed import RankMismatchError, allreduce
from deepspeech.distributed.choice import builtin_algorithm, choose_algorithm
from deepspeech.distributed.tuning import load_rules, use_rules

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
path, mode = sys.argv[1], sys.argv[2]
torch.set_num_threads(1)

if mode == "mismatch":
    if rank == 0:
        use_rules(path)
    try:
        allreduce(torch.ones(10), comm=comm, timeout_s=20)
    except RankMismatchError as error:
        print(f"rank {rank}: {error}", flush=True)
        if "all-reduce rules" in str(error):
            print("MISMATCH NAMED", flush=True)
    sys.exit(0)

use_rules(path)
rules = load_rules(path)
if mode == "elsewhere":
    for nbytes in (4, 65536, 1 << 20, 64 << 20):
        assert rules.rule_for(nbytes).algorithm != builtin_algorithm(nbytes, comm), nbytes
        assert choose_algorithm(nbytes, comm) == (builtin_algorithm(nbytes, comm), None), nbytes
    if rank == 0:
        print(f"BUILT-IN KEPT on {comm.Get_size()} ranks", flush=True)
    sys.exit(0)
for nbytes in (4, 996, 1000, 4096, 20000, 65536, 100000, 400000):
    want = rules.rule_for(nbytes)
    got = choose_algorithm(nbytes, comm)
    assert got == (want.algorithm, want.segment_bytes), (nbytes, got, want)
    g = torch.Generator().manual_seed(nbytes * 10 + rank)
    x = torch.randint(-20, 21, (nbytes // 4,), generator=g).float()
    reference = x.numpy().copy()
    comm.Allreduce(MPI.IN_PLACE, reference, op=MPI.SUM)
    allreduce(x, comm=comm, timeout_s=20)
    assert torch.equal(x, torch.from_numpy(reference)), f"rank {rank}: {nbytes} B differ"
if rank == 0:
    print(f"TUNED OK on {comm.Get_size()} ranks", flush=True)
