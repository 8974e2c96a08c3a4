"""How many output frames the model makes for a duration of audio.

CTC needs at least one output frame per label (two between repeated letters), so
the data checks ask this before training meets an utterance too short for its
transcript: the feature hop and the convolutions' time strides decide it.
"""

from __future__ import annotations

from collections.abc import Callable

from deepspeech.config import Config
from deepspeech.features import FeatureExtractor
from deepspeech.model.deepspeech2 import DeepSpeech2


def model_output_frames(config: Config, sample_rate: int,
                        num_classes: int) -> Callable[[float], int]:
    """Output frames the configured model makes for a duration (features, conv strides)."""
    extractor = FeatureExtractor(config.features, sample_rate)
    return output_frames_counter(DeepSpeech2(config.model, extractor.num_bins, num_classes),
                                 extractor)


def output_frames_counter(model: DeepSpeech2,
                          extractor: FeatureExtractor) -> Callable[[float], int]:
    """Output frames ``model`` makes for a duration of audio fed through ``extractor``:
    none for audio too short for the features, which no transcript can then align to."""
    sample_rate = extractor.sample_rate

    def frames(seconds: float) -> int:
        samples = round(seconds * sample_rate)
        if samples < extractor.min_samples:
            return 0
        # Plain integers: the pre-flight asks this once per utterance, hundreds of
        # thousands of times, and a tensor per call costs ten times the arithmetic.
        return int(model.output_lengths(extractor.num_frames(samples)))

    return frames
