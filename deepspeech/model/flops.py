"""Parameter and FLOP counts of DeepSpeech2, from the layer shapes alone.

FLOPs count multiply-adds as two operations and only the matrix work (convs,
recurrent and input projections, the lookahead, the fully connected layers):
batch norm, activations, the gates' elementwise products and the softmax add
well under 1% for any DS2-sized model and none of it runs on the matmul units
that ``deepspeech bench train`` compares against. A training step costs three
forward passes (forward, gradient of the inputs, gradient of the weights).
"""

from __future__ import annotations

from collections.abc import Iterable

from torch import nn

from deepspeech.config import ModelConfig
from deepspeech.model.layers import conv_output_size

GATES = {"gru": 3, "lstm": 4}


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters of ``model``."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def forward_flops(config: ModelConfig, num_bins: int, num_classes: int, frames: int) -> int:
    """FLOPs of one forward pass over one utterance of ``frames`` input frames."""
    flops = 0
    channels, bins = 1, num_bins
    for out, (kf, kt), (sf, st) in zip(config.conv.channels, config.conv.kernels,
                                       config.conv.strides, strict=True):
        bins, frames = conv_output_size(bins, kf, sf), conv_output_size(frames, kt, st)
        flops += 2 * channels * out * kf * kt * bins * frames
        channels = out
    rnn = config.rnn
    directions = 2 if rnn.bidirectional else 1
    width = channels * bins
    for _ in range(rnn.layers):
        per_step = 2 * GATES[rnn.kind] * (width * rnn.hidden + rnn.hidden * rnn.hidden)
        flops += directions * per_step * frames
        width = rnn.hidden  # bidirectional outputs are summed
    if rnn.lookahead and not rnn.bidirectional:
        flops += 2 * rnn.hidden * (rnn.lookahead + 1) * frames
    if config.fc_hidden:
        flops += 2 * width * config.fc_hidden * frames
        width = config.fc_hidden
    flops += 2 * width * num_classes * frames
    return flops


def training_flops(config: ModelConfig, num_bins: int, num_classes: int,
                   lengths: Iterable[int]) -> int:
    """FLOPs of one training step (forward + backward = 3 forwards) over a batch of ``lengths``."""
    return 3 * sum(forward_flops(config, num_bins, num_classes, int(n)) for n in lengths)


def flops_per_second_of_audio(config: ModelConfig, num_bins: int, num_classes: int,
                              hop_ms: float = 10.0) -> float:
    """Forward FLOPs per second of audio (edge effects of the conv padding included)."""
    frames = round(1000.0 / hop_ms)
    return forward_flops(config, num_bins, num_classes, frames) * (1000.0 / hop_ms) / frames
