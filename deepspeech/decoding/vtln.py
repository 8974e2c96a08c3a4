"""Vocal tract length normalization at inference, with the model as the judge.

A model trained on few speakers hears a new voice best after its frequency axis is
stretched or squeezed towards the voices it knows (Lee and Rose's warp search). Each
utterance is run at every warp factor of ``decode.vtln`` (the piecewise-linear warp of
``deepspeech.features.vtlp_matrix``, which training's VTLP uses too) and the output with
the highest ``transcript_log_likelihood`` is decoded: no speaker labels, no second model,
and nothing learned at test time. The cost is one forward pass per warp factor.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from deepspeech.config import DecodeConfig
from deepspeech.data.text import Vocabulary
from deepspeech.decoding.greedy import greedy_tokens


def warp_factors(config: DecodeConfig) -> list[float]:
    """``decode.vtln``'s grid: low, low + step, ... up to high (``[1.0]`` when off)."""
    low, high = config.vtln
    count = int((high - low) / config.vtln_step + 1e-6) + 1
    return [round(low + index * config.vtln_step, 6) for index in range(count)]


def transcript_log_likelihood(log_probs: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``[batch]``: CTC log-likelihood of each utterance's greedy transcript, per frame.

    Stands in for the likelihood that Lee and Rose maximized: how well the output explains
    the best transcript the output itself offers, summed over all its alignments (CTC's
    forward pass on the CPU, deterministic). On FSDD's held-out speakers it chose better
    warps than the greedy path's mean best-class log-probability (docs/RECIPES.md). It is
    not the confidence shown with a transcript (``deepspeech.decoding.confidence``): on
    AN4 dev it ranked utterances by correctness as well, but as a per-frame probability it
    sits above 0.9 for almost all of them.
    """
    log_probs, lengths = log_probs.float().cpu(), lengths.cpu()
    targets, target_lengths = greedy_tokens(log_probs, lengths, Vocabulary.blank)
    negative = F.ctc_loss(log_probs.transpose(0, 1), targets, lengths, target_lengths,
                          blank=Vocabulary.blank, reduction="none", zero_infinity=True)
    return -negative / lengths.clamp_min(1)
