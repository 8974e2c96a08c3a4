"""DeepSpeech2 (Amodei et al., 2016): convolutions, a recurrent stack, CTC outputs.

    features [B, bins, T]
      -> 2D convs over (frequency, time) + batch norm + clipped ReLU   (T -> T')
      -> GRU/LSTM layers, sequence-wise batch norm on each input but the first
      -> lookahead (row) convolution, unidirectional models only
      -> optional fully connected layer + clipped ReLU
      -> linear over the characters (blank = 0), log-softmax in float32

The stack is written down once, in ``__init__`` and the two lists after it:
``sequence_layers`` (they read neighbouring frames) then ``frame_layers`` (each
frame alone). Every path walks those lists and calls each layer's own form
(``layers.py``): ``forward`` for training and offline use, ``stream_step`` for
streaming, ``traceable.py`` for export and ``flops.py`` for FLOP counts.

Dropout (``model.dropout``) follows every RNN layer and the fully connected layer.

Padding never changes a real frame: a padded batch gives each utterance the
outputs it gets alone (up to BLAS rounding), in eval mode and, for the batch-norm
statistics, in training too (see ``layers.py``). The frame layers run on valid
frames only.

A unidirectional model also streams: ``stream_step`` takes feature chunks and
returns the log-probabilities that are final so far, carrying a ``StreamState``
between calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from deepspeech.config import ModelConfig
from deepspeech.device import capturing_graph
from deepspeech.model.layers import (
    CharacterOutput,
    ConvFrontEnd,
    FrameLayer,
    FullyConnected,
    Lookahead,
    RecurrentLayer,
    SequenceLayer,
    time_mask,
    time_stride,
)
from deepspeech.model.mode import CPU_MODE, ModelMode


class DeepSpeech2(nn.Module):
    """Deep Speech 2 acoustic model: ``[B, bins, T]`` features -> ``[B, T', classes]`` log-probs."""

    def __init__(self, config: ModelConfig, num_bins: int, num_classes: int,
                 mode: ModelMode = CPU_MODE) -> None:
        """``mode``: how the layers compute on the device the model will run on (the
        execution plan's ``model_mode``); weights and their initialization do not depend
        on it."""
        super().__init__()
        if num_bins < 1 or num_classes < 2:
            raise ValueError(f"need num_bins >= 1 and num_classes >= 2 (blank + one symbol), "
                             f"got {num_bins} and {num_classes}")
        self.config = config
        self.num_bins = num_bins
        self.num_classes = num_classes
        self.mode = mode
        # The layers in creation order, which is the weights' initialization order and
        # the state dict's: a new layer goes at its place here and in the lists below.
        rnn = config.rnn
        self.conv = ConvFrontEnd(config.conv, num_bins, mode)
        self.rnns = nn.ModuleList(
            RecurrentLayer(self.conv.output_size if i == 0 else rnn.hidden, rnn.hidden,
                           rnn.kind, rnn.bidirectional, batch_norm=rnn.batch_norm and i > 0,
                           mode=mode, dropout=config.dropout)
            for i in range(rnn.layers)
        )
        use_lookahead = rnn.lookahead > 0 and not rnn.bidirectional
        self.lookahead = Lookahead(rnn.hidden, rnn.lookahead) if use_lookahead else None
        self.fc = FullyConnected(rnn.hidden, config.fc_hidden, config.dropout) \
            if config.fc_hidden else None
        self.output = CharacterOutput(config.fc_hidden or rnn.hidden, num_classes)

    def sequence_layers(self) -> list[SequenceLayer]:
        """The stack's first part, in order: the layers that read neighbouring frames."""
        return [self.conv, *self.rnns, *([self.lookahead] if self.lookahead is not None else [])]

    def frame_layers(self) -> list[FrameLayer]:
        """The stack's second part, in order: the layers that map each frame alone."""
        return [*([self.fc] if self.fc is not None else []), self.output]

    def layers(self) -> list[SequenceLayer | FrameLayer]:
        """The whole stack, input to output."""
        return [*self.sequence_layers(), *self.frame_layers()]

    @property
    def time_stride(self) -> int:
        """Input feature frames per output frame."""
        return time_stride(self.config.conv)

    def output_lengths(self, lengths: int | Tensor) -> int | Tensor:
        """Output frames for ``lengths`` input frames: the conv strides and kernels, exactly."""
        # Only the convolutions change the frame count; asking them alone, not walking the
        # stack, keeps this at a quarter of the cost for the data checks' per-utterance calls.
        return self.conv.output_lengths(lengths)

    def forward(self, features: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """Log-probabilities ``[B, T', classes]`` (float32) and their lengths ``[B]``.

        Frames at or past an utterance's output length hold zeros; CTC and the
        decoders read only the first ``output_lengths[b]`` frames.
        """
        self._check_input(features)
        if lengths.shape != features.shape[:1]:
            raise ValueError(f"lengths must be [B] = [{features.shape[0]}], got "
                             f"{list(lengths.shape)}")
        # Reading the lengths back from a GPU while a CUDA graph is being captured would
        # break the capture: the graph's caller checks them on the host before each replay.
        if not capturing_graph(lengths):
            check_lengths(lengths, features.shape[2])
        x, lengths = features, lengths.to(torch.int64)
        for layer in self.sequence_layers():
            x, lengths = layer(x, lengths)
        valid = time_mask(lengths, x.shape[1])
        if self.mode.fixed_shapes:
            # Every frame, then the padding zeroed: fixed shapes, nothing read back to the
            # host (CUDA graphs); the padding's extra work is cheap on a GPU.
            for layer in self.frame_layers():
                x = layer(x)
            return x.masked_fill(~valid[..., None], 0.0), lengths
        # Each frame alone from here: only the valid ones run.
        x = x[valid]
        for layer in self.frame_layers():
            x = layer(x)
        out = x.new_zeros(*valid.shape, x.shape[-1])
        out[valid] = x
        return out, lengths

    def _check_input(self, features: Tensor) -> None:
        if features.dim() != 3 or features.shape[1] != self.num_bins:
            raise ValueError(f"features must be [batch, {self.num_bins} bins, frames], got "
                             f"{list(features.shape)}")

    # -- streaming --------------------------------------------------------------------
    # Streaming feeds features in chunks and gets log-probabilities back as soon as they
    # are final, identical (up to float rounding) to running the whole utterance at once
    # in eval mode. Each layer keeps what it still needs (its ``stream`` method). The
    # last chunk is passed with ``final=True``: it adds the right-hand zero padding that
    # the offline model sees and flushes every layer. Batch norm uses its running
    # statistics, so the model must be in eval mode. Per-utterance feature normalization
    # needs the whole utterance; streaming wants ``features.normalize: global``.

    def init_stream(self) -> StreamState:
        """A fresh state for ``stream_step`` (unidirectional models only)."""
        if self.config.rnn.bidirectional:
            raise ValueError("streaming needs a unidirectional model (model.rnn.bidirectional: "
                             "false, with model.rnn.lookahead for future context)")
        return StreamState(layers=[None] * len(self.layers()))

    @torch.no_grad()
    def stream_step(self, features: Tensor, state: StreamState | None = None,
                    final: bool = False) -> tuple[Tensor, StreamState]:
        """Feed ``[B, bins, t]`` more frames; return the newly final log-probs ``[B, t', C]``.

        Call with ``final=True`` on the last chunk (it may have zero frames) to flush
        the conv and lookahead context. Concatenating the outputs of all calls gives
        the offline ``forward`` of the whole input (eval mode, every stream in the
        batch of the same length).
        """
        if self.training:
            raise RuntimeError("stream_step needs eval mode: call model.eval() first")
        self._check_input(features)
        state = self.init_stream() if state is None else state
        if state.finished:
            raise RuntimeError("this stream is finished; start a new one with init_stream()")
        x, layer_states = features, list(state.layers)
        for i, layer in enumerate(self.layers()):
            x, layer_states[i] = layer.stream(x, layer_states[i], final)
        new_state = StreamState(layers=layer_states,
                                frames_in=state.frames_in + features.shape[2],
                                frames_out=state.frames_out + x.shape[1], finished=final)
        return x, new_state


def check_lengths(lengths: Tensor, frames: int) -> None:
    """Refuse utterance lengths outside ``[1, frames]``, the padded frame count."""
    if int(lengths.min()) < 1 or int(lengths.max()) > frames:
        raise ValueError(f"lengths must lie in [1, {frames}] (the padded frame count), got "
                         f"{lengths.tolist()}")


@dataclass
class StreamState:
    """Everything a stream carries between ``DeepSpeech2.stream_step`` calls: what each
    layer of the stack keeps (None before its first chunk; see each layer's ``stream``)."""

    layers: list[Any]
    # Input frames consumed and output frames emitted so far.
    frames_in: int = 0
    frames_out: int = 0
    finished: bool = False
