"""Where training computes features: what a loader worker hands over under each strategy."""

from __future__ import annotations

import torch

from deepspeech.config import FeaturesConfig, SpecAugmentConfig
from deepspeech.features import Decoded, FeatureExtractor, InWorkers, OnDevice, spec_augment_spans


def test_in_workers_hands_over_features_on_device_the_stages_input():
    extractor = FeatureExtractor(FeaturesConfig(), 16000)
    waveform = torch.randn(12345, generator=torch.Generator().manual_seed(0))
    spans = spec_augment_spans(extractor.num_bins, extractor.num_frames(waveform.numel()),
                               SpecAugmentConfig(freq_masks=1, time_masks=1),
                               torch.Generator().manual_seed(1))
    features = InWorkers().utterance(extractor, waveform, 1.1, *spans)
    assert torch.equal(features, extractor(waveform, 1.1, *spans))
    decoded = OnDevice(torch.device("cpu")).utterance(extractor, waveform, 1.1, *spans)
    assert isinstance(decoded, Decoded) and decoded.num_samples == 12345
    assert torch.equal(decoded.samples, extractor.centered(waveform))
    batch = extractor.batch(decoded.samples[None], torch.tensor([decoded.num_samples]),
                            [decoded.warp], decoded.freq_spans[None], decoded.time_spans[None])
    torch.testing.assert_close(batch[0], features, rtol=1e-5, atol=1e-5)


def test_only_a_cuda_device_pins_the_loaders_memory():
    assert not InWorkers().pin_memory
    assert not OnDevice(torch.device("cpu")).pin_memory
    assert OnDevice(torch.device("cuda")).pin_memory
