"""Without mpirun: a world of one, argument checks, and the chunking arithmetic."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from mpi4py import MPI

from deepspeech.distributed import (
    RankMismatchError,
    abort_on_error,
    allreduce,
    check_same,
    make_communicator,
)
from deepspeech.distributed.algorithms import ALGORITHMS, Algorithm, get_algorithm
from deepspeech.distributed.choice import builtin_algorithm
from deepspeech.distributed.faults import digest, raise_if_different
from deepspeech.distributed.flat import flat_allreduce
from deepspeech.distributed.ring import chunk_bounds, segment_bounds

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("op", ["sum", "mean", "max", "min"])
@pytest.mark.parametrize("algorithm", ["auto", *ALGORITHMS])
def test_world_of_one_leaves_the_tensor_alone(op: str, algorithm: str) -> None:
    x = torch.randn(5, 3)
    before = x.clone()
    assert allreduce(x, op, algorithm=algorithm) is x
    assert torch.equal(x, before)
    assert allreduce(torch.empty(0), op).numel() == 0


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="contiguous"):
        allreduce(torch.ones(3, 4).t())
    with pytest.raises(ValueError, match="unknown op 'avg'"):
        allreduce(torch.ones(3), "avg")
    with pytest.raises(ValueError, match="unknown algorithm 'tree'"):
        allreduce(torch.ones(3), algorithm="tree")
    with pytest.raises(TypeError, match="needs a floating-point tensor"):
        allreduce(torch.ones(3, dtype=torch.int64), "mean")
    with pytest.raises(TypeError, match="not supported"):
        allreduce(torch.ones(3, dtype=torch.complex64))
    with pytest.raises(TypeError, match="torch.Tensor"):
        allreduce([1.0, 2.0])


class _Ranks:
    """As much of an N-rank communicator as the size rule and the flat dispatch read
    before they hand it to an algorithm."""

    def __init__(self, size: int) -> None:
        self.size = size

    def Get_size(self) -> int:  # noqa: N802 (mpi4py's name)
        return self.size


def _flat(x: torch.Tensor, comm: object, algorithm: str) -> None:
    flat_allreduce(x, "sum", comm, timeout_s=1.0, divide_by=None, segment_elems=x.numel(),
                   staging=False, algorithm=algorithm)


def test_the_flat_dispatch_runs_the_function_registered_under_the_name(monkeypatch) -> None:
    def twice(transport, op, comm, **options) -> None:  # 2 ranks holding the same values
        transport.data.tensor.mul_(comm.Get_size())
        transport.finish()

    monkeypatch.setitem(ALGORITHMS, "twice", Algorithm(twice))
    x = torch.ones(4)
    _flat(x, _Ranks(2), "twice")
    assert torch.equal(x, torch.full((4,), 2.0))


def test_unknown_algorithm_names_are_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown all-reduce algorithm 'tree'; expected one "
                                         "of ring, recursive_doubling, hierarchical, ipc$"):
        get_algorithm("tree")
    for name in ("tree", "hierarchical", "ipc"):  # also in a world of one: nothing is sent
        with pytest.raises(ValueError, match=f"unknown flat all-reduce algorithm '{name}'; "
                                             "expected one of ring, recursive_doubling$"):
            _flat(torch.ones(4), MPI.COMM_WORLD, name)


def test_the_size_rule_names_registered_flat_algorithms() -> None:
    named = {builtin_algorithm(1 << k, _Ranks(4), node_aware=False) for k in range(8, 30)}
    assert named == {"ring", "recursive_doubling"} and named <= set(ALGORITHMS)


@pytest.mark.parametrize("backend", ["ring", "mpi", "torch"])
def test_communicator_of_one(backend: str) -> None:
    comm = make_communicator(backend, timeout_s=5.0)
    assert (comm.rank, comm.size, comm.backend) == (0, 1, backend)
    comm.barrier()
    x = torch.arange(6.0)
    assert torch.equal(comm.allreduce(x, "mean"), torch.arange(6.0))
    assert torch.equal(comm.broadcast(x, 0), torch.arange(6.0))
    assert comm.max_float(2.5) == 2.5
    assert comm.sum_int64(torch.tensor([2**62])).item() == 2**62
    with pytest.raises(TypeError, match="int64"):
        comm.sum_int64(torch.ones(2))
    assert comm.gather_objects({"a": 1}) == [{"a": 1}]
    comm.check_same("anything", "config")
    comm.close()


def test_make_communicator_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="unknown distributed backend 'nccl'"):
        make_communicator("nccl")
    with pytest.raises(ValueError, match="timeout_s must be positive"):
        make_communicator("ring", timeout_s=0)


def test_check_same_names_the_disagreeing_ranks() -> None:
    check_same(MPI.COMM_WORLD, b"x", "config")
    with pytest.raises(RankMismatchError, match=r"config differs across ranks: ranks 0, 2 "
                                                r"have [0-9a-f]{12}; rank 1 has"):
        raise_if_different([b"\x01" * 32, b"\x02" * 32, b"\x01" * 32], "config")
    raise_if_different([b"\x01" * 32] * 3, "config")


def test_a_config_mismatch_names_the_keys_that_differ() -> None:
    configs = [{"train": {"seed": 0, "epochs": 3}, "model": {"rnn": {"hidden": 24}}},
               {"train": {"seed": 1, "epochs": 3}, "model": {"rnn": {"hidden": 32}}},
               {"train": {"seed": 0, "epochs": 3}, "model": {"rnn": {"hidden": 24}}}]
    values = [json.dumps(config, sort_keys=True) for config in configs]
    with pytest.raises(RankMismatchError) as caught:
        raise_if_different([digest(value) for value in values], "resolved config", values)
    message = str(caught.value)
    assert ("keys that differ: model.rnn.hidden (ranks 0, 2: 24; rank 1: 32), "
            "train.seed (ranks 0, 2: 0; rank 1: 1)") in message, message
    assert "epochs" not in message
    # values that are not JSON objects: the ranks are named, nothing more
    with pytest.raises(RankMismatchError, match=r"rank 1 has [0-9a-f]{12} \(every"):
        raise_if_different([digest("a:(1,)"), digest("a:(2,)")], "shapes", ["a:(1,)", "a:(2,)"])


def test_abort_on_error_reraises_in_a_single_process() -> None:
    with pytest.raises(KeyError), abort_on_error():
        raise KeyError("boom")


def test_chunks_and_segments_cover_the_buffer() -> None:
    for n in (0, 1, 3, 10, 1001):
        for parts in (1, 2, 3, 7):
            bounds = chunk_bounds(n, parts)
            assert bounds[0] == 0 and bounds[-1] == n and len(bounds) == parts + 1
            sizes = [b - a for a, b in zip(bounds, bounds[1:], strict=False)]
            assert max(sizes) - min(sizes) <= 1
    assert segment_bounds(5, 5, 4) == []
    segments = segment_bounds(10, 33, 5)
    assert segments[0][0] == 10 and segments[-1][1] == 33 and len(segments) == 5
    assert all(b - a <= 5 for a, b in segments)
    assert all(a == b for (_, a), (b, _) in zip(segments, segments[1:], strict=False))


def test_closing_the_torch_backend_frees_its_process_group(tmp_path) -> None:
    """A group still alive at interpreter shutdown keeps gloo's threads running into it,
    where dropping a tensor aborts the process (SIGABRT after a finished run). Checked
    in a fresh interpreter: torch.use_deterministic_algorithms imports modules whose
    default arguments would capture the world group if it existed by then."""
    program = tmp_path / "close.py"
    program.write_text(
        "import gc, weakref\n"
        "import torch, torch.distributed as dist\n"
        "from deepspeech.distributed import make_communicator\n"
        "comm = make_communicator('torch', timeout_s=30.0)\n"
        "world = weakref.ref(dist.group.WORLD)\n"
        "torch.use_deterministic_algorithms(True)\n"
        "comm.allreduce(torch.ones(3))\n"
        "comm.close()\n"
        "gc.collect()\n"
        "print('alive' if world() is not None else 'freed')\n")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    environment = {**os.environ, "RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                   "MASTER_PORT": str(port),
                   "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run([sys.executable, str(program)], env=environment, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["freed"]
