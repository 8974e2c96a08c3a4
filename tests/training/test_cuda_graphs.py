"""CUDA graphs of the training step: the shape ladder and padding, the switch, and the
masked batch norm the GPU forward runs (here on the CPU); replay against eager on a GPU."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
import torch
from torch import nn

from deepspeech.config import ExecutionConfig, ModelConfig, load_config
from deepspeech.data.dataset import collate
from deepspeech.errors import ConfigError
from deepspeech.execution import resolve_plan
from deepspeech.model import DeepSpeech2
from deepspeech.model.layers import normalize_valid_frames, time_mask
from deepspeech.model.mode import ModelMode
from deepspeech.training.cuda_graphs import (
    FRAME_STEP,
    padded_batch,
    rounded_up,
    shape_class,
)
from deepspeech.training.micro_batch import EagerMicroBatches, build_runner
from deepspeech.training.step import compute_loss
from deepspeech.training.sync import LocalSync

CUDA = torch.cuda.is_available()


def _batch(frames: int = 61, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    return collate([(i, torch.randn(40, frames - 7 * i, generator=generator),
                     torch.tensor([1, 2, 3, 4][:i + 2])) for i in range(3)])


def _model(device: str = "cpu") -> DeepSpeech2:
    """A small model in the mode its device's plan gives it."""
    torch.manual_seed(0)
    config = ModelConfig()
    config.conv.channels, config.rnn.layers, config.rnn.hidden = [4, 4], 2, 16
    return DeepSpeech2(config, 40, 6, ModelMode(fixed_shapes=device != "cpu"))


def test_sizes_round_up_by_at_most_an_eighth_with_eight_per_octave():
    assert [rounded_up(n, 16) for n in (1, 16, 17, 100, 128, 129, 1000)] == [
        16, 16, 32, 112, 128, 144, 1024]
    sizes = {rounded_up(n, 1) for n in range(1025, 2049)}
    assert len(sizes) == 8
    assert all(n <= rounded_up(n, 1) <= n * 9 / 8 for n in range(1, 5000))


def test_a_batch_pads_to_its_shape_class_and_keeps_its_lengths():
    batch = _batch()
    shape = shape_class(batch)
    assert shape == (3, rounded_up(61, FRAME_STEP), 8)
    padded = padded_batch(batch, shape)
    assert padded.features.shape == (3, 40, shape[1])
    assert torch.equal(padded.features[:, :, :61], batch.features)
    assert not padded.features[:, :, 61:].any()
    assert padded.targets.numel() == 3 * 8
    assert torch.equal(padded.targets[:batch.targets.numel()], batch.targets)
    assert padded.feature_lengths is batch.feature_lengths


def test_padded_frames_change_the_loss_only_by_rounding():
    model = _model().eval()
    batch = _batch()
    # The CPU's CTC takes exactly the transcripts' labels: only the frames are padded here
    # (tests/model/kernels/test_ctc.py pads the labels of the GPU's).
    frames_padded = replace(batch, features=padded_batch(batch, shape_class(batch)).features)
    with torch.no_grad():
        want = compute_loss(model, batch, torch.device("cpu"), None)
        got = compute_loss(model, frames_padded, torch.device("cpu"), None)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)


def test_masked_sequence_norm_equals_batch_norm_over_the_valid_frames():
    """The GPU's fixed-shape sequence-wise batch norm against the CPU's gathered one."""
    torch.manual_seed(0)
    x = torch.randn(3, 9, 5)
    valid = time_mask(torch.tensor([9, 4, 1]), 9)
    gathered, masked = nn.BatchNorm1d(5), nn.BatchNorm1d(5)
    want = gathered(x[valid])
    got = normalize_valid_frames(masked, x.transpose(1, 2).unsqueeze(2), valid)
    got = got.squeeze(2).transpose(1, 2)[valid]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(masked.running_mean, gathered.running_mean)
    torch.testing.assert_close(masked.running_var, gathered.running_var)
    assert int(masked.num_batches_tracked) == int(gathered.num_batches_tracked) == 1


@pytest.mark.parametrize("value", ["auto", "true", "false"])
def test_the_switch_takes_auto_true_or_false(value):
    expected = {"auto": "auto", "true": True, "false": False}[value]
    assert load_config(None, [f"execution.cuda_graphs={value}"],
                       check_files=False).execution.cuda_graphs == expected


def test_the_switch_refuses_anything_else_and_true_on_a_cpu():
    with pytest.raises(ConfigError, match="execution.cuda_graphs"):
        load_config(None, ["execution.cuda_graphs=sometimes"], check_files=False)
    with pytest.raises(ConfigError, match="execution.cuda_graphs: true needs a CUDA device"):
        load_config(None, ["execution.cuda_graphs=true", "train.device=cpu"], check_files=False)


def test_no_graphs_off_the_gpu_and_a_named_error_where_asked_for():
    model, cpu = _model(), torch.device("cpu")
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    hooks = LocalSync().gradient_hooks
    plan = resolve_plan(ExecutionConfig(), cpu, gradient_hooks=hooks)
    assert isinstance(build_runner(plan, model, scaler), EagerMicroBatches)
    with pytest.raises(ConfigError, match="execution.cuda_graphs: true, but the run is on cpu, "
                                          "not a CUDA device"):
        resolve_plan(ExecutionConfig(cuda_graphs=True), cpu, gradient_hooks=hooks)


def _micro_batches(batches: list, through_runner: bool, device: str = "cuda"
                   ) -> tuple[list[float], list[torch.Tensor], object]:
    """Each batch's loss through a runner, or eagerly padded as the runner pads it
    (``cuda_graphs.padded_batch``), the gradients summed over them, and the runner."""
    from deepspeech.training import cuda_graphs

    model = _model(device).to(device).train()
    runner = cuda_graphs.GraphedMicroBatches(model, torch.device(device), None,
                                             torch.amp.GradScaler(device, enabled=False))
    losses = []
    for batch in batches:
        torch.manual_seed(1)
        if through_runner:
            losses.append(float(runner.loss_and_backward(batch, 12)))
            continue
        runner.attach_gradients()
        shape = shape_class(batch)
        loss = compute_loss(model, cuda_graphs.padded_batch(batch, shape), torch.device(device),
                            None, shape[2]) / 12
        loss.backward()
        losses.append(float(loss.detach()))
    return losses, [p.grad.clone() for p in model.parameters()], runner


@pytest.mark.skipif(not CUDA, reason="CUDA graphs need a GPU")
def test_every_micro_batch_is_a_replay_and_replays_repeat_their_bits():
    batches = [_batch(61, seed) for seed in range(4)]  # one shape class
    losses, gradients, runner = _micro_batches(batches, through_runner=True)
    assert (runner.captures, runner.replays) == (1, 4)  # the rehearsal counts for nothing
    norms = [m for m in runner.model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    assert all(int(norm.num_batches_tracked) == 4 for norm in norms)
    again, gradients_again, _ = _micro_batches(batches, through_runner=True)
    assert again == losses
    assert all(torch.equal(a, b) for a, b in zip(gradients_again, gradients, strict=True))
    eager, eager_gradients, _ = _micro_batches(batches, through_runner=False)
    torch.testing.assert_close(losses, eager, rtol=1e-5, atol=0)
    for got, want in zip(gradients, eager_gradients, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


@pytest.mark.skipif(not CUDA, reason="CUDA graphs need a GPU")
def test_a_shape_whose_capture_fails_runs_eagerly_and_says_why(caplog):
    from deepspeech.training.cuda_graphs import GraphedMicroBatches

    class ReadsBack(nn.Module):  # a host round trip, which no capture allows
        def forward(self, x, lengths):
            log_probs, lengths = self.inner(x, lengths)
            return log_probs * (1.0 + 0.0 * float(log_probs.sum())), lengths

    device = torch.device("cuda")
    model = ReadsBack()
    model.inner = _model("cuda")
    model.to(device).train()
    runner = GraphedMicroBatches(model, device, None, torch.amp.GradScaler("cuda", enabled=False))
    with caplog.at_level(logging.WARNING):
        losses = [float(runner.loss_and_backward(_batch(61, seed), 3)) for seed in range(3)]
    assert runner.captures == 0 and all(torch.isfinite(torch.tensor(losses)))
    assert "CUDA graph refused for 3 utterances" in caplog.text


def test_rehearsals_leave_no_trace_and_refused_shapes_run_eagerly(monkeypatch, caplog):
    """The runner's own logic on the CPU: every capture refused, so each micro-batch is
    its shape's rehearsal (once) and then an eager run; the sums must be plain eager's."""
    from deepspeech.training import cuda_graphs

    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: None)
    monkeypatch.setattr(cuda_graphs.GraphedMicroBatches, "_capture",
                        lambda self, padded, shape: self._refuse(shape, "no GPU here"))
    # The CPU's CTC takes exactly the transcripts' labels: pad the frames only.
    monkeypatch.setattr(cuda_graphs, "padded_batch", lambda batch, shape: replace(
        batch, features=padded_batch(batch, shape).features))
    batches = [_batch(61, 0), _batch(61, 1), _batch(90, 2), _batch(61, 3)]  # two shapes
    with caplog.at_level(logging.WARNING):
        losses, gradients, runner = _micro_batches(batches, through_runner=True, device="cpu")
    want_losses, want_gradients, eager = _micro_batches(batches, through_runner=False,
                                                        device="cpu")
    assert losses == want_losses
    assert all(torch.equal(a, b) for a, b in zip(gradients, want_gradients, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(runner.model.state_dict().values(),
                                                 eager.model.state_dict().values(), strict=True))
    assert caplog.text.count("CUDA graph refused") == 2  # once per shape
