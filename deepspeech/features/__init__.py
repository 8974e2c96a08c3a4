"""Features: waveforms -> normalized log spectrograms, one stage wherever it runs.

* ``spectrogram``: ``FeatureExtractor``, the stage itself: a padded batch on any device,
  one utterance as a batch of one.
* ``stats``: ``FeatureStats``, global normalization's statistics, and ``frame_sums``.
* ``augment``: training's perturbations, drawn per utterance: ``vtlp_matrix`` and
  ``spec_augment_spans``.
* ``mel``: the mel filterbank, checked for empty bands.
* ``streaming``: ``StreamingFeatures``, the stage fed chunk by chunk.
* ``strategy``: where training computes features: ``InWorkers`` or ``OnDevice``.
"""

from deepspeech.features.augment import VTLP_BEND, spec_augment_spans, vtlp_matrix
from deepspeech.features.spectrogram import EPSILON, FeatureExtractor
from deepspeech.features.stats import STATS_FRACTION_BITS, FeatureStats, frame_sums
from deepspeech.features.strategy import Decoded, FeatureStrategy, InWorkers, OnDevice
from deepspeech.features.streaming import StreamingFeatures

__all__ = [
    "EPSILON",
    "STATS_FRACTION_BITS",
    "VTLP_BEND",
    "Decoded",
    "FeatureExtractor",
    "FeatureStats",
    "FeatureStrategy",
    "InWorkers",
    "OnDevice",
    "StreamingFeatures",
    "frame_sums",
    "spec_augment_spans",
    "vtlp_matrix",
]
