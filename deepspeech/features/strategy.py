"""Where a training run computes its features: an input strategy, as lhotse's
``OnTheFlyFeatures`` and ``PrecomputedFeatures`` are.

``InWorkers``: each loader worker computes its utterance's features (the spectrogram
stage on a batch of one), and the loader pads features. ``OnDevice``: the workers only
decode and augment waveforms and draw each utterance's random choices (``Decoded``); the
loader pads waveforms, and the stage runs batched on the training device as each
micro-batch is handed over. Either way an utterance's random choices come from its own
seed, so its features do not depend on the strategy beyond float rounding
(``FeatureExtractor._normalized``).
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import torch

from deepspeech.features.spectrogram import FeatureExtractor


class Decoded(NamedTuple):
    """One utterance as a worker hands it over when the features are computed later: its
    samples reflect-padded (``FeatureExtractor.centered``), and the random choices of its
    features, drawn from its seed."""

    samples: torch.Tensor
    num_samples: int
    warp: float
    freq_spans: torch.Tensor
    time_spans: torch.Tensor


class FeatureStrategy(Protocol):
    """What the training data path asks of a strategy."""

    pin_memory: bool
    """Whether the loader should hand batches over in page-locked memory."""

    def utterance(self, extractor: FeatureExtractor, waveform: torch.Tensor, warp: float,
                  freq_spans: torch.Tensor, time_spans: torch.Tensor
                  ) -> torch.Tensor | Decoded:
        """What a loader worker hands over for one decoded and augmented waveform, with
        its VTLP warp and SpecAugment spans."""


class InWorkers:
    """The loader workers compute each utterance's features."""

    pin_memory = False

    def utterance(self, extractor: FeatureExtractor, waveform: torch.Tensor, warp: float,
                  freq_spans: torch.Tensor, time_spans: torch.Tensor) -> torch.Tensor:
        return extractor(waveform, warp, freq_spans, time_spans)


class OnDevice:
    """The workers decode; the stage runs on each padded batch on ``device``, in the
    training process (``WaveformBatch.featurized``): the workers never touch it."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.pin_memory = device.type == "cuda"

    def utterance(self, extractor: FeatureExtractor, waveform: torch.Tensor, warp: float,
                  freq_spans: torch.Tensor, time_spans: torch.Tensor) -> Decoded:
        return Decoded(extractor.centered(waveform), waveform.numel(), warp,
                       freq_spans, time_spans)
