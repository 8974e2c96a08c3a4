"""The spectrogram stage on one utterance: against a direct torch.stft reference;
mel bands; normalization; the floored log; VTLP."""

from __future__ import annotations

import pytest
import torch

from deepspeech.config import FeaturesConfig
from deepspeech.errors import AudioError, ConfigError
from deepspeech.features import FeatureExtractor


def test_linear_spectrogram_matches_a_direct_stft():
    waveform = torch.randn(16000)
    extractor = FeatureExtractor(FeaturesConfig(normalize="none"), 16000)
    reference = torch.log1p(torch.stft(
        waveform, n_fft=320, hop_length=160, win_length=320, window=torch.hann_window(320),
        center=True, pad_mode="reflect", return_complex=True).abs())
    features = extractor(waveform)
    assert features.shape == (161, 101) == (extractor.num_bins, extractor.num_frames(16000))
    assert torch.equal(features, reference)


def test_window_and_hop_follow_the_rate():
    extractor = FeatureExtractor(FeaturesConfig(), 8000)
    assert (extractor.win_length, extractor.hop_length, extractor.num_bins) == (160, 80, 81)


def test_audio_seconds_count_frames_not_padding():
    extractor = FeatureExtractor(FeaturesConfig(), 8000)
    assert extractor.audio_seconds(torch.tensor([100, 50])) == 1.5  # 10 ms frames


def test_audio_shorter_than_half_a_window_is_a_clear_error():
    extractor = FeatureExtractor(FeaturesConfig(kind="mel", n_mels=40), 16000)
    assert extractor.min_samples == 257  # n_fft 512 (the 320-sample window padded)
    assert extractor(torch.randn(257)).shape == (40, extractor.num_frames(257))
    with pytest.raises(AudioError, match=r"256 samples \(16 ms\) are too few .* at least 257"):
        extractor(torch.randn(256))


def test_mel_features():
    extractor = FeatureExtractor(FeaturesConfig(kind="mel", n_mels=40, normalize="none"), 16000)
    features = extractor(torch.randn(8000))
    assert features.shape == (40, 51)
    assert torch.isfinite(features).all() and (features >= 0).all()


@pytest.mark.parametrize(("rate", "n_mels", "most"), [(16000, 128, 114), (8000, 100, 86)])
def test_mel_bands_narrower_than_the_fft_bins_are_refused(rate, n_mels, most):
    with pytest.raises(ConfigError, match=rf"features.n_mels: {n_mels} mel bands .* at {rate} Hz "
                                          rf"leave \d+ band\(s\) empty; use at most {most}"):
        FeatureExtractor(FeaturesConfig(kind="mel", n_mels=n_mels), rate)
    extractor = FeatureExtractor(FeaturesConfig(kind="mel", n_mels=most), rate)
    assert (extractor.mel.fb.max(dim=0).values > 0).all()


def test_utterance_normalization_is_zero_mean_unit_variance():
    extractor = FeatureExtractor(FeaturesConfig(normalize="utterance"), 16000)
    features = extractor(torch.randn(32000) * 3)
    assert features.mean(dim=1).abs().max() < 1e-4
    assert (features.std(dim=1, unbiased=False) - 1).abs().max() < 1e-3


def test_global_statistics_normalize_the_training_set():
    extractor = FeatureExtractor(FeaturesConfig(normalize="global"), 16000)
    waveforms = [torch.randn(16000) * scale for scale in (0.5, 1.0, 2.0)]
    stats = extractor.compute_stats(waveforms)
    frames = torch.cat([extractor(w) for w in waveforms], dim=1)
    assert stats.mean.shape == (161,)
    assert frames.mean(dim=1).abs().max() < 1e-3
    assert (frames.std(dim=1, unbiased=False) - 1).abs().max() < 1e-2


def test_a_floor_relative_to_the_peak_makes_features_level_independent():
    torch.manual_seed(0)
    speech = torch.randn(16000) * torch.linspace(0, 1, 16000)
    for kind in ("linear", "mel"):
        floored = FeatureExtractor(FeaturesConfig(kind=kind, n_mels=40,
                                                  dynamic_range_db=80), 16000)
        log1p = FeatureExtractor(FeaturesConfig(kind=kind, n_mels=40), 16000)
        quiet = speech * 10 ** (-40 / 20)
        assert torch.allclose(floored(quiet), floored(speech), atol=1e-3)
        assert not torch.allclose(log1p(quiet), log1p(speech), atol=0.1)
        raw = floored.log_spectrogram(speech)
        assert raw.max() - raw.min() <= 80 / (10 if kind == "mel" else 20) * 2.3026 + 1e-4


def test_digital_silence_with_a_floored_log_gives_finite_features():
    # A server warms up on a second of zeros, and users send silence: the floor under a peak
    # of 0 must not be 0, or log(0) turns the whole normalized utterance into NaN.
    for kind in ("linear", "mel"):
        extractor = FeatureExtractor(FeaturesConfig(kind=kind, n_mels=40,
                                                    dynamic_range_db=80), 16000)
        silence = extractor(torch.zeros(16000))
        assert torch.isfinite(silence).all()
        assert torch.equal(silence, silence[:, :1].expand_as(silence))  # no pattern in time


def _peak_hz(features: torch.Tensor, rate: int) -> float:
    bins = features.shape[0]
    return float(features.mean(dim=1).argmax()) * (rate / 2) / (bins - 1)


def test_vtlp_moves_a_tone_by_the_factor_below_the_bend():
    rate = 16000
    tone = torch.sin(2 * torch.pi * 1000 * torch.arange(rate) / rate)
    extractor = FeatureExtractor(FeaturesConfig(normalize="none"), rate)  # 50 Hz bins
    assert _peak_hz(extractor(tone), rate) == 1000
    assert _peak_hz(extractor(tone, warp=1.1), rate) == 1100
    assert _peak_hz(extractor(tone, warp=0.9), rate) == 900
    assert torch.equal(extractor(tone, warp=1.0), extractor(tone))
