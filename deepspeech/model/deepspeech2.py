"""DeepSpeech2 (Amodei et al., 2016): convolutions, a recurrent stack, CTC outputs.

    features [B, bins, T]
      -> 2D convs over (frequency, time) + batch norm + clipped ReLU   (T -> T')
      -> GRU/LSTM layers, sequence-wise batch norm on each input but the first
      -> lookahead (row) convolution, unidirectional models only
      -> optional fully connected layer + clipped ReLU
      -> linear over the characters (blank = 0), log-softmax in float32

Dropout (``model.dropout``) follows every RNN layer and the fully connected layer.

Padding never changes a real frame: a padded batch gives each utterance the
outputs it gets alone (up to BLAS rounding), in eval mode and, for the batch-norm
statistics, in training too (see ``layers.py``). Per-frame work after the RNNs
(the output layers) runs on valid frames only.

A unidirectional model also streams: ``stream_step`` takes feature chunks and
returns the log-probabilities that are final so far, carrying a ``StreamState``
between calls. ``traceable.py`` holds the same eval-mode forward for export.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from deepspeech.config import ModelConfig
from deepspeech.model.layers import (
    CLIP,
    ConvFrontEnd,
    Lookahead,
    RecurrentLayer,
    time_mask,
    time_stride,
)


class DeepSpeech2(nn.Module):
    """Deep Speech 2 acoustic model: ``[B, bins, T]`` features -> ``[B, T', classes]`` log-probs."""

    def __init__(self, config: ModelConfig, num_bins: int, num_classes: int) -> None:
        super().__init__()
        if num_bins < 1 or num_classes < 2:
            raise ValueError(f"need num_bins >= 1 and num_classes >= 2 (blank + one symbol), "
                             f"got {num_bins} and {num_classes}")
        self.config = config
        self.num_bins = num_bins
        self.num_classes = num_classes
        rnn = config.rnn
        self.conv = ConvFrontEnd(config.conv, num_bins)
        self.rnns = nn.ModuleList(
            RecurrentLayer(self.conv.output_size if i == 0 else rnn.hidden, rnn.hidden,
                           rnn.kind, rnn.bidirectional, batch_norm=rnn.batch_norm and i > 0)
            for i in range(rnn.layers)
        )
        use_lookahead = rnn.lookahead > 0 and not rnn.bidirectional
        self.lookahead = Lookahead(rnn.hidden, rnn.lookahead) if use_lookahead else None
        self.fc = nn.Linear(rnn.hidden, config.fc_hidden) if config.fc_hidden else None
        self.output = nn.Linear(config.fc_hidden or rnn.hidden, num_classes)
        self.dropout = nn.Dropout(config.dropout) if config.dropout else nn.Identity()

    @property
    def time_stride(self) -> int:
        """Input feature frames per output frame."""
        return time_stride(self.config.conv)

    def output_lengths(self, lengths: int | Tensor) -> int | Tensor:
        """Output frames for ``lengths`` input frames: the conv strides and kernels, exactly."""
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
        if int(lengths.min()) < 1 or int(lengths.max()) > features.shape[2]:
            raise ValueError(f"lengths must lie in [1, {features.shape[2]}] (the padded "
                             f"frame count), got {lengths.tolist()}")
        x, out_lengths = self.conv(features.unsqueeze(1), lengths.to(torch.int64))
        batch, channels, bins, frames = x.shape
        x = x.permute(0, 3, 1, 2).reshape(batch, frames, channels * bins)
        valid = time_mask(out_lengths, frames)
        for layer in self.rnns:
            x = self.dropout(layer(x, out_lengths, valid))
        if self.lookahead is not None:
            # The row convolution reads future frames: zeros past each end, as alone.
            x = self.lookahead(x)
        out = x.new_zeros(batch, frames, self.num_classes, dtype=torch.float32)
        out[valid] = self.head(x[valid])
        return out, out_lengths

    def head(self, x: Tensor) -> Tensor:
        """Per-frame fully connected layers and log-softmax (float32 even under autocast)."""
        if self.fc is not None:
            x = self.dropout(F.hardtanh(self.fc(x), 0.0, CLIP))
        return F.log_softmax(self.output(x).float(), dim=-1)

    def _check_input(self, features: Tensor) -> None:
        if features.dim() != 3 or features.shape[1] != self.num_bins:
            raise ValueError(f"features must be [batch, {self.num_bins} bins, frames], got "
                             f"{list(features.shape)}")

    # -- streaming --------------------------------------------------------------------
    # Streaming feeds features in chunks and gets log-probabilities back as soon as they
    # are final, identical (up to float rounding) to running the whole utterance at once
    # in eval mode. Each stage keeps what it still needs (``StreamState``, below). The
    # last chunk is passed with ``final=True``: it adds the right-hand zero padding that
    # the offline model sees and flushes every stage. Batch norm uses its running
    # statistics, so the model must be in eval mode. Per-utterance feature normalization
    # needs the whole utterance; streaming wants ``features.normalize: global``.

    def init_stream(self) -> StreamState:
        """A fresh state for ``stream_step`` (unidirectional models only)."""
        if self.config.rnn.bidirectional:
            raise ValueError("streaming needs a unidirectional model (model.rnn.bidirectional: "
                             "false, with model.rnn.lookahead for future context)")
        layers = len(self.conv.convs)
        return StreamState(conv=[None] * layers, conv_skip=[0] * layers,
                           rnn=[None] * len(self.rnns))

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
        x, conv_pending, conv_skip = self.conv.stream(features.unsqueeze(1), state.conv,
                                                      state.conv_skip, final)
        batch, channels, bins, frames = x.shape
        x = x.permute(0, 3, 1, 2).reshape(batch, frames, channels * bins)
        rnn_states = list(state.rnn)
        if frames:
            for i, layer in enumerate(self.rnns):
                x, rnn_states[i] = layer.step(x, rnn_states[i])
        else:  # the convs still wait for future frames
            x = x.new_zeros(batch, 0, self.config.rnn.hidden)
        pending = state.lookahead
        if self.lookahead is not None:
            x, pending = self.lookahead.stream(x, pending, final)
        out = self.head(x.reshape(-1, x.shape[-1])).view(batch, x.shape[1], self.num_classes)
        new_state = StreamState(conv=conv_pending, conv_skip=conv_skip, rnn=rnn_states,
                                lookahead=pending,
                                frames_in=state.frames_in + features.shape[2],
                                frames_out=state.frames_out + out.shape[1], finished=final)
        return out, new_state


@dataclass
class StreamState:
    """Everything a stream carries between ``DeepSpeech2.stream_step`` calls.

    * each conv layer keeps the input frames its next output still reads (its kernel
      reaches ``kt // 2`` frames into the future, so output lags input by a few frames);
    * each RNN layer keeps its hidden state (and cell state for an LSTM);
    * the lookahead convolution keeps its last ``lookahead`` RNN frames, whose future
      has not arrived yet.
    """

    conv: list[Tensor | None]
    conv_skip: list[int]
    rnn: list[Tensor | tuple[Tensor, Tensor] | None]
    lookahead: Tensor | None = None
    # Input frames consumed and output frames emitted so far.
    frames_in: int = 0
    frames_out: int = 0
    finished: bool = False
