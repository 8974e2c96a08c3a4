"""Worst batch first: the costliest micro-batch before step one, leaving no trace, and a
named stop where it does not fit."""

from __future__ import annotations

import logging
import os
import random
import re
import subprocess
import sys
import textwrap
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from deepspeech.config import ModelConfig, load_config
from deepspeech.data.dataset import collate
from deepspeech.data.sampler import BucketBatchSampler, SecondsBatchSampler
from deepspeech.errors import ConfigError, ResourceError
from deepspeech.model import DeepSpeech2
from deepspeech.training import micro_batch
from deepspeech.training.checkpoint import load_checkpoint
from deepspeech.training.determinism import no_trace, state_dict_digest
from deepspeech.training.micro_batch import EagerMicroBatches
from deepspeech.training.sync import LocalSync
from deepspeech.training.trainer import train
from deepspeech.training.worst_batch import costliest_micro_batch, forward_backward
from tests.distributed.conftest import mpirun_path

CHECK = "deepspeech.training.worst_batch"


def test_the_costliest_micro_batch_has_the_most_padded_audio():
    # Sorted first epoch, batches of 4 in micro-batches of 2: [0.5 1] [2 3] [4 4] [4 9].
    sampler = BucketBatchSampler([4.0, 1.0, 9.0, 2.0, 0.5, 4.0, 3.0, 4.0], batch_size=4,
                                 seed=0, micro_batch_size=2)
    assert costliest_micro_batch(sampler, 0) == [7, 2]  # 2 x 9 s beats 2 x 4 s
    whole = BucketBatchSampler(sampler.durations.tolist(), batch_size=4, seed=0)
    assert sorted(costliest_micro_batch(whole, 0)) == [0, 2, 5, 7]
    # By audio a batch of many short ones can cost more than one long one: 5 x 2 s > 9 s.
    by_audio = SecondsBatchSampler([2.0] * 5 + [9.0], 10.0, 8, seed=0)
    assert costliest_micro_batch(by_audio, 0) == [0, 1, 2, 3, 4]


def _tiny_model() -> DeepSpeech2:
    config = ModelConfig()
    config.conv.channels, config.rnn.layers, config.rnn.hidden, config.dropout = [4, 4], 1, 8, 0.3
    return DeepSpeech2(config, 40, 6)


def _batch(frames: int = 60) -> object:
    generator = torch.Generator().manual_seed(0)
    return collate([(i, torch.randn(40, frames - 7 * i, generator=generator),
                     torch.tensor([1, 2, 3])) for i in range(3)])


def test_the_batch_runs_and_leaves_no_trace():
    model = _tiny_model().eval()
    buffers = {name: buffer.clone() for name, buffer in model.named_buffers()}
    weights = state_dict_digest(model.state_dict())
    random.seed(5), np.random.seed(5), torch.manual_seed(5)
    states = (random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state())
    ran = []
    model.register_forward_hook(lambda module, inputs, output: ran.append(module.training))
    run = _run(model)
    with no_trace(model):
        assert forward_backward(run, _batch()) is None
        assert all(parameter.grad is not None for parameter in model.parameters())
    assert ran == [True]  # in train mode, as a step runs it
    assert not model.training
    assert state_dict_digest(model.state_dict()) == weights
    assert all(torch.equal(buffer, buffers[name]) for name, buffer in model.named_buffers())
    assert any("num_batches_tracked" in name for name in buffers)
    assert all(parameter.grad is None for parameter in model.parameters())
    assert random.getstate() == states[0]
    assert np.array_equal(np.random.get_state()[1], states[1])
    assert torch.equal(torch.get_rng_state(), states[2])


def _run(model) -> SimpleNamespace:
    """What the check reads of a run: the micro-batch runner a CPU run builds."""
    cpu = torch.device("cpu")
    return SimpleNamespace(model=model, runner=EagerMicroBatches(
        model, cpu, None, torch.amp.GradScaler("cpu", enabled=False)))


def test_an_error_other_than_memory_is_not_taken_for_one(monkeypatch):
    def broken(*args):
        raise RuntimeError("shapes do not match")

    monkeypatch.setattr(micro_batch, "compute_loss", broken)
    run = _run(_tiny_model())
    with pytest.raises(RuntimeError, match="shapes do not match"):
        forward_backward(run, _batch())


class _FramesCap(torch.nn.Module):
    """A model on a device with room for ``frames`` feature frames and not one more."""

    def __init__(self, inner: torch.nn.Module, frames: int) -> None:
        super().__init__()
        self.inner, self.frames = inner, frames

    def forward(self, features, lengths):
        if features.shape[2] > self.frames:
            raise torch.OutOfMemoryError(f"CUDA out of memory: {features.shape[2]} frames")
        return self.inner(features, lengths)


def test_the_check_runs_the_batch_as_the_runner_pads_it(monkeypatch):
    """Eagerly the batch fits; padded to its CUDA graph's shape (a few frames more) it does
    not, and the check, going through the run's runner, says so before step one."""
    from deepspeech.training import cuda_graphs

    # The graph runner's logic on the CPU: every capture refused, so each micro-batch runs
    # eagerly padded to its shape class; the CPU's CTC takes the transcripts' own labels.
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: None)
    monkeypatch.setattr(cuda_graphs.GraphedMicroBatches, "_capture",
                        lambda self, padded, shape: self._refuse(shape, "no GPU here"))
    real_padding = cuda_graphs.padded_batch
    monkeypatch.setattr(cuda_graphs, "padded_batch", lambda batch, shape: replace(
        batch, features=real_padding(batch, shape).features))
    batch = _batch(61)
    assert cuda_graphs.shape_class(batch)[1] > 61
    model = _FramesCap(_tiny_model(), frames=61)
    cpu, scaler = torch.device("cpu"), torch.amp.GradScaler("cpu", enabled=False)
    with no_trace(model):
        assert forward_backward(_run(model), batch) is None
    graphed = SimpleNamespace(model=model, runner=cuda_graphs.GraphedMicroBatches(
        model, cpu, None, scaler))
    with no_trace(model):
        failure = forward_backward(graphed, batch)
    assert failure is not None and "CUDA out of memory: 64 frames" in failure


@pytest.mark.parametrize("value", ["auto", "true", "false"])
def test_the_switch_takes_auto_true_or_false(value):
    expected = {"auto": "auto", "true": True, "false": False}[value]
    config = load_config(None, [f"train.worst_batch_first={value}"], check_files=False)
    assert config.train.worst_batch_first == expected


@pytest.mark.parametrize("value", ["yes please", "1", "cuda"])
def test_the_switch_refuses_anything_else(value):
    with pytest.raises(ConfigError, match="train.worst_batch_first"):
        load_config(None, [f"train.worst_batch_first={value}"], check_files=False)


def _out_of_memory(*args):
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; "
                                 "79.1 GiB total capacity)\nmore lines of advice")


def test_a_batch_that_does_not_fit_stops_the_run_before_it_writes(
        tiny_corpus, tiny_overrides, tmp_path, monkeypatch):
    monkeypatch.setattr(micro_batch, "compute_loss", _out_of_memory)
    config = load_config(None, [*tiny_overrides(tiny_corpus, tmp_path),
                                "train.worst_batch_first=true"])
    with pytest.raises(ResourceError) as caught:
        train(config)
    message = str(caught.value)
    assert re.search(r"train.worst_batch_first: the costliest micro-batch of epoch 1 \(8 "
                     r"utterances of up to \d\.\d s, \d+ frames\) does not fit in memory on cpu "
                     r"\(CUDA out of memory. Tried to allocate 2.00 GiB \(GPU 0; 79.1 GiB total "
                     r"capacity\)\)", message), message
    for key in ("train.micro_batch_size (now 8", "train.batch_seconds", "data.max_duration",
                "train.worst_batch_first=false"):
        assert key in message
    assert not (tmp_path / "config.yaml").exists() and not (tmp_path / "last.pt").exists()


class _PeerOutOfMemory(LocalSync):
    """One process that, from the weights' broadcast on, is rank 0 of two whose peer's
    batch does not fit (until then: its data and batches are a single process's)."""

    def prepare(self, model, plan):
        self.size = 2

    def gather_objects(self, value):
        return [value] if self.size == 1 else [value, "CUDA out of memory. Tried to allocate"]


def test_every_rank_stops_where_one_does_not_fit(tiny_corpus, tiny_overrides, tmp_path):
    config = load_config(None, [*tiny_overrides(tiny_corpus, tmp_path),
                                "train.worst_batch_first=true"])
    with pytest.raises(ResourceError, match=r"\(8 utterances of up to .* does not fit in "
                                            r"memory on rank 1 \(cpu\) \(CUDA out of memory"):
        train(config, _PeerOutOfMemory())


@pytest.mark.slow
def test_a_run_with_the_check_has_the_bits_of_a_run_without(tiny_corpus, tiny_overrides,
                                                             tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=CHECK)
    digests = {}
    for setting in ("auto", "true"):  # auto: off on the CPU
        caplog.clear()
        config = load_config(None, [*tiny_overrides(tiny_corpus, tmp_path / setting),
                                    "train.max_steps=4", "optim.ema_decay=0.9",
                                    f"train.worst_batch_first={setting}"])
        train(config)
        ran = [r.getMessage() for r in caplog.records if r.name == CHECK]
        assert len(ran) == (setting == "true"), ran
        last = load_checkpoint(tmp_path / setting / "last.pt")
        digests[setting] = (state_dict_digest(last.model), state_dict_digest(last.training_model),
                            str(last.optimizer), last.rng[0]["torch"].tolist())
    assert re.match(r"worst batch first: the costliest micro-batch \(8 utterances of up to "
                    r"\d\.\d s, \d+ frames\) ran forward and backward in \d+\.\d s", ran[0])
    assert digests["true"] == digests["auto"]


MEMORY_CAP = """
    import resource, sys
    from deepspeech.config import load_config
    from deepspeech.training import worst_batch
    from deepspeech.training.trainer import train

    real = worst_batch.forward_backward

    def capped(run, batch):
        # Room for little more than what is mapped now: the batch's activations do not fit.
        with open("/proc/self/status") as status:
            mapped = next(int(line.split()[1]) for line in status if line.startswith("VmSize"))
        limit = (mapped + 48 * 1024) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
        return real(run, batch)

    worst_batch.forward_backward = capped
    train(load_config(None, sys.argv[1:]))
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_a_real_allocation_failure_on_the_cpu_is_named(tiny_corpus, tiny_overrides, tmp_path):
    # Wide convolutions make the batch's activations hundreds of megabytes.
    overrides = [*tiny_overrides(tiny_corpus, tmp_path), "train.worst_batch_first=true",
                 "model.conv.channels=[256,4]", "train.batch_size=16", "model.dropout=0.0"]
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(MEMORY_CAP), *overrides],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert ("ResourceError: train.worst_batch_first: the costliest micro-batch of epoch 1 (16 "
            "utterances of up to" in result.stderr), result.stderr[-3000:]
    assert "does not fit in memory on cpu (DefaultCPUAllocator: can't allocate memory" in \
        result.stderr


RANK_1_OUT_OF_MEMORY = """
    import os, sys, torch
    from deepspeech.cli import main
    from deepspeech.training import micro_batch

    def out_of_memory(*args):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.00 GiB")

    if os.environ["OMPI_COMM_WORLD_RANK"] == "1":
        micro_batch.compute_loss = out_of_memory
    sys.exit(main(["train", *sys.argv[1:]]))
"""


@pytest.mark.mpi
@pytest.mark.slow
def test_under_mpi_every_rank_ends_where_one_does_not_fit(tiny_corpus, tiny_overrides, tmp_path):
    mpirun = mpirun_path()
    if mpirun is None:
        pytest.skip("mpirun not found")
    config = tmp_path / "empty.yaml"
    config.write_text("{}\n")
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    command = [mpirun, *root, "-n", "2", sys.executable, "-c", textwrap.dedent(RANK_1_OUT_OF_MEMORY),
               "-c", str(config), *tiny_overrides(tiny_corpus, tmp_path / "run"),
               "train.worst_batch_first=true", "distributed.timeout_s=20"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OMPI_MCA_btl": "^ofi"})
    output = done.stdout + done.stderr
    assert done.returncode != 0, output[-3000:]
    assert "does not fit in memory on rank 1 (cpu) (CUDA out of memory. Tried to allocate " \
           "9.00 GiB)" in output, output[-3000:]
    assert not (tmp_path / "run" / "last.pt").exists()
