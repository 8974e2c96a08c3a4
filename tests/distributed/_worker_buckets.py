"""Training's overlapped reducer in one MPI job: gradients bitwise those of an all-reduce of
``torch.cat`` of each bucket, every step, through one flat buffer per bucket kept for the
run; exits non-zero (abort) at the first difference.

    _worker_buckets.py
"""

from __future__ import annotations

import copy

import torch
from mpi4py import MPI

from deepspeech.config import DistributedConfig
from deepspeech.distributed import abort_on_error
from deepspeech.execution import ExecutionPlan
from deepspeech.training.data_parallel import DataParallelSync

torch.set_num_threads(1)
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
PLAN = ExecutionPlan(device="cpu", rnn_kernel="torch", batch_norm="torch", precision="fp32",
                     cuda_graphs=False, features_on="workers", cuda_ipc=False,
                     mpi_cuda_aware=False)


def tiny_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.ModuleDict({
        "a": torch.nn.Linear(8, 32), "b": torch.nn.Linear(32, 32), "c": torch.nn.Linear(32, 4),
        "unused": torch.nn.Linear(4, 4),  # never gets a gradient: reduced as zeros
    })


def loss_of(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    hidden = torch.tanh(model["b"](torch.tanh(model["a"](x))))
    return model["c"](hidden).pow(2).mean() * (rank + 1.5)


def bitwise(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def main() -> None:
    model = tiny_model()
    sync = DataParallelSync(DistributedConfig(bucket_mb=2.5e-3, timeout_s=30.0))
    sync.prepare(model, PLAN)
    assert len(sync.buckets) >= 3, len(sync.buckets)  # several buckets, one of them partial
    reference = copy.deepcopy(model)
    names = {id(p): n for n, p in model.named_parameters()}
    twins = dict(reference.named_parameters())
    flats = [flat.data_ptr() for flat in sync._overlap.flats]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    optimizer_ref = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(rank)
    for step in range(6):
        # steps 3 and 4 keep the gradients (zeroed in place): already views of the buckets
        keep = step in (3, 4)
        optimizer.zero_grad(set_to_none=not keep)
        optimizer_ref.zero_grad(set_to_none=not keep)
        for micro in range(2):
            x = torch.randn(5, 8, generator=g)
            sync.start_micro_batch(last=micro == 1)
            loss_of(model, x).backward()
            sync.micro_batch_done(model)
            loss_of(reference, x).backward()
        sync.finish_step(model, torch.tensor(0.0))
        for index, bucket in enumerate(sync.buckets):
            twin = [twins[names[id(p)]] for p in bucket]
            want = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p))
                              .reshape(-1) for p in twin])
            sync.comm.allreduce(want, op="sum")
            flat = sync._overlap.flats[index]
            assert flat.data_ptr() == flats[index], f"step {step}: bucket {index} reallocated"
            assert bitwise(flat, want), f"rank {rank} step {step}: bucket {index} differs"
            offset = 0
            for parameter, other in zip(bucket, twin, strict=True):
                count = parameter.numel()
                assert parameter.grad.data_ptr() == flat[offset:].data_ptr(), "not a view"
                other.grad = want[offset:offset + count].view_as(other).clone()
                offset += count
        optimizer.step()
        optimizer_ref.step()
        for name, parameter in model.named_parameters():
            assert bitwise(parameter.detach(), twins[name].detach()), f"step {step}: {name}"
    sync.close()
    if rank == 0:
        print(f"ALL OK: 6 steps, {len(flats)} buckets on {size} ranks", flush=True)


if __name__ == "__main__":
    with abort_on_error(comm):
        main()
