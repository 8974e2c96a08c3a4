"""Vocal tract length normalization at inference, with the model as the judge.

A model trained on few speakers hears a new voice best after its frequency axis is
stretched or squeezed towards the voices it knows (Lee and Rose's warp search). Each
utterance is run at every warp factor of ``decode.vtln`` (the piecewise-linear warp of
``deepspeech.features.vtlp_matrix``, which training's VTLP uses too) and the output with
the highest ``confidence`` is decoded: no speaker labels, no second model, and nothing
learned at test time. The cost is one forward pass per warp factor.
"""

from __future__ import annotations

import torch

from deepspeech.config import DecodeConfig


def warp_factors(config: DecodeConfig) -> list[float]:
    """``decode.vtln``'s grid: low, low + step, ... up to high (``[1.0]`` when off)."""
    low, high = config.vtln
    count = int((high - low) / config.vtln_step + 1e-6) + 1
    return [round(low + index * config.vtln_step, 6) for index in range(count)]


def confidence(log_probs: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``[batch]``: mean over an utterance's valid frames of its best class's log-probability.

    The greedy path's average score stands in for the likelihood that Lee and Rose
    maximized: it is high when every frame is sure of its class (a character or blank),
    as a model is on voices like its training voices.
    """
    frames = torch.arange(log_probs.shape[1])[None, :] < lengths[:, None]
    best = log_probs.max(dim=-1).values.masked_fill(~frames, 0.0)
    return best.sum(dim=1) / lengths.clamp_min(1)
