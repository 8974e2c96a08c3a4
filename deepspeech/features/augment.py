"""The training-time perturbations of the features, seeded per utterance.

Vocal tract length perturbation (``vtlp_matrix``: a warp of the frequency axis, which
inference's VTLN uses too) and SpecAugment (``spec_augment_spans``: frequency bands and
time spans that the spectrogram stage zeroes). Both are drawn in the loader worker from
the utterance's seed, so an utterance's features do not depend on where they are computed.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from deepspeech.config import SpecAugmentConfig

VTLP_BEND = 0.8
"""Share of the band where the VTLP warp bends, so that the top frequency stays in place."""


@functools.lru_cache(maxsize=128)
def vtlp_matrix(bins: int, factor: float) -> torch.Tensor:
    """``[bins, bins]`` interpolation that stretches a spectrum's frequency axis by ``factor``.

    Jaitly and Hinton's piecewise-linear warp: what was at frequency f moves to
    ``factor * f`` up to a bend at ``VTLP_BEND`` of the band, and from there a second
    line takes the rest of the band to the top bin, so no energy leaves the band and none
    is invented above it. Each output bin interpolates linearly between the two input
    bins around where its content came from.
    """
    top = bins - 1
    bend = VTLP_BEND * top * min(factor, 1.0)
    source = np.interp(np.arange(bins), [0.0, bend, top], [0.0, bend / factor, top])
    low = np.clip(np.floor(source).astype(np.int64), 0, max(top - 1, 0))
    fraction = torch.from_numpy(source - low).float()
    matrix = torch.zeros(bins, bins)
    rows, low = torch.arange(bins), torch.from_numpy(low)
    matrix[rows, low] = 1.0 - fraction
    matrix[rows, (low + 1).clamp_max(top)] += fraction
    return matrix


def spec_augment_spans(bins: int, frames: int, config: SpecAugmentConfig,
                       generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """SpecAugment's (Park et al., 2019) random choices for one utterance: its frequency
    and its time masks, ``[masks, 2]`` (start, width) each; none drawn for a config
    without masks."""
    frequency = _drawn_spans(config.freq_masks, config.freq_width, bins, generator)
    time = _drawn_spans(config.time_masks, int(frames * config.time_width), frames, generator)
    return frequency, time


def _drawn_spans(count: int, widest: int, size: int,
                 generator: torch.Generator) -> torch.Tensor:
    spans = []
    for _ in range(count):
        width = int(torch.randint(0, widest + 1, (1,), generator=generator))
        start = int(torch.randint(0, max(1, size - width), (1,), generator=generator))
        spans.append((start, width))
    return torch.tensor(spans, dtype=torch.int64).view(-1, 2)


def covered(spans: torch.Tensor, size: int) -> torch.Tensor:
    """``[B, size]``: which positions the ``[B, masks, 2]`` (start, width) spans cover."""
    positions = torch.arange(size, device=spans.device)
    start, width = spans[..., :1], spans[..., 1:]
    return ((positions >= start) & (positions < start + width)).any(dim=1)
