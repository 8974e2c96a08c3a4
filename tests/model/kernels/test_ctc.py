"""The GPU CTC loss: Triton kernels, run by Triton's interpreter where there is no GPU."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from deepspeech.model.ctc_loss import ctc_loss_sum

pytest.importorskip("triton")  # a dependency of PyTorch's CUDA builds, which the project pins
from deepspeech.model.kernels.ctc import extended_targets, gpu_ctc_loss  # noqa: E402

# The kernels run on the GPU where there is one, else in Triton's interpreter on the
# CPU (tests/conftest.py sets TRITON_INTERPRET before Triton is imported).
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
pytestmark = pytest.mark.skipif(
    DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1",
    reason="no GPU, and Triton was not started in its interpreter")


@pytest.fixture(autouse=True)
def _quiet_interpreter():
    """The interpreter evaluates log(0) and -inf - -inf on masked-out lanes."""
    with np.errstate(divide="ignore", invalid="ignore"):
        yield


def _case():
    """Repeated labels (no skipping between them), an empty transcript, one frame, an
    impossible alignment (16 labels in 25 frames, 15 of them repeats) and lengths
    shorter than the batch's longest."""
    logits = torch.randn(5, 30, 7, generator=torch.Generator().manual_seed(0))
    targets = torch.tensor([1, 1, 2, 3, 4, 4, 4, 5] + [6] * 16, dtype=torch.int32)
    lengths, target_lengths = torch.tensor([30, 12, 5, 1, 25]), torch.tensor([3, 4, 0, 1, 16])
    return logits, lengths, targets, target_lengths


def _loss_and_gradient(loss_fn, logits, device="cpu"):
    leaf = logits.clone().to(device).requires_grad_(True)
    loss = loss_fn(leaf.log_softmax(-1))
    loss[torch.isfinite(loss)].sum().backward()  # an impossible alignment's gradient is NaN
    return loss.detach().cpu(), leaf.grad.cpu()


def test_extended_targets_put_blanks_around_every_label():
    extended = extended_targets(torch.tensor([3, 1, 1, 2]), torch.tensor([1, 0, 3]))
    assert extended.tolist() == [[0, 3, 0, 0, 0, 0, 0], [0] * 7, [0, 1, 0, 1, 0, 2, 0]]


@pytest.mark.parametrize("zero_infinity", [False, True])
def test_gpu_ctc_matches_pytorch_in_value_and_gradient(zero_infinity):
    logits, lengths, targets, target_lengths = _case()
    want, want_grad = _loss_and_gradient(
        lambda lp: F.ctc_loss(lp.transpose(0, 1), targets, lengths, target_lengths,
                              reduction="none", zero_infinity=zero_infinity), logits)
    got, got_grad = _loss_and_gradient(
        lambda lp: gpu_ctc_loss(lp, lengths.to(DEVICE), targets, target_lengths,
                                zero_infinity), logits, DEVICE)
    assert torch.isinf(want[4]) != zero_infinity and got[4] == want[4]
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(got_grad[:4], want_grad[:4], rtol=0, atol=1e-5)
    # frames past an utterance's end get no gradient; short ones do
    assert got_grad[1, 12:].abs().sum() == 0 and got_grad[3, 0].abs().sum() > 0


def test_gpu_ctc_zeroes_the_gradient_of_impossible_alignments():
    logits, lengths, targets, target_lengths = _case()
    leaf = logits.clone().to(DEVICE).requires_grad_(True)
    loss = gpu_ctc_loss(leaf.log_softmax(-1), lengths.to(DEVICE), targets, target_lengths,
                        zero_infinity=True)
    loss.sum().backward()
    assert loss[4] == 0 and torch.isfinite(leaf.grad).all() and leaf.grad[4].abs().sum() == 0


@pytest.mark.parametrize("bad_length", [0, 31])
def test_gpu_ctc_refuses_lengths_outside_the_frames(bad_length):
    logits, lengths, targets, target_lengths = _case()
    lengths[2] = bad_length
    with pytest.raises(ValueError, match=rf"must lie in \[1, 30\].*got {min(bad_length, 1)} to "
                                         rf"{max(bad_length, 30)}"):
        gpu_ctc_loss(logits.to(DEVICE).log_softmax(-1), lengths.to(DEVICE), targets,
                     target_lengths)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_ctc_on_cuda_is_reproducible_and_agrees_with_the_cpu(monkeypatch):
    """Long transcripts (more than 512 label positions: the kernels' 8-warp shape)."""
    generator = torch.Generator().manual_seed(1)
    logits = torch.randn(48, 700, 29, generator=generator)
    lengths = torch.linspace(600, 700, 48).long()
    target_lengths = torch.randint(200, 300, (48,), generator=generator)
    targets = torch.randint(1, 29, (int(target_lengths.sum()),), generator=generator)
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    try:
        want, want_grad = _loss_and_gradient(
            lambda lp: F.ctc_loss(lp.transpose(0, 1), targets, lengths, target_lengths,
                                  reduction="none"), logits)
        (got, got_grad), (again, again_grad) = (_loss_and_gradient(
            lambda lp: gpu_ctc_loss(lp, lengths.cuda(), targets, target_lengths),
            logits, "cuda") for _ in range(2))
        log_probs = logits.cuda().log_softmax(-1)
        summed = ctc_loss_sum(log_probs, lengths.cuda(), targets, target_lengths)
        assert summed.is_cuda
        assert summed == gpu_ctc_loss(log_probs, lengths, targets, target_lengths).sum()
    finally:
        torch.use_deterministic_algorithms(False)
    assert torch.equal(got, again) and torch.equal(got_grad, again_grad)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(got_grad, want_grad, rtol=0, atol=2e-3)


def test_a_wider_label_width_changes_nothing():
    """A CUDA graph fixes the label width per shape: extra blank positions are never read."""
    logits, lengths, targets, target_lengths = _case()
    want, want_grad = _loss_and_gradient(
        lambda lp: gpu_ctc_loss(lp, lengths.to(DEVICE), targets, target_lengths), logits, DEVICE)
    padded_targets = torch.cat([targets, torch.zeros(5 * 24 - targets.numel(), dtype=targets.dtype)])
    got, got_grad = _loss_and_gradient(
        lambda lp: gpu_ctc_loss(lp, lengths.to(DEVICE), padded_targets.to(DEVICE),
                                target_lengths.to(DEVICE), label_width=24), logits, DEVICE)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    torch.testing.assert_close(got_grad, want_grad, rtol=0, atol=1e-6, equal_nan=True)
