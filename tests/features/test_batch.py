"""The spectrogram stage on a padded batch: each utterance's own features, no padding leaking."""

from __future__ import annotations

import pytest
import torch

from deepspeech.config import FeaturesConfig, SpecAugmentConfig
from deepspeech.features import FeatureExtractor, spec_augment_spans

CONFIGS = [FeaturesConfig(), FeaturesConfig(normalize="none"),
           FeaturesConfig(kind="mel", n_mels=40), FeaturesConfig(dynamic_range_db=80.0),
           FeaturesConfig(kind="mel", n_mels=40, dynamic_range_db=60.0, normalize="none"),
           FeaturesConfig(normalize="global")]
LENGTHS = (16000, 12345, 4001, 321)  # 321: one sample past the fewest a window takes
WARPS = (1.0, 1.1, 0.9, 1.0)
SPEC_AUGMENT = SpecAugmentConfig(freq_masks=2, freq_width=20, time_masks=2, time_width=0.1)


def _waveforms(lengths=LENGTHS) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(length, generator=generator) * (i + 1) for i, length in enumerate(lengths)]


def _batched(extractor: FeatureExtractor, waveforms: list[torch.Tensor], warps=None,
             spans=None) -> torch.Tensor:
    """What ``collate_decoded`` pads and ``WaveformBatch.featurized`` computes, on the CPU."""
    centered = [extractor.centered(waveform) for waveform in waveforms]
    samples = torch.zeros(len(centered), max(c.numel() for c in centered))
    for row, padded in enumerate(centered):
        samples[row, :padded.numel()] = padded
    num_samples = torch.tensor([waveform.numel() for waveform in waveforms])
    freq, time = spans if spans is not None else (None, None)
    return extractor.batch(samples, num_samples, warps, freq, time)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c.kind}-{c.normalize}-"
                                                          f"{c.dynamic_range_db:g}dB")
def test_batched_features_are_each_utterances_own(config, make_extractor):
    extractor = make_extractor(config)
    waveforms = _waveforms()
    batched = _batched(extractor, waveforms, WARPS)
    assert batched.shape == (4, extractor.num_bins, extractor.num_frames(16000))
    for row, (waveform, warp) in enumerate(zip(waveforms, WARPS, strict=True)):
        alone = extractor(waveform, warp)
        frames = alone.shape[1]
        assert frames == extractor.num_frames(waveform.numel())
        torch.testing.assert_close(batched[row, :, :frames], alone, rtol=1e-5, atol=1e-5)
        assert not batched[row, :, frames:].any()  # padded with zeros, as collate pads


def test_the_log_spectrogram_itself_is_the_same_bits_batched(make_extractor):
    # Only the normalization's sums are ordered differently from the single path.
    extractor = make_extractor(FeaturesConfig(normalize="none"))
    waveforms = _waveforms()
    batched = _batched(extractor, waveforms, WARPS)
    for row, (waveform, warp) in enumerate(zip(waveforms, WARPS, strict=True)):
        alone = extractor(waveform, warp)
        assert torch.equal(batched[row, :, :alone.shape[1]], alone)


@pytest.mark.parametrize("config", [FeaturesConfig(), FeaturesConfig(dynamic_range_db=80.0)])
def test_padding_does_not_leak_into_a_short_utterance(config, make_extractor):
    # Its reflect padding, peak and normalization are its own, however long its neighbour.
    extractor = make_extractor(config)
    short, long = _waveforms((4001, 48000))
    alone = _batched(extractor, [short])[0]
    beside_a_longer_one = _batched(extractor, [short, long])[0]
    frames = alone.shape[1]
    torch.testing.assert_close(beside_a_longer_one[:, :frames], alone, rtol=1e-6, atol=1e-6)
    assert not beside_a_longer_one[:, frames:].any()


def test_digital_silence_beside_speech_stays_finite_in_a_batch(make_extractor):
    extractor = make_extractor(FeaturesConfig(dynamic_range_db=80.0))
    speech = _waveforms((16000,))[0]
    batched = _batched(extractor, [torch.zeros(8000), speech])
    assert torch.isfinite(batched).all()
    assert torch.equal(batched[1], _batched(extractor, [speech])[0])


def test_batched_features_are_the_same_bits_run_to_run(make_extractor):
    extractor = make_extractor(FeaturesConfig())
    waveforms = _waveforms()
    assert torch.equal(_batched(extractor, waveforms, WARPS), _batched(extractor, waveforms, WARPS))


def test_spec_augment_spans_mask_the_same_bands_and_spans_batched(make_extractor):
    extractor = make_extractor(FeaturesConfig())
    waveforms = _waveforms()
    spans = [spec_augment_spans(extractor.num_bins, extractor.num_frames(w.numel()),
                                SPEC_AUGMENT, torch.Generator().manual_seed(seed))
             for seed, w in enumerate(waveforms)]
    stacked = (torch.stack([f for f, _ in spans]), torch.stack([t for _, t in spans]))
    batched = _batched(extractor, waveforms, spans=stacked)
    for seed, waveform in enumerate(waveforms):
        alone = extractor(waveform, 1.0, *spans[seed])
        row = batched[seed, :, :alone.shape[1]]
        assert torch.equal(row == 0, alone == 0)  # the same bands and spans masked
        torch.testing.assert_close(row, alone, rtol=1e-5, atol=1e-5)
    assert (batched == 0).any(dim=2).any()


def test_num_frames_follows_the_stft_for_odd_windows_too():
    extractor = FeatureExtractor(FeaturesConfig(), 22050)  # a 441-sample window
    assert extractor.n_fft % 2 == 1
    for length in (440, 1000, 22000):  # multiples of the 220-sample hop: one frame fewer
        assert extractor(torch.randn(length)).shape[1] == extractor.num_frames(length)
        assert int(extractor.num_frames(torch.tensor(length))) == extractor.num_frames(length)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_features_at_training_sizes_are_bitwise_run_to_run_and_close_to_the_cpu(
        make_extractor):
    extractor = make_extractor(FeaturesConfig())
    generator = torch.Generator().manual_seed(1)
    lengths = torch.randint(80000, 160001, (32,), generator=generator).tolist()  # 5-10 s
    waveforms = [torch.randn(length, generator=generator) for length in lengths]
    warps = [1.0 + 0.01 * (i % 21 - 10) for i in range(32)]
    centered = [extractor.centered(waveform) for waveform in waveforms]
    samples = torch.zeros(32, max(c.numel() for c in centered))
    for row, padded in enumerate(centered):
        samples[row, :padded.numel()] = padded
    on_gpu = extractor.to(torch.device("cuda"))
    num_samples = torch.tensor(lengths)
    first, second = (on_gpu.batch(samples.cuda(), num_samples, warps) for _ in range(2))
    assert torch.equal(first, second)
    first = first.cpu()
    for row in (0, 7, 31):
        alone = extractor(waveforms[row], warps[row])
        torch.testing.assert_close(first[row, :, :alone.shape[1]], alone, rtol=1e-3, atol=1e-3)
        assert not first[row, :, alone.shape[1]:].any()
