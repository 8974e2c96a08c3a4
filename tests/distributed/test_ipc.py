"""The IPC all-reduce without mpirun: who reduces which slice, in which order, and the
reason it gives where it cannot run."""

from __future__ import annotations

import pytest
import torch
from mpi4py import MPI

from deepspeech.distributed import allreduce, ipc
from deepspeech.distributed.choice import IPC_MIN_BYTES, choose_algorithm
from deepspeech.distributed.ipc_allreduce import gather_slices, reduce_slice
from deepspeech.distributed.ring import chunk_bounds


def _simulate(buffers: list[torch.Tensor], op: str, divide_by: int | None) -> None:
    """Every local rank's steps, phase by phase, as the syncs between phases order them."""
    parts = chunk_bounds(buffers[0].numel(), len(buffers))
    for local, mine in enumerate(buffers):
        reduce_slice(mine, buffers, parts, local, op, divide_by)
    for local, mine in enumerate(buffers):
        gather_slices(mine, buffers, parts, local)


@pytest.mark.parametrize("ranks", [2, 3, 4])
@pytest.mark.parametrize("n", [1, 2, 3, 5, 17, 1001])
def test_slices_sum_to_the_plain_sum_on_every_rank(ranks: int, n: int) -> None:
    g = torch.Generator().manual_seed(ranks * 100 + n)
    inputs = [torch.randint(-50, 50, (n,), generator=g).to(torch.int64) for _ in range(ranks)]
    buffers = [x.clone() for x in inputs]
    _simulate(buffers, "sum", None)
    for buffer in buffers:
        assert torch.equal(buffer, torch.stack(inputs).sum(0))
    maxima = [x.clone() for x in inputs]
    _simulate(maxima, "max", None)
    assert all(torch.equal(m, torch.stack(inputs).amax(0)) for m in maxima)


@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_each_slice_is_summed_from_its_owner_around_the_ring(ranks: int) -> None:
    # the ring's order for chunk i: ((x_i + x_{i+1}) + x_{i+2}) + ..., so float results
    # match the staged ring bit for bit; a rotation of it rounds differently
    n = 4099
    g = torch.Generator().manual_seed(ranks)
    inputs = [torch.randn(n, generator=g) * 10 ** torch.randint(-3, 4, (n,), generator=g)
              for _ in range(ranks)]
    buffers = [x.clone() for x in inputs]
    _simulate(buffers, "sum", ranks)
    parts = chunk_bounds(n, ranks)
    want = torch.empty(n)
    for i in range(ranks):
        a, b = parts[i], parts[i + 1]
        total = inputs[i][a:b].clone()
        for k in range(1, ranks):
            total.add_(inputs[(i + k) % ranks][a:b])
        want[a:b] = total.div_(ranks)
    for buffer in buffers:
        assert torch.equal(buffer, want)


def test_bfloat16_slices_round_after_every_peer_like_the_ring() -> None:
    inputs = [torch.full((6,), value, dtype=torch.bfloat16) for value in (256.0, 1.0, 1.0)]
    buffers = [x.clone() for x in inputs]
    _simulate(buffers, "sum", None)
    # slice 0: (256 + 1) + 1 rounds to 256 twice; slice 2: (1 + 256) + 1 likewise;
    # slice 1: (1 + 1) + 256 = 258 exactly
    assert buffers[0].tolist() == [256.0, 256.0, 258.0, 258.0, 256.0, 256.0]


def test_cpu_tensors_are_refused_with_a_reason() -> None:
    # a world of one: nothing to open, but the reason is still the tensor's
    assert ipc.unavailable(torch.zeros(3), MPI.COMM_WORLD, 5.0) == (
        "CPU tensors (CUDA IPC shares GPU memory only)")
    x = torch.arange(4.0)
    assert torch.equal(allreduce(x, algorithm="ipc"), torch.arange(4.0))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_switch_turns_cuda_ipc_off(monkeypatch: pytest.MonkeyPatch) -> None:
    opener = ipc.CudaOpener()
    assert opener.unavailable(torch.zeros(1, device="cuda")) is None
    monkeypatch.setenv(ipc.ENVIRONMENT_VARIABLE, "0")
    assert opener.unavailable(torch.zeros(1, device="cuda")) == f"{ipc.ENVIRONMENT_VARIABLE}=0"


@pytest.mark.parametrize("variable, asked, nbytes, chosen", [
    (None, None, 64 << 20, False),  # unset: only a named ipc takes it
    ("0", None, 64 << 20, False),
    ("1", None, IPC_MIN_BYTES - 4, False),  # small buffers: the staged path measured faster
    ("1", None, IPC_MIN_BYTES, True),
    (None, True, IPC_MIN_BYTES, True),  # the caller's answer (an execution plan's) ...
    ("1", False, 64 << 20, False),  # ... wins over the variable
])
def test_auto_takes_ipc_only_when_every_rank_asks_and_the_buffer_is_large(
        monkeypatch: pytest.MonkeyPatch, variable: str | None, asked: bool | None, nbytes: int,
        chosen: bool) -> None:
    if variable is None:
        monkeypatch.delenv(ipc.ENVIRONMENT_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(ipc.ENVIRONMENT_VARIABLE, variable)
    monkeypatch.setattr(ipc, "unavailable", lambda *args, **kwargs: None)  # as on a GPU node
    monkeypatch.setattr(ipc, "_states", {})  # the agreement is per communicator, once
    flat = torch.empty(nbytes // 4, dtype=torch.float32)
    algorithm, _ = choose_algorithm(nbytes, MPI.COMM_WORLD, cuda=True, timeout_s=5.0,
                                    ipc_ready=lambda: ipc.ready_for_auto(flat, MPI.COMM_WORLD,
                                                                         5.0, asked=asked))
    assert (algorithm == "ipc") is chosen
