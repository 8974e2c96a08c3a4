"""The CTC loss helper and the launcher's view of where a process runs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from deepspeech.config import DistributedConfig, ExecutionConfig
from deepspeech.device import select_device
from deepspeech.errors import ConfigError
from deepspeech.execution import resolve_plan
from deepspeech.model.ctc_loss import ctc_loss_sum
from deepspeech.training.launch import LOCAL_RANK_VARIABLES, launched_local_rank


def test_ctc_loss_sum_is_the_summed_ctc_loss_with_its_gradient():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 20, 6, generator=generator, requires_grad=True)  # [B, T, C]
    log_probs = logits.log_softmax(-1)
    targets = torch.tensor([1, 2, 3, 4, 5, 1, 1], dtype=torch.int32)
    lengths, target_lengths = torch.tensor([20, 15, 9]), torch.tensor([3, 2, 2])
    loss = ctc_loss_sum(log_probs, lengths, targets, target_lengths)
    want = F.ctc_loss(log_probs.transpose(0, 1), targets, lengths, target_lengths,
                      reduction="sum")
    assert loss.dtype == torch.float32 and loss.device == log_probs.device
    assert torch.equal(loss, want)
    loss.backward()
    assert logits.grad is not None and torch.isfinite(logits.grad).all()


def test_ctc_loss_sum_can_zero_impossible_alignments():
    log_probs = torch.randn(1, 2, 4).log_softmax(-1)  # 2 frames cannot emit 3 labels
    targets, lengths = torch.tensor([1, 2, 3]), torch.tensor([2])
    assert torch.isinf(ctc_loss_sum(log_probs, lengths, targets, torch.tensor([3])))
    assert ctc_loss_sum(log_probs, lengths, targets, torch.tensor([3]),
                        zero_infinity=True).item() == 0.0


@pytest.mark.parametrize("variable", LOCAL_RANK_VARIABLES)
def test_local_rank_comes_from_the_launcher(monkeypatch, variable):
    for name in LOCAL_RANK_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert launched_local_rank() == 0
    monkeypatch.setenv(variable, "3")
    assert launched_local_rank() == 3


def test_a_bad_allreduce_rules_file_is_a_config_error(tmp_path):
    from deepspeech.distributed import tuning
    from deepspeech.errors import ConfigError
    from deepspeech.training.launch import make_sync

    rules = tmp_path / "rules.json"
    rules.write_text('{"format": "deepspeech-allreduce-rules/1", "world_size": 2, "nodes": 1, '
                     '"rules": [{"from_bytes": 0, "algorithm": "tree"}]}')
    config = DistributedConfig(deterministic=True, allreduce_tuning=str(rules))
    with pytest.raises(ConfigError, match=r"distributed.allreduce_tuning: .*rules.json: "
                                          r"rules\[0\].algorithm: must be one of"):
        make_sync(config)
    rules.write_text(rules.read_text().replace("tree", "ring"))
    try:
        make_sync(config).close()  # a valid file is taken
    finally:
        tuning.use_rules(None)


def test_nccl_with_more_processes_than_gpus_is_refused_before_it_starts(monkeypatch) -> None:
    import torch.distributed as dist

    from deepspeech.errors import ConfigError
    from deepspeech.training.launch import make_sync

    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    for variable in ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"):  # torchrun's decides
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(dist, "init_process_group", lambda *a, **k: pytest.fail("started"))
    with pytest.raises(ConfigError, match="2 processes on this node share 1 GPU"):
        make_sync(DistributedConfig(backend="torch"), device="cuda:0")


def test_fp16_is_refused_off_the_gpu_and_bf16_is_not():
    cpu = torch.device("cpu")
    with pytest.raises(ConfigError, match="execution.precision: fp16 needs a CUDA device, and "
                                          "this run is on cpu; use bf16 or fp32 there"):
        resolve_plan(ExecutionConfig(precision="fp16"), cpu)
    assert resolve_plan(ExecutionConfig(precision="bf16"), cpu).autocast_dtype is torch.bfloat16
    assert resolve_plan(ExecutionConfig(), cpu).autocast_dtype is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_missing_gpu_is_named_by_the_setting_that_asked_for_it():
    with pytest.raises(ConfigError, match="--device: cuda requested but no CUDA device"):
        select_device("cuda", what="--device")
    with pytest.raises(ConfigError, match="train.device: cuda requested"):
        select_device("cuda")
