"""DeepSpeech2's eval-mode forward in fixed-shape operations, for tracing (export).

``DeepSpeech2.forward`` checks its inputs in Python and selects valid frames
with boolean masks (for training-mode batch statistics), which tracing would
freeze to the example's shapes. ``TraceableDeepSpeech2`` computes the same eval-mode
function by walking the same stack with each layer's ``forward_every_frame``:
fixed-shape operations only, every frame computed, each layer correct on the valid
frames whatever the padding holds (the convolutions and the lookahead zero it
before they read across frames), and output frames past the end zeroed, as offline.

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
        x, lengths = features, lengths.to(torch.int64)
        for layer in self.model.layers():
            x, lengths = layer.forward_every_frame(x, lengths)
        valid = time_mask(lengths, x.shape[1])[:, :, None]
        return x.masked_fill(~valid, 0.0), lengths
