"""Parameter and FLOP counts of DeepSpeech2, from its stack's layer shapes.

FLOPs count multiply-adds as two operations and only the matrix work (convs,
recurrent and input projections, the lookahead, the fully connected layers), each
layer counting its own (its ``flops`` method): batch norm, activations, the gates'
elementwise products and the softmax add well under 1% for any DS2-sized model and
none of it runs on the matmul units that ``deepspeech bench train`` compares
against. A training step costs three forward passes (forward, gradient of the
inputs, gradient of the weights).
"""

from __future__ import annotations

from collections.abc import Iterable

from torch import nn

from deepspeech.model.deepspeech2 import DeepSpeech2


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters of ``model``."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def forward_flops(model: DeepSpeech2, frames: int) -> int:
    """FLOPs of one forward pass over one utterance of ``frames`` input frames."""
    flops = 0
    for layer in model.layers():
        flops += layer.flops(frames)
        frames = layer.output_lengths(frames)
    return flops


def training_flops(model: DeepSpeech2, lengths: Iterable[int]) -> int:
    """FLOPs of one training step (forward + backward = 3 forwards) over a batch of ``lengths``."""
    return 3 * sum(forward_flops(model, int(n)) for n in lengths)


def flops_per_second_of_audio(model: DeepSpeech2, hop_ms: float = 10.0) -> float:
    """Forward FLOPs per second of audio (edge effects of the conv padding included)."""
    frames = round(1000.0 / hop_ms)
    return forward_flops(model, frames) * (1000.0 / hop_ms) / frames
