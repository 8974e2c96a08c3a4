"""The execution section and its plan: every ``auto`` settled once, overrides named, the
layers told their mode, and a resume that says what it computes differently."""

from __future__ import annotations

import logging
import typing

import pytest
import torch

from deepspeech import execution
from deepspeech.config import Config, ExecutionConfig, ModelConfig, load_config
from deepspeech.errors import ConfigError
from deepspeech.execution import ExecutionPlan, resolve_plan
from deepspeech.model import DeepSpeech2
from deepspeech.model.mode import ModelMode
from deepspeech.model.rnn_kernels import RNN_KERNELS
from deepspeech.training.checkpoint import Checkpoint, load_checkpoint
from deepspeech.training.resume import check_resumable, warn_if_execution_changed
from deepspeech.training.trainer import train

CPU = torch.device("cpu")
CUDA = torch.device("cuda", 0)  # only named: resolving touches no GPU


def test_rnn_kernels_are_the_configs_choices() -> None:
    choices = typing.get_args(typing.get_type_hints(ExecutionConfig)["rnn_kernel"])
    assert set(choices) == set(RNN_KERNELS)
    assert ExecutionConfig().rnn_kernel == "torch"


def test_unknown_values_are_refused_by_name() -> None:
    with pytest.raises(ConfigError, match=r"execution\.rnn_kernel: must be one of torch, "
                                          r"persistent; got 'cudnn'"):
        load_config(None, ["execution.rnn_kernel=cudnn"])
    with pytest.raises(ConfigError, match=r"execution\.cuda_ipc: must be one of auto, True, "
                                          r"False; got 'sometimes'"):
        load_config(None, ["execution.cuda_ipc=sometimes"])


def test_keys_of_earlier_releases_are_read_at_their_new_place_and_named(tmp_path, caplog):
    path = tmp_path / "old.yaml"
    path.write_text("model:\n  rnn: {kernel: persistent}\ntrain:\n  precision: bf16\n"
                    "  cuda_graphs: false\ndata:\n  features_on: device\n")
    with caplog.at_level(logging.WARNING):
        config = load_config(path, check_files=False)
    assert config.execution == ExecutionConfig(rnn_kernel="persistent", precision="bf16",
                                               cuda_graphs=False, features_on="device")
    assert [record.getMessage() for record in caplog.records] == [
        f"{path}: {old} is {new} now; read as such" for old, new in (
            ("model.rnn.kernel", "execution.rnn_kernel"),
            ("train.precision", "execution.precision"),
            ("train.cuda_graphs", "execution.cuda_graphs"),
            ("data.features_on", "execution.features_on"))]


def test_a_key_given_at_both_places_is_refused():
    with pytest.raises(ConfigError, match="train.precision and execution.precision are both "
                                          "given; train.precision is execution.precision now: "
                                          "keep only execution.precision"):
        load_config(None, ["train.precision=bf16", "execution.precision=fp32"])


def test_a_checkpoints_config_from_before_the_section_loads_and_resumes():
    stored = Config().to_dict()
    del stored["execution"]
    stored["model"]["rnn"]["kernel"] = "torch"
    stored["data"]["features_on"] = "workers"
    assert Config.from_dict(stored).execution == ExecutionConfig()
    checkpoint = Checkpoint(config=stored, vocabulary=[], model={}, optimizer={}, scaler={},
                            rng=[{"rank": 0}])
    check_resumable(checkpoint, load_config(None, ["train.resume=run/last.pt"],
                                            check_files=False))


def test_the_cpu_plan_says_each_decision_and_why():
    plan = resolve_plan(ExecutionConfig(), CPU, environ={})
    assert plan.describe() == [
        "device=cpu", "rnn_kernel=torch", "batch_norm=torch", "precision=fp32",
        "cuda_graphs=false (auto: the run is on cpu, not a CUDA device)",
        "features_on=workers", "cuda_ipc=false", "mpi_cuda_aware=false"]
    assert plan.model_mode == ModelMode(rnn_kernel="torch", fixed_shapes=False)
    persistent = resolve_plan(ExecutionConfig(rnn_kernel="persistent"), CPU, environ={})
    assert persistent.model_mode.rnn_kernel == "persistent"
    assert "torch.nn.GRU's" in persistent.reasons["rnn_kernel"]
    fused = resolve_plan(ExecutionConfig(batch_norm="fused"), CPU, environ={})
    assert fused.model_mode.batch_norm == "torch"
    assert fused.reasons["batch_norm"].startswith("fused runs on CUDA: on cpu the torch form")


def test_a_gpu_plan_settles_graphs_ipc_and_mpi(monkeypatch):
    monkeypatch.setattr(execution, "_probe_mpi_cuda_support",
                        lambda: (False, "Open MPI v5 does not report CUDA support"))
    plan = resolve_plan(ExecutionConfig(), CUDA, environ={})
    assert (plan.cuda_graphs, plan.cuda_ipc, plan.mpi_cuda_aware) == (True, False, False)
    assert plan.model_mode.fixed_shapes
    assert resolve_plan(ExecutionConfig(batch_norm="fused"), CUDA,
                        environ={}).model_mode.batch_norm == "fused"
    assert plan.reasons == {
        "cuda_graphs": "auto: a CUDA device",
        "cuda_ipc": "auto: off until training through it is measured",
        "mpi_cuda_aware": "auto: Open MPI v5 does not report CUDA support"}
    hooked = resolve_plan(ExecutionConfig(), CUDA, gradient_hooks=True, environ={})
    assert not hooked.cuda_graphs and "overlapped all-reduce" in hooked.reasons["cuda_graphs"]
    with pytest.raises(ConfigError, match="execution.cuda_graphs: true, but the overlapped"):
        resolve_plan(ExecutionConfig(cuda_graphs=True), CUDA, gradient_hooks=True, environ={})
    with pytest.raises(ConfigError, match="execution.mpi_cuda_aware: true, but Open MPI v5 "
                                          "does not report CUDA support"):
        resolve_plan(ExecutionConfig(mpi_cuda_aware=True), CUDA, environ={})
    forced = resolve_plan(ExecutionConfig(mpi_cuda_aware=True), CUDA,
                          environ={"DEEPSPEECH_MPI_CUDA_AWARE": "1"})
    assert forced.mpi_cuda_aware


def test_the_environment_overrides_and_is_named():
    plan = resolve_plan(ExecutionConfig(cuda_ipc=False), CUDA,
                        environ={"DEEPSPEECH_CUDA_IPC": "1", "DEEPSPEECH_MPI_CUDA_AWARE": "0"})
    assert plan.cuda_ipc and not plan.mpi_cuda_aware
    assert plan.reasons["cuda_ipc"] == "DEEPSPEECH_CUDA_IPC=1 overrides execution.cuda_ipc: False"
    on_cpu = resolve_plan(ExecutionConfig(), CPU, environ={"DEEPSPEECH_CUDA_IPC": "1"})
    assert not on_cpu.cuda_ipc and "overrides" in on_cpu.reasons["cuda_ipc"]
    with pytest.raises(ConfigError, match=r"DEEPSPEECH_CUDA_IPC='maybe': expected 0 or 1 "
                                          r"\(it overrides execution.cuda_ipc\)"):
        resolve_plan(ExecutionConfig(), CPU, environ={"DEEPSPEECH_CUDA_IPC": "maybe"})


def test_what_only_a_gpu_can_do_is_refused_on_the_cpu():
    for key in ("cuda_ipc", "mpi_cuda_aware"):
        with pytest.raises(ConfigError, match=f"execution.{key}: true needs a CUDA device"):
            resolve_plan(ExecutionConfig(**{key: True}), CPU, environ={})


def test_the_layers_follow_the_mode_not_the_tensors_device():
    """The fixed-shape mode (a GPU's) runs every frame and masks; on CPU tensors it gives
    the gathering mode's outputs and gradients, to float rounding."""
    config = ModelConfig()
    config.conv.channels, config.rnn.layers, config.rnn.hidden = [4, 4], 2, 16
    features = torch.randn(3, 40, 50, generator=torch.Generator().manual_seed(0))
    lengths = torch.tensor([50, 31, 12])
    results = []
    for mode in (ModelMode(), ModelMode(fixed_shapes=True)):
        torch.manual_seed(0)
        model = DeepSpeech2(config, 40, 6, mode).train()
        log_probs, out_lengths = model(features, lengths)
        log_probs.sum().backward()
        results.append((log_probs.detach(), [p.grad for p in model.parameters()]))
    (want, want_grads), (got, got_grads) = results
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for a, b in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def _plan(**changes) -> dict:
    return {**ExecutionPlan(device="cpu", rnn_kernel="torch", batch_norm="torch",
                            precision="fp32", cuda_graphs=False, features_on="workers",
                            cuda_ipc=False, mpi_cuda_aware=False).to_dict(), **changes}


def test_a_resume_that_computes_differently_is_allowed_and_says_so(caplog):
    config = load_config(None, ["train.resume=run/last.pt"], check_files=False)
    checkpoint = Checkpoint(config=config.to_dict(), vocabulary=[], model={},
                            execution=_plan(precision="bf16", device="cpu"))
    with caplog.at_level(logging.INFO):
        warn_if_execution_changed(checkpoint, config, resolve_plan(config.execution, CPU,
                                                                   environ={}))
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage() == (
        "resuming run/last.pt: it computes differently (execution.precision 'bf16' -> 'fp32', "
        "as settled); the results will differ from the run before; the run continues, but "
        "not bit for bit as the uninterrupted run would")


def test_a_resume_that_only_moves_bytes_otherwise_is_said_quietly(caplog):
    config = load_config(None, ["train.resume=run/last.pt"], check_files=False)
    checkpoint = Checkpoint(config=config.to_dict(), vocabulary=[], model={},
                            execution=_plan(mpi_cuda_aware=True))
    plan = resolve_plan(config.execution, CPU, environ={})
    with caplog.at_level(logging.INFO):
        warn_if_execution_changed(checkpoint, config, plan)
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [(
        logging.INFO, "resuming run/last.pt: execution.mpi_cuda_aware True -> False (as "
                      "settled); the arithmetic is the same")]
    caplog.clear()
    another_gpu = Checkpoint(config=config.to_dict(), vocabulary=[], model={},
                             execution=_plan(device="cpu:1"))
    warn_if_execution_changed(another_gpu, config, plan)
    assert not caplog.records


def test_a_checkpoint_without_a_plan_is_compared_as_configured(caplog):
    stored = Config().to_dict()
    del stored["execution"]
    stored["train"]["precision"] = "bf16"
    checkpoint = Checkpoint(config=stored, vocabulary=[], model={})
    config = load_config(None, ["train.resume=run/last.pt"], check_files=False)
    with caplog.at_level(logging.WARNING):
        warn_if_execution_changed(checkpoint, config, resolve_plan(config.execution, CPU,
                                                                   environ={}))
    assert "execution.precision 'bf16' -> 'fp32', as configured" in caplog.text


@pytest.mark.slow  # two short trainings
def test_a_run_logs_its_plan_keeps_it_and_a_resume_in_bf16_warns(tiny_corpus, tiny_overrides,
                                                                   tmp_path, caplog):
    overrides = [*tiny_overrides(tiny_corpus, tmp_path), "train.max_steps=2",
                 "train.device=cpu"]
    with caplog.at_level(logging.INFO, logger="deepspeech"):
        train(load_config(None, overrides))
    [logged] = [r.getMessage() for r in caplog.records if "execution plan" in r.getMessage()]
    assert logged.splitlines()[1:] == [
        f"  {line}" for line in resolve_plan(ExecutionConfig(), CPU).describe()]
    assert load_checkpoint(tmp_path / "last.pt").execution == resolve_plan(
        ExecutionConfig(), CPU).to_dict()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="deepspeech"):
        train(load_config(None, [*overrides, "train.max_steps=3", "execution.precision=bf16",
                                 f"train.resume={tmp_path / 'last.pt'}"]))
    assert "execution.precision 'fp32' -> 'bf16', as settled); the results will differ" \
        in caplog.text
