"""DeepSpeech2's eval-mode forward in fixed-shape operations, for tracing (export).

``DeepSpeech2.forward`` checks its inputs in Python and selects valid frames
with boolean masks (for training-mode batch statistics), which tracing would
freeze to the example's shapes. ``TraceableDeepSpeech2`` computes the same eval-mode
function with fixed-shape operations only:

* the convolutions zero every frame past each utterance's length, as offline
  (``ConvFrontEnd.forward`` is traceable as it is);
* the RNN layers run their recurrence as the model does (``RecurrentLayer.recur``:
  the backward direction on each utterance reversed within its own length);
* sequence-wise batch norm in eval mode is a per-frame affine map, so it runs on
  every frame; the lookahead convolution reads zeros past the end, as offline;
  output frames past the end are zero, as offline.

So padded batches give the offline outputs too, for unidirectional and
bidirectional models.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from deepspeech.model.deepspeech2 import DeepSpeech2
from deepspeech.model.layers import time_mask


class TraceableDeepSpeech2(nn.Module):
    """DeepSpeech2's eval-mode forward with fixed-shape operations: traceable, same outputs."""

    def __init__(self, model: DeepSpeech2) -> None:
        super().__init__()
        if model.training:
            raise ValueError("export an eval-mode model: call model.eval() first")
        self.model = model
        self.eval()

    def forward(self, features: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """Log-probabilities ``[B, T', C]`` (zero past each length) and lengths ``[B]``."""
        model = self.model
        lengths = lengths.to(torch.int64)
        x, lengths = model.conv(features.unsqueeze(1), lengths)
        batch, channels, bins, frames = x.shape
        x = x.permute(0, 3, 1, 2).reshape(batch, frames, channels * bins)
        for layer in model.rnns:
            x = layer.forward_every_frame(x, lengths)
        valid = time_mask(lengths, frames)[:, :, None]
        if model.lookahead is not None:
            x = model.lookahead(x.masked_fill(~valid, 0.0))
        return model.head(x).masked_fill(~valid, 0.0), lengths
