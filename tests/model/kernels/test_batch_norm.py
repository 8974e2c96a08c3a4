"""The fused masked batch norm against the torch form: outputs, gradients and running
statistics to float rounding, bitwise run to run; in Triton's interpreter off the GPU."""

from __future__ import annotations

import os

import pytest
import torch
from torch import nn

from deepspeech.config import ModelConfig
from deepspeech.model import DeepSpeech2
from deepspeech.model.layers import normalize_valid_frames
from deepspeech.model.mode import ModelMode

pytest.importorskip("triton")
from deepspeech.model.kernels.batch_norm import fused_normalize_valid_frames  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
pytestmark = pytest.mark.skipif(
    DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1",
    reason="no GPU, and Triton was not started in its interpreter")


def _case(layout: str, dtype: torch.dtype = torch.float32):
    """Conv maps ``[B, C, H, T]`` as they come (1,221 elements a channel: two blocks, the
    second partial, each spanning utterances), or recurrent frames ``[B, T, D]`` seen as
    ``[B, D, 1, T]`` (strided, as ``RecurrentLayer`` hands them over)."""
    generator = torch.Generator().manual_seed(0)
    lengths = torch.tensor([37, 20, 5])
    if layout == "conv":
        x = torch.randn(3, 4, 11, 37, generator=generator) * 3 + 1
    else:
        x = (torch.randn(3, 37, 6, generator=generator) * 3 + 1).transpose(1, 2).unsqueeze(2)
    mask = torch.arange(37)[None, :] < lengths[:, None]
    return x.to(DEVICE, dtype), mask.to(DEVICE)


def _norm(channels: int) -> nn.BatchNorm2d:
    norm = nn.BatchNorm2d(channels).to(DEVICE)
    with torch.no_grad():
        norm.weight.copy_(torch.linspace(0.5, 1.5, channels))
        norm.bias.copy_(torch.linspace(-0.2, 0.3, channels))
    return norm


def _run(normalize, x: torch.Tensor, mask: torch.Tensor, masked_upstream: bool = False):
    """Outputs, gradients and running statistics; ``masked_upstream``: the padding's
    outputs get no gradient, as where the caller zeroes them."""
    norm = _norm(x.shape[1])
    leaf = x.detach().clone().requires_grad_(True)
    y = normalize(norm, leaf, mask)
    upstream = torch.linspace(-1, 1, y.numel(), device=DEVICE).view(y.shape)
    if masked_upstream:
        upstream = upstream * mask[:, None, None, :]
    (y * upstream).sum().backward()
    return (y.detach(), leaf.grad, norm.weight.grad, norm.bias.grad, norm.running_mean,
            norm.running_var)


@pytest.mark.parametrize("layout", ["conv", "frames"])
def test_fused_equals_the_torch_form(layout):
    x, mask = _case(layout)
    want = _run(normalize_valid_frames, x, mask)
    got = _run(fused_normalize_valid_frames, x, mask)
    names = ("output", "input gradient", "weight gradient", "bias gradient", "running mean",
             "running var")
    for name, a, b in zip(names, got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")


def test_the_padding_moves_no_statistic_and_no_gradient_of_a_valid_frame():
    x, mask = _case("conv")
    y, dx, *_ = _run(fused_normalize_valid_frames, x, mask, masked_upstream=True)
    changed = x.clone()
    changed[~mask[:, None, None, :].expand_as(x)] = 1e6  # the padding's values
    y2, dx2, *_ = _run(fused_normalize_valid_frames, changed, mask, masked_upstream=True)
    valid = mask[:, None, None, :].expand_as(x)
    torch.testing.assert_close(y2[valid], y[valid], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(dx2[valid], dx[valid], rtol=1e-6, atol=1e-6)


def test_bfloat16_maps_get_float32_statistics_and_a_bfloat16_gradient():
    x, mask = _case("conv", torch.bfloat16)
    y, dx, *_ = _run(fused_normalize_valid_frames, x, mask)
    want, want_dx, *_ = _run(normalize_valid_frames, x, mask)
    assert (y.dtype, dx.dtype) == (torch.float32, torch.bfloat16)
    torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(dx, want_dx, rtol=1e-2, atol=1e-2)


def test_the_same_bits_run_to_run():
    x, mask = _case("conv")
    first, second = (_run(fused_normalize_valid_frames, x, mask) for _ in range(2))
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))


def test_a_model_in_the_fused_mode_trains_as_in_the_torch_form():
    """Every masked norm of the stack (the conv front end's and the recurrent layers')
    through the kernels, in the fixed-shape mode they are for."""
    config = ModelConfig()
    config.conv.channels, config.rnn.layers, config.rnn.hidden = [4, 4], 2, 16
    features = torch.randn(3, 40, 50, generator=torch.Generator().manual_seed(0))
    lengths = torch.tensor([50, 31, 12])
    results = []
    for batch_norm in ("torch", "fused"):
        torch.manual_seed(0)
        mode = ModelMode(fixed_shapes=True, batch_norm=batch_norm)
        model = DeepSpeech2(config, 40, 6, mode).to(DEVICE).train()
        log_probs, _ = model(features.to(DEVICE), lengths.to(DEVICE))
        log_probs.sum().backward()
        results.append((log_probs.detach(), [p.grad for p in model.parameters()],
                        [b.clone() for b in model.buffers()]))
    (want, want_grads, want_buffers), (got, got_grads, got_buffers) = results
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for a, b in zip([*got_grads, *got_buffers], [*want_grads, *want_buffers], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
