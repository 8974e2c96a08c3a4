"""Training's perturbations: SpecAugment's spans and the VTLP warp's matrix."""

from __future__ import annotations

import torch

from deepspeech.config import FeaturesConfig, SpecAugmentConfig
from deepspeech.features import FeatureExtractor, spec_augment_spans, vtlp_matrix


def test_spec_augment_is_seeded_and_masks():
    extractor = FeatureExtractor(FeaturesConfig(normalize="none"), 16000)
    waveform = torch.randn(48000, generator=torch.Generator().manual_seed(0)) + 5
    config = SpecAugmentConfig(freq_masks=2, freq_width=20, time_masks=2, time_width=0.1)
    first, second = (spec_augment_spans(161, 301, config, torch.Generator().manual_seed(3))
                     for _ in range(2))
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])
    masked = extractor(waveform, 1.0, *first)
    plain = extractor(waveform)
    for start, width in first[0].tolist():
        assert not masked[start:start + width].any()
    for start, width in first[1].tolist():
        assert not masked[:, start:start + width].any()
    assert torch.equal(masked[masked != 0], plain[masked != 0])
    assert (masked == 0).sum() > 0 and (plain == 0).sum() == 0


def test_spec_augment_spans_without_masks_are_empty():
    freq, time = spec_augment_spans(161, 100, SpecAugmentConfig(), torch.Generator())
    assert freq.shape == time.shape == (0, 2)


def test_the_vtlp_warp_keeps_both_ends_of_the_band():
    for factor in (0.8, 0.93, 1.07, 1.2):
        matrix = vtlp_matrix(161, factor)
        assert matrix[0, 0] == 1 and matrix[-1, -1] == 1
        assert torch.allclose(matrix.sum(dim=1), torch.ones(161))  # interpolation weights
        sources = (matrix * torch.arange(161.0)).sum(dim=1)
        assert (sources.diff() > 0).all()  # monotone: no frequency folds over
    assert torch.equal(vtlp_matrix(161, 1.0), torch.eye(161))
