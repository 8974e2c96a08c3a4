"""The determinism contract of the one spectrogram stage: trained weights depend on its
bits, so each path is held to a reference written out op by op.

One utterance (the loader workers' path) is the stage on a batch of one, bit for bit; a
padded batch (``execution.features_on: device``) gives each utterance its own features,
bit for bit except per-utterance normalization, whose deviation a padded batch takes from
masked sums where a whole utterance takes torch's ``std`` (they agree to ~1e-7).
"""

from __future__ import annotations

import itertools

import pytest
import torch

from deepspeech.config import FeaturesConfig, SpecAugmentConfig
from deepspeech.features import FeatureExtractor, spec_augment_spans, vtlp_matrix

CONFIGS = [FeaturesConfig(kind=kind, n_mels=40, dynamic_range_db=db, normalize=normalize)
           for kind, db, normalize in itertools.product(("linear", "mel"), (0.0, 80.0),
                                                         ("utterance", "global", "none"))]
SPEC_AUGMENT = SpecAugmentConfig(freq_masks=2, freq_width=20, time_masks=2, time_width=0.1)
LENGTHS = (16000, 4001, 12345)
WARPS = (1.1, 1.0, 0.93)


def _waveforms() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(n, generator=generator) * scale
            for n, scale in zip(LENGTHS, (1.0, 0.01, 3.0), strict=True)]


def _spans(extractor: FeatureExtractor, waveform: torch.Tensor, seed: int
           ) -> tuple[torch.Tensor, torch.Tensor]:
    return spec_augment_spans(extractor.num_bins, extractor.num_frames(waveform.numel()),
                              SPEC_AUGMENT, torch.Generator().manual_seed(seed))


def _reference(extractor: FeatureExtractor, waveform: torch.Tensor, warp: float,
               spans: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """One utterance's features as the loader workers have always computed them."""
    config = extractor.config
    spectrum = torch.stft(waveform, n_fft=extractor.n_fft, hop_length=extractor.hop_length,
                          win_length=extractor.win_length, window=extractor.window,
                          center=True, pad_mode="reflect", return_complex=True).abs()
    if warp != 1.0:
        spectrum = vtlp_matrix(spectrum.shape[0], warp) @ spectrum
    if extractor.mel is not None:
        spectrum = extractor.mel(spectrum.pow(2))
    if config.dynamic_range_db:
        decade = 10.0 if extractor.mel is not None else 20.0
        floor = (spectrum.max() * 10.0 ** (-config.dynamic_range_db / decade)).clamp_min(
            torch.finfo(spectrum.dtype).tiny)
        features = torch.log(spectrum.clamp_min(floor))
    else:
        features = torch.log1p(spectrum)
    if config.normalize == "utterance":
        mean = features.mean(dim=1, keepdim=True)
        features = (features - mean) / (features.std(dim=1, keepdim=True, unbiased=False) + 1e-5)
    elif config.normalize == "global":
        features = ((features - extractor.stats.mean[:, None])
                    / (extractor.stats.std[:, None] + 1e-5))
    features = features.clone()
    for start, width in spans[0].tolist():
        features[start:start + width, :] = 0
    for start, width in spans[1].tolist():
        features[:, start:start + width] = 0
    return features


def _padded(extractor: FeatureExtractor, waveforms: list[torch.Tensor]) -> torch.Tensor:
    centered = [extractor.centered(waveform) for waveform in waveforms]
    samples = torch.zeros(len(centered), max(c.numel() for c in centered))
    for row, padded in enumerate(centered):
        samples[row, :padded.numel()] = padded
    return samples


def _ids(config: FeaturesConfig) -> str:
    return f"{config.kind}-{config.normalize}-{config.dynamic_range_db:g}dB"


@pytest.mark.parametrize("config", CONFIGS, ids=_ids)
def test_one_utterance_is_the_reference_arithmetic_bit_for_bit(config, make_extractor):
    extractor = make_extractor(config)
    for seed, (waveform, warp) in enumerate(zip(_waveforms(), WARPS, strict=True)):
        for spans in (_spans(extractor, waveform, seed), (torch.zeros(0, 2, dtype=torch.int64),) * 2):
            expected = _reference(extractor, waveform, warp, spans)
            assert torch.equal(extractor(waveform, warp, *spans), expected)
            whole = extractor.batch(extractor.centered(waveform)[None], None, [warp],
                                    spans[0][None], spans[1][None])
            assert torch.equal(whole[0], expected)


@pytest.mark.parametrize("config", CONFIGS, ids=_ids)
def test_a_padded_batch_gives_each_utterance_its_own_features(config, make_extractor):
    extractor = make_extractor(config)
    waveforms = _waveforms()
    spans = [_spans(extractor, waveform, seed) for seed, waveform in enumerate(waveforms)]
    batched = extractor.batch(_padded(extractor, waveforms),
                              torch.tensor([w.numel() for w in waveforms]), list(WARPS),
                              torch.stack([f for f, _ in spans]), torch.stack([t for _, t in spans]))
    for row, waveform in enumerate(waveforms):
        alone = extractor(waveform, WARPS[row], *spans[row])
        frames = alone.shape[1]
        assert not batched[row, :, frames:].any()
        if config.normalize == "utterance":  # masked sums against torch's std
            torch.testing.assert_close(batched[row, :, :frames], alone, rtol=1e-5, atol=1e-5)
        else:
            assert torch.equal(batched[row, :, :frames], alone)
