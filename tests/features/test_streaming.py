"""The streaming form of the stage: chunks in, the offline frames out."""

from __future__ import annotations

import pytest
import torch

from deepspeech.config import FeaturesConfig
from deepspeech.errors import AudioError, ConfigError
from deepspeech.features import FeatureExtractor, StreamingFeatures


def waveform(seconds: float, rate: int = 16000, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return 0.3 * torch.randn(int(seconds * rate), generator=generator)


def feed(stream: StreamingFeatures, samples: torch.Tensor, sizes: list[int]) -> list[torch.Tensor]:
    """Feed ``samples`` in chunks of the given sizes (cycled), the last one final."""
    outputs, start, i = [], 0, 0
    while True:
        end = min(start + sizes[i % len(sizes)], samples.numel())
        final = end == samples.numel()
        outputs.append(stream.accept(samples[start:end], final=final))
        if final:
            return outputs
        start, i = end, i + 1


@pytest.mark.parametrize("rate", [16000, 22050])  # 22050 Hz: an odd 441-sample window
@pytest.mark.parametrize("normalize", ["none", "global"])
@pytest.mark.parametrize("sizes", [[1], [7], [160], [161], [3000, 0, 5, 123], [10**7]], ids=str)
def test_linear_features_are_the_offline_frames_bit_for_bit(rate, normalize, sizes):
    extractor = FeatureExtractor(FeaturesConfig(normalize=normalize), rate)
    samples = waveform(0.77, rate)
    if normalize == "global":
        extractor.compute_stats([samples])
    streamed = torch.cat(feed(StreamingFeatures(extractor), samples, sizes), dim=1)
    assert torch.equal(streamed, extractor(samples))


@pytest.mark.parametrize("sizes", [[1], [257], [3000, 0, 5, 123]], ids=str)
def test_mel_features_match_offline(sizes):
    extractor = FeatureExtractor(FeaturesConfig(kind="mel", normalize="none"), 16000)
    samples = waveform(0.5)
    streamed = torch.cat(feed(StreamingFeatures(extractor), samples, sizes), dim=1)
    # The mel matmul rounds differently for other frame counts: not bitwise.
    torch.testing.assert_close(streamed, extractor(samples), atol=1e-5, rtol=1e-5)


def test_features_refuse_utterance_normalization_and_too_short_audio():
    with pytest.raises(ConfigError, match="normalize: global or none"):
        StreamingFeatures(FeatureExtractor(FeaturesConfig(normalize="utterance"), 16000))
    stream = StreamingFeatures(FeatureExtractor(FeaturesConfig(normalize="none"), 16000))
    with pytest.raises(AudioError, match=r"100 samples \(6.25 ms\) are too few .* at least 161"):
        stream.accept(torch.zeros(100), final=True)
