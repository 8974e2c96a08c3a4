"""The persistent GRU kernel: value and gradients against torch.nn.GRU, bitwise repeatable.

The kernels run on the GPU where there is one, else in Triton's interpreter on the CPU
(tests/conftest.py sets TRITON_INTERPRET), one launch per time step there.
"""

from __future__ import annotations

import logging
import os

import pytest
import torch
from torch import nn

from deepspeech.config import ModelConfig, RNNConfig, load_config
from deepspeech.errors import ConfigError
from deepspeech.model import DeepSpeech2
from deepspeech.model.kernels import gru as pg
from deepspeech.model.kernels.gru import PersistentGRU, gru_recurrence
from deepspeech.model.mode import ModelMode
from deepspeech.model.rnn_kernels import RNN_KERNELS

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
needs_kernels = pytest.mark.skipif(
    DEVICE == "cpu" and (os.environ.get("TRITON_INTERPRET") != "1"
                         or not pg._triton_importable()),
    reason="no GPU, and Triton is not there or was not started in its interpreter")
TOL = {"atol": 2e-5, "rtol": 1e-5}


def _pair(inputs: int, hidden: int) -> tuple[nn.GRU, PersistentGRU]:
    torch.manual_seed(0)
    reference = nn.GRU(inputs, hidden, batch_first=True)
    torch.manual_seed(0)
    return reference, PersistentGRU(inputs, hidden)


def _forward_backward(rnn: nn.Module, x: torch.Tensor, h0: torch.Tensor | None):
    """Outputs, then gradients of x, h0 and every parameter, of a loss that weighs each
    output unit and the last state differently."""
    x = x.clone().requires_grad_(True)
    h0 = None if h0 is None else h0.clone().requires_grad_(True)
    y, h_last = rnn(x, h0)
    weights = torch.linspace(-1.0, 1.0, y.shape[-1], dtype=y.dtype, device=y.device)
    ((y * weights).sum() + h_last.sin().sum()).backward()
    grads = [x.grad] + ([] if h0 is None else [h0.grad]) + [p.grad for p in rnn.parameters()]
    return [t.detach().double().cpu() for t in (y, h_last, *grads)]


def _inputs(batch: int, steps: int, inputs: int, hidden: int):
    generator = torch.Generator().manual_seed(1)
    return (torch.randn(batch, steps, inputs, generator=generator),
            torch.randn(1, batch, hidden, generator=generator))


def test_parameters_are_torch_grus_under_the_same_seed():
    reference, persistent = _pair(7, 20)
    assert list(persistent.state_dict()) == list(reference.state_dict())
    assert list(persistent.state_dict()) == ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0",
                                             "bias_hh_l0"]
    for a, b in zip(persistent.state_dict().values(), reference.state_dict().values(),
                    strict=True):
        assert torch.equal(a, b)


@needs_kernels
@pytest.mark.parametrize("batch", [3, 140])  # 140: the batch split over programs, and a
def test_value_and_gradients_match_torch_gru(batch):  # tile wholly past the batch
    # 20 units: a hidden size that is no multiple of the 16-unit tile.
    reference, persistent = _pair(7, 20)
    x, h0 = _inputs(batch, 5, 7, 20)
    want = _forward_backward(reference.double(), x.double(), h0.double())
    got = _forward_backward(persistent.to(DEVICE), x.to(DEVICE), h0.to(DEVICE))
    for name, a, b in zip(["y", "h_last", "x", "h0", *dict(reference.named_parameters())],
                          got, want, strict=True):
        torch.testing.assert_close(a, b, **TOL, msg=lambda m, n=name: f"{n}: {m}")


@pytest.fixture
def deterministic(monkeypatch):
    """As training runs: deterministic algorithms, uninitialized memory filled with NaN."""
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # cuBLAS refuses to run without
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(before)


@needs_kernels
def test_two_runs_are_bitwise_identical(deterministic):
    _, persistent = _pair(7, 20)
    persistent.to(DEVICE)
    x, h0 = _inputs(3, 5, 7, 20)
    first = _forward_backward(persistent, x.to(DEVICE), h0.to(DEVICE))
    persistent.zero_grad()
    second = _forward_backward(persistent, x.to(DEVICE), h0.to(DEVICE))
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    assert torch.utils.deterministic.fill_uninitialized_memory  # left as it was
    assert all(torch.isfinite(t).all() for t in first)


@needs_kernels
def test_streaming_in_chunks_equals_one_pass():
    _, persistent = _pair(7, 20)
    persistent.to(DEVICE)
    x, _ = _inputs(3, 5, 7, 20)
    x = x.to(DEVICE)
    with torch.no_grad():
        whole, whole_last = persistent(x)
        head, state = persistent(x[:, :2])
        tail, last = persistent(x[:, 2:], state)
    torch.testing.assert_close(torch.cat([head, tail], dim=1), whole, **TOL)
    torch.testing.assert_close(last, whole_last, **TOL)


@needs_kernels
def test_a_model_with_the_persistent_kernel_matches_the_torch_kernel(monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)  # cuDNN's GRU in full fp32
    def build(kernel: str) -> DeepSpeech2:
        torch.manual_seed(0)
        rnn = RNNConfig(kind="gru", layers=2, hidden=24)
        mode = ModelMode(rnn_kernel=kernel, fixed_shapes=DEVICE == "cuda")
        return DeepSpeech2(ModelConfig(rnn=rnn, fc_hidden=0), 41, 29, mode).to(DEVICE)

    generator = torch.Generator().manual_seed(2)
    features, lengths = torch.randn(2, 41, 13, generator=generator), torch.tensor([13, 9])
    results = []
    for model in (build("torch"), build("persistent")):
        log_probs, _ = model(features.to(DEVICE), lengths.to(DEVICE))
        (log_probs[..., 1] - log_probs[..., 0]).sum().backward()
        results.append((log_probs.detach(), {n: p.grad for n, p in model.named_parameters()}))
    (want, want_grads), (got, got_grads) = results
    assert list(got_grads) == list(want_grads)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    for name in want_grads:
        torch.testing.assert_close(got_grads[name], want_grads[name], atol=1e-4, rtol=1e-4,
                                   msg=lambda m, n=name: f"{n}: {m}")


@needs_kernels
def test_bf16_projections_give_bf16_outputs_and_gradients_near_float64():
    generator = torch.Generator().manual_seed(3)
    batch, steps, hidden = 20, 4, 40
    gx, h0 = torch.randn(batch, steps, 3 * hidden, generator=generator), torch.randn(batch, hidden)
    w_hh = torch.randn(3 * hidden, hidden, generator=generator) / hidden ** 0.5
    b_hh = torch.randn(3 * hidden, generator=generator)
    leaves = [t.to(DEVICE).requires_grad_(True)
              for t in (gx.to(torch.bfloat16), h0, w_hh, b_hh)]
    y, h_last = gru_recurrence(*leaves)
    y.float().sum().backward()
    assert (y.dtype, h_last.dtype) == (torch.bfloat16, torch.bfloat16)
    assert [leaf.grad.dtype for leaf in leaves] == [leaf.dtype for leaf in leaves]
    want = _recurrence_in_float64(gx.to(torch.bfloat16), h0, w_hh, b_hh)
    torch.testing.assert_close(y.double().cpu(), want, atol=0.05, rtol=0.0)


def test_lstm_is_refused_by_name():
    with pytest.raises(ConfigError, match="execution.rnn_kernel: persistent is a GRU kernel; "
                                          "model.rnn.kind is lstm"):
        load_config(None, ["execution.rnn_kernel=persistent", "model.rnn.kind=lstm"])
    with pytest.raises(ValueError, match="the persistent kernel runs GRUs only, not lstm"):
        RNN_KERNELS["persistent"]("lstm", 7, 20)


def test_without_triton_it_is_torch_gru_and_says_so(monkeypatch, caplog):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    pg._say_fallback_once.cache_clear()
    reference, persistent = _pair(7, 20)
    x, h0 = _inputs(3, 5, 7, 20)
    with caplog.at_level(logging.INFO, logger=pg.__name__):
        got = _forward_backward(persistent, x, h0)
        _forward_backward(persistent, x, h0)
    want = _forward_backward(reference, x, h0)
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        "execution.rnn_kernel=persistent"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_one_launch_with_grid_barriers_agrees_with_one_launch_per_step():
    """bf16 products, 200 units (13 programs of 16, the last partial), 2 batch groups."""
    torch.manual_seed(0)
    batch, steps, hidden = 96, 40, 200
    gx = torch.randn(batch, steps, 3 * hidden, device="cuda", dtype=torch.bfloat16)
    h0 = torch.randn(batch, hidden, device="cuda")
    w_hh = torch.randn(3 * hidden, hidden, device="cuda") / hidden ** 0.5
    b_hh = torch.randn(3 * hidden, device="cuda")
    dy = torch.randn(batch, steps, hidden, device="cuda", dtype=torch.bfloat16)

    def run(grid_barrier: bool):
        leaves = [t.clone().requires_grad_(True) for t in (gx, h0, w_hh, b_hh)]
        y, h_last = gru_recurrence(*leaves, grid_barrier=grid_barrier)
        torch.autograd.backward([y, h_last], [dy, torch.ones_like(h_last)])
        return [y, h_last, *(leaf.grad for leaf in leaves)]

    persistent, again, stepwise = run(True), run(True), run(False)
    assert pg.barrier_give_ups(torch.device("cuda", torch.cuda.current_device())) == 0
    assert all(torch.equal(a, b) for a, b in zip(persistent, again, strict=True))
    # A program reading a state before all were written would be off by far more.
    for a, b in zip(persistent, stepwise, strict=True):
        assert (a.float() - b.float()).abs().max() <= 1e-2 * b.float().abs().max()
    torch.testing.assert_close(persistent[0].double(),
                               _recurrence_in_float64(gx, h0, w_hh, b_hh), atol=0.05, rtol=0.0)


def _recurrence_in_float64(gx, h0, w_hh, b_hh):
    """torch.nn.GRU's equations, step by step."""
    gx, h, w_hh, b_hh = gx.double(), h0.double(), w_hh.double(), b_hh.double()
    outputs = []
    for x in gx.unbind(1):
        x_r, x_z, x_n = x.chunk(3, dim=-1)
        h_r, h_z, h_n = (h @ w_hh.t() + b_hh).chunk(3, dim=-1)
        r, z = torch.sigmoid(x_r + h_r), torch.sigmoid(x_z + h_z)
        h = (1 - z) * torch.tanh(x_n + r * h_n) + z * h
        outputs.append(h)
    return torch.stack(outputs, dim=1)
