"""``--check-bitwise``: one random buffer per size reduced by every backend; all must give
the same bits on every rank (with 2 ranks every correct sum does: a + b = b + a)."""

from __future__ import annotations

import hashlib

import torch
from mpi4py import MPI

from deepspeech.bench.allreduce.backends import make_runner
from deepspeech.distributed.comm import make_communicator


def check_bitwise(comm: MPI.Comm, sizes: list[int], backends: list[str], dtype: torch.dtype,
                  timeout_s: float, device: torch.device) -> list[tuple[int, list, bool]]:
    """Per size: the backends grouped by the bits they give one random buffer (random
    floats, or integers for integer dtypes; each rank its own), and whether all agree
    on every rank. Collective."""
    torch_comm = make_communicator("torch", timeout_s) \
        if any(b.partition("@")[0] == "gloo" for b in backends) else None
    runners = {b: make_runner(b, comm, timeout_s, torch_comm) for b in backends}
    itemsize = torch.empty(0, dtype=dtype).element_size()
    verdicts = []
    for nbytes in sizes:
        n = max(1, nbytes // itemsize)
        g = torch.Generator().manual_seed(nbytes * 7919 + comm.Get_rank())
        values = torch.randn(n, generator=g) if dtype.is_floating_point \
            else torch.randint(-1000, 1000, (n,), generator=g)
        source = values.to(dtype).to(device)
        digests = []
        for name in backends:
            x = source.clone()
            runners[name](x)
            digests.append(hashlib.sha256(x.cpu().view(torch.uint8).numpy()).hexdigest())
        everyone = comm.allgather(digests)
        groups: dict[str, list[str]] = {}
        for name, digest in zip(backends, digests, strict=True):
            groups.setdefault(digest, []).append(name)
        agree = len(groups) == 1 and all(other == digests for other in everyone)
        verdicts.append((nbytes, list(groups.values()), agree))
    if torch_comm is not None:
        torch_comm.close()
    return verdicts
