"""An exponential moving average of the weights (Polyak averaging), for validation and hand-off.

While the learning rate is high the weights of the last steps are noisy; their average
over the last few hundred steps is the better model to validate, keep as ``best.pt``
and transcribe with, while the optimizer keeps working on the raw weights. On AN4 the
average was 1-13 points of dev WER ahead through the first 12 of 19 epochs of a cosine
schedule and no better at its end, where the rate is small anyway (docs/RECIPES.md,
a8): it pays for runs stopped early or trained at a constant rate.

The average lives in a second copy of the model, so that validation runs it as it
is. Batch-norm running statistics are averaged like the weights; integer buffers
(step counters) are copied. Early on the decay is capped at (1 + t) / (10 + t) after
t updates, so that the random initialization is forgotten quickly. Every update is a
pure function of the weights and the step count, and every rank holds the same
weights, so the average is as deterministic as the weights (and resumes bit for bit:
the checkpoint holds both).
"""

from __future__ import annotations

import copy

import torch


class WeightAverage:
    """The averaged copy of a model, updated after each optimizer step."""

    def __init__(self, model: torch.nn.Module, decay: float) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"decay must be in (0, 1), got {decay}")
        self.decay = decay
        self.model = copy.deepcopy(model).requires_grad_(False)

    def update(self, model: torch.nn.Module, updates: int) -> None:
        """Fold in ``model``'s weights after its ``updates``-th optimizer step (from 1)."""
        weight = 1.0 - min(self.decay, updates / (9 + updates))
        with torch.no_grad():
            for average, current in zip(self.model.state_dict().values(),
                                        model.state_dict().values(), strict=True):
                if average.is_floating_point():
                    average.lerp_(current, weight)
                else:
                    average.copy_(current)
