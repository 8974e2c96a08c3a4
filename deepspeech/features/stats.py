"""Global normalization's statistics: per-bin mean and deviation of the log spectrogram.

Computed once on the training set (``frame_sums``, added across processes) and stored
in the checkpoint, so that evaluation and transcription use the same numbers.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch

STATS_FRACTION_BITS = 16
"""Binary places kept of each utterance's feature sums (``frame_sums``)."""


@dataclass
class FeatureStats:
    """Global per-bin mean and standard deviation of the log spectrogram."""

    mean: torch.Tensor
    std: torch.Tensor

    def to_dict(self) -> dict[str, torch.Tensor]:
        return {"mean": self.mean, "std": self.std}

    @classmethod
    def from_dict(cls, data: dict[str, torch.Tensor]) -> FeatureStats:
        return cls(mean=data["mean"], std=data["std"])

    @classmethod
    def from_sums(cls, sums: torch.Tensor) -> FeatureStats:
        """Statistics from ``frame_sums`` (added over processes, maybe)."""
        bins = (sums.numel() - 1) // 2
        frames = float(sums[-1])
        if frames == 0:
            raise ValueError("no audio to compute feature statistics from")
        mean = sums[:bins] / frames
        std = (sums[bins:-1] / frames - mean.pow(2)).clamp_min(0).sqrt()
        return cls(mean=mean.float(), std=std.float())


def frame_sums(log_spectrograms: Iterable[torch.Tensor], bins: int) -> torch.Tensor:
    """Per-bin sums and sums of squares of unnormalized log spectrograms ``[bins, frames]``
    (``FeatureExtractor.log_spectrogram``), then the frame count, ``[2 * bins + 1]`` in
    float64, for ``FeatureStats.from_sums``.

    Each utterance's sums are rounded to multiples of ``2**-STATS_FRACTION_BITS``:
    float64 adds such numbers exactly below ``2**(52 - STATS_FRACTION_BITS)``, so
    processes that each sum a share of the utterances and then add their sums get the
    same bits as one process summing them all, however the utterances are shared out.
    """
    sums = torch.zeros(2 * bins + 1, dtype=torch.float64)
    scale = 2.0 ** STATS_FRACTION_BITS
    for log_spectrogram in log_spectrograms:
        features = log_spectrogram.double()
        moments = torch.cat([features.sum(dim=1), features.pow(2).sum(dim=1)])
        sums[:-1] += torch.round(moments * scale) / scale
        sums[-1] += features.shape[1]
    largest = float(sums.abs().max())
    if largest >= 2.0 ** (52 - STATS_FRACTION_BITS):
        raise ValueError(f"feature sums reach {largest:g}, past what float64 adds exactly")
    return sums
