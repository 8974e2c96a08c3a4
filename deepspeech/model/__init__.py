"""The DeepSpeech2 acoustic model, its streaming state, and its parameter/FLOP counts."""

from deepspeech.model.deepspeech2 import DeepSpeech2, StreamState
from deepspeech.model.flops import (
    count_parameters,
    flops_per_second_of_audio,
    forward_flops,
    training_flops,
)

__all__ = [
    "DeepSpeech2",
    "StreamState",
    "count_parameters",
    "flops_per_second_of_audio",
    "forward_flops",
    "training_flops",
]
