"""What the feature tests share: an extractor at 16 kHz, with made-up global statistics
where its config normalizes with them."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from deepspeech.config import FeaturesConfig
from deepspeech.features import FeatureExtractor, FeatureStats


def _extractor(config: FeaturesConfig) -> FeatureExtractor:
    extractor = FeatureExtractor(config, 16000)
    if config.normalize == "global":
        extractor.stats = FeatureStats(torch.linspace(-1, 1, extractor.num_bins),
                                       torch.linspace(0.5, 2, extractor.num_bins))
    return extractor


@pytest.fixture
def make_extractor() -> Callable[[FeaturesConfig], FeatureExtractor]:
    return _extractor
