"""Global normalization's statistics: sums that add up to the same bits however shared."""

from __future__ import annotations

import torch

from deepspeech.config import FeaturesConfig
from deepspeech.features import FeatureExtractor, FeatureStats, frame_sums


def test_feature_sums_shared_out_over_processes_add_up_to_the_same_bits():
    extractor = FeatureExtractor(FeaturesConfig(normalize="global"), 16000)
    generator = torch.Generator().manual_seed(3)
    waveforms = [torch.randn(4000 + 1000 * i, generator=generator) * (i + 1) for i in range(7)]
    whole = frame_sums(map(extractor.log_spectrogram, waveforms), 161)
    for ranks in (2, 3):
        shares = [frame_sums(map(extractor.log_spectrogram, waveforms[rank::ranks]), 161) for rank in range(ranks)]
        assert torch.equal(sum(shares[1:], shares[0]), whole)
        assert torch.equal(sum(shares[-2::-1], shares[-1]), whole)  # in any order
    stats = FeatureStats.from_sums(whole)
    assert torch.equal(stats.mean, extractor.compute_stats(waveforms).mean)
    assert float(whole[-1]) == sum(extractor.log_spectrogram(w).shape[1] for w in waveforms)
