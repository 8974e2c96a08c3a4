"""The carried state of a streaming (unidirectional) DeepSpeech2.

Streaming feeds features in chunks and gets log-probabilities back as soon as
they are final, identical (up to float rounding) to running the whole utterance
at once in eval mode. Each stage keeps what it still needs:

* each conv layer keeps the input frames its next output still reads (its kernel
  reaches ``kt // 2`` frames into the future, so output lags input by a few frames);
* each RNN layer keeps its hidden state (and cell state for an LSTM);
* the lookahead convolution keeps its last ``lookahead`` RNN frames, whose future
  has not arrived yet.

The last chunk is passed with ``final=True``: it adds the right-hand zero padding
that the offline model sees and flushes every stage. Batch norm uses its running
statistics, so the model must be in eval mode. Per-utterance feature normalization
needs the whole utterance; streaming wants ``features.normalize: global``.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass
class StreamState:
    """Everything a stream carries between ``DeepSpeech2.stream_step`` calls."""

    conv: list[Tensor | None]
    conv_skip: list[int]
    rnn: list[Tensor | tuple[Tensor, Tensor] | None]
    lookahead: Tensor | None = None
    # Input frames consumed and output frames emitted so far.
    frames_in: int = 0
    frames_out: int = 0
    finished: bool = False
