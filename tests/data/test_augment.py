"""Waveform augmentation: seeded, exact in SNR, speed and gain, identity when disabled."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import soundfile as sf
import torch

from deepspeech.config import AugmentConfig, FeaturesConfig
from deepspeech.data.augment import (
    WaveformAugmenter,
    apply_gain,
    clip_below_peak,
    equalize,
    mix_at_snr,
    octave_bands,
    speed_perturb,
    telephone_band,
    trim_silence,
)
from deepspeech.data.dataset import SpeechDataset
from deepspeech.data.manifest import Utterance
from deepspeech.errors import ConfigError
from deepspeech.features import FeatureExtractor

RATE = 16000


def speech(seconds: float = 1.0, frequency: float = 500.0) -> torch.Tensor:
    t = torch.arange(int(seconds * RATE), dtype=torch.float64) / RATE
    envelope = 0.5 + 0.5 * torch.sin(2 * math.pi * 3 * t)  # syllable-like level changes
    return (0.3 * envelope * torch.sin(2 * math.pi * frequency * t)).float()


def snr_db(clean: torch.Tensor, mixed: torch.Tensor) -> float:
    noise = (mixed - clean).double()
    return 10 * math.log10(float(clean.double().pow(2).mean()) / float(noise.pow(2).mean()))


def noisy(**changes) -> AugmentConfig:
    return AugmentConfig(**{"noise_probability": 1.0, "snr_db": [5.0, 25.0], **changes})


def test_same_seed_same_output_other_seed_other_output():
    augmenter = WaveformAugmenter(noisy(speed=[0.9, 1.1], gain_db=[-6.0, 6.0]), RATE)
    x = speech()
    assert torch.equal(augmenter(x, 1234), augmenter(x, 1234))
    assert not torch.equal(augmenter(x, 1234), augmenter(x, 1235))
    assert torch.equal(x, speech())  # the input is never modified in place


@pytest.mark.parametrize("target", [0.0, 10.0, 20.0])
def test_generated_noise_reaches_the_drawn_snr(target):
    augmenter = WaveformAugmenter(noisy(snr_db=[target, target]), RATE)
    clean = speech()
    assert abs(snr_db(clean, augmenter(clean, 7)) - target) < 0.5


@pytest.mark.parametrize("clip_seconds", [0.3, 3.0])  # looped, or a random stretch
def test_noise_manifest_clips_reach_the_drawn_snr(tmp_path, clip_seconds):
    rng = np.random.default_rng(0)
    sf.write(tmp_path / "hum.wav", 0.05 * rng.standard_normal(int(clip_seconds * RATE)), RATE)
    (tmp_path / "noise.jsonl").write_text(json.dumps(
        {"audio_filepath": "hum.wav", "text": "", "duration": clip_seconds}) + "\n")
    config = noisy(noise_manifest=str(tmp_path / "noise.jsonl"), snr_db=[12.0, 12.0])
    augmenter = WaveformAugmenter(config, RATE)
    clean = speech()
    mixed = augmenter(clean, 3)
    assert mixed.shape == clean.shape
    assert abs(snr_db(clean, mixed) - 12.0) < 0.5
    assert torch.equal(mixed, augmenter(clean, 3))


def test_unreadable_noise_clips_fail_up_front(tmp_path):
    (tmp_path / "noise.jsonl").write_text(json.dumps(
        {"audio_filepath": "gone.wav", "text": "", "duration": 1.0}) + "\n")
    with pytest.raises(ConfigError, match="gone.wav"):
        WaveformAugmenter(noisy(noise_manifest=str(tmp_path / "noise.jsonl")), RATE)


@pytest.mark.parametrize("factor", [0.9, 0.95, 1.1, 1.25])
def test_speed_changes_length_and_pitch_by_the_factor(factor):
    x = speech(1.0, frequency=500.0)
    y = speed_perturb(x, factor)
    assert abs(y.numel() - x.numel() / factor) <= 1
    spectrum = torch.fft.rfft(y).abs()
    peak_hz = int(spectrum.argmax()) * RATE / y.numel()
    assert abs(peak_hz - 500.0 * factor) < 3.0


def test_gain_is_exact_in_db():
    x = speech()
    for gain in (-12.0, -3.5, 6.0):
        ratio = float(apply_gain(x, gain).double().pow(2).mean() / x.double().pow(2).mean())
        assert 10 * math.log10(ratio) == pytest.approx(gain, abs=1e-4)
    augmenter = WaveformAugmenter(AugmentConfig(gain_db=[4.0, 4.0]), RATE)
    y = augmenter(x, 0)
    assert 20 * math.log10(float(y.abs().max() / x.abs().max())) == pytest.approx(4.0, abs=1e-4)


def test_disabled_config_is_the_identity():
    augmenter = WaveformAugmenter(AugmentConfig(), RATE)
    x = speech()
    assert augmenter(x, 99) is x
    assert mix_at_snr(torch.zeros(100), torch.ones(100), 10.0).abs().max() == 0  # silence stays


def test_dataset_applies_augmentation_per_sample_seed(tmp_path):
    sf.write(tmp_path / "a.wav", speech(1.0).numpy(), RATE)
    utterances = [Utterance(str(tmp_path / "a.wav"), "a", 1.0)]
    extractor = FeatureExtractor(FeaturesConfig(), RATE)
    plain = SpeechDataset(utterances, [[1]], extractor)
    off = SpeechDataset(utterances, [[1]], extractor, augment=AugmentConfig())
    on = SpeechDataset(utterances, [[1]], extractor, augment=noisy(speed=[1.1, 1.1]))
    assert torch.equal(plain[(0, 5)][1], off[(0, 5)][1])
    assert torch.equal(on[(0, 5)][1], on[(0, 5)][1])
    assert not torch.equal(on[(0, 5)][1], on[(0, 6)][1])
    # Faster speech, fewer frames: 1 s at 1.1x is about 0.91 s.
    assert on[(0, 5)][1].shape[1] == extractor.num_frames(round(RATE / 1.1))


def test_telephone_band_keeps_length_and_removes_energy_above_4_khz():
    t = torch.arange(16000) / 16000
    low, high = torch.sin(2 * math.pi * 1000 * t), torch.sin(2 * math.pi * 6000 * t)
    narrow = telephone_band(low + high, 16000)
    assert narrow.numel() == 16000
    spectrum = torch.fft.rfft(narrow[1000:-1000]).abs()
    assert spectrum[6000 * 14000 // 16000] < 0.01 * spectrum[1000 * 14000 // 16000]
    assert telephone_band(low, 8000) is low
    augmenter = WaveformAugmenter(AugmentConfig(telephone_probability=1.0), 16000)
    assert torch.equal(augmenter(low + high, seed=3), narrow)
    never = WaveformAugmenter(AugmentConfig(telephone_probability=0.0, gain_db=[1.0, 1.0]), 16000)
    assert torch.allclose(never(high, seed=3), apply_gain(high, 1.0))


def test_vtlp_factor_is_seeded_rounded_and_leaves_the_other_draws_alone(tmp_path):
    without = WaveformAugmenter(noisy(speed=[0.9, 1.1]), RATE)
    warped = WaveformAugmenter(noisy(speed=[0.9, 1.1], vtlp=[0.9, 1.1]), RATE)
    factors = [warped.warp_factor(seed) for seed in range(50)]
    assert factors == [warped.warp_factor(seed) for seed in range(50)]
    assert all(0.9 <= f <= 1.1 and f == round(f, 2) for f in factors)
    assert len(set(factors)) > 10
    assert without.warp_factor(7) == 1.0
    x = speech()
    assert torch.equal(without(x, 7), warped(x, 7))  # the waveform draws are unchanged

    sf.write(tmp_path / "a.wav", x.numpy(), RATE)
    utterances = [Utterance(str(tmp_path / "a.wav"), "a", 1.0)]
    extractor = FeatureExtractor(FeaturesConfig(), RATE)
    plain = SpeechDataset(utterances, [[1]], extractor, augment=noisy(speed=[0.9, 1.1]))
    dataset = SpeechDataset(utterances, [[1]], extractor,
                            augment=noisy(speed=[0.9, 1.1], vtlp=[0.9, 1.1]))
    seed = next(s for s, f in enumerate(factors) if f != 1.0)
    assert torch.equal(dataset[(0, seed)][1], dataset[(0, seed)][1])
    assert dataset[(0, seed)][1].shape == plain[(0, seed)][1].shape
    assert not torch.equal(dataset[(0, seed)][1], plain[(0, seed)][1])


def test_trim_silence_cuts_the_quiet_edges_and_keeps_the_pauses_between():
    word = speech(0.3)
    pause, hiss = torch.zeros(RATE // 5), torch.full((RATE // 4,), 1e-4)  # -70 dB under the word
    x = torch.cat([hiss, pause, word, pause, word, hiss])
    trimmed = trim_silence(x, RATE)
    frame = RATE // 100
    # Whole 10 ms frames: the cut lands within a frame of where the words start and end.
    assert trimmed.numel() % frame == 0
    assert abs(trimmed.numel() - (2 * word.numel() + pause.numel())) <= 2 * frame
    assert torch.equal(trimmed[:frame], x[hiss.numel() + pause.numel():][:frame])
    assert torch.equal(trim_silence(word, RATE), word[:word.numel() // frame * frame])
    silent = torch.zeros(RATE)
    assert trim_silence(silent, RATE) is silent


def test_trim_probability_trims_some_samples_and_leaves_the_other_draws_alone():
    x = torch.cat([torch.zeros(RATE // 2), speech(0.5), torch.zeros(RATE // 2)])
    without = WaveformAugmenter(noisy(speed=[0.9, 1.1]), RATE)
    always = WaveformAugmenter(noisy(speed=[0.9, 1.1], trim_probability=1.0), RATE)
    half = WaveformAugmenter(AugmentConfig(trim_probability=0.5), RATE)
    assert half.enabled
    lengths = {half(x, seed).numel() for seed in range(20)}
    assert lengths == {x.numel(), trim_silence(x, RATE).numel()}
    # Speech with no silence to cut: the speed and noise draws are what they were without it.
    assert torch.equal(always(speech(), 7), without(speech(), 7))
    assert always(x, 7).numel() < without(x, 7).numel()


def tone(frequency: float, rate: int = RATE) -> torch.Tensor:
    t = torch.arange(rate, dtype=torch.float64) / rate
    return (0.3 * torch.sin(2 * math.pi * frequency * t)).float()


def level_change_db(before: torch.Tensor, after: torch.Tensor) -> float:
    inner = slice(RATE // 10, -RATE // 10)  # away from the ends, where a sine starts and stops
    return 10 * math.log10(float(after[inner].double().pow(2).mean())
                           / float(before[inner].double().pow(2).mean()))


def test_octave_bands_run_from_125_hz_to_below_nyquist():
    assert octave_bands(8000) == [125.0, 250.0, 500.0, 1000.0, 2000.0]
    assert octave_bands(16000) == [125.0, 250.0, 500.0, 1000.0, 2000.0, 4000.0]


def test_equalize_sets_each_band_and_runs_straight_between_centres_on_log_frequency():
    gains = [3.0, 0.0, 0.0, 6.0, -12.0, 0.0]
    for frequency, expected in [(1000.0, 6.0), (2000.0, -12.0), (1000.0 * math.sqrt(2), -3.0),
                                (60.0, 3.0), (7000.0, 0.0)]:
        x = tone(frequency)
        y = equalize(x, RATE, gains)
        assert y.shape == x.shape and y.dtype == x.dtype
        assert level_change_db(x, y) == pytest.approx(expected, abs=0.05)
    x = speech()
    assert torch.allclose(equalize(x, RATE, [0.0] * 6), x, atol=1e-6)
    with pytest.raises(ValueError, match="6 band gains needed at 16000 Hz, got 5"):
        equalize(x, RATE, [0.0] * 5)


def test_equalize_leaks_nothing_from_one_end_of_the_waveform_to_the_other():
    x = torch.zeros(RATE)
    x[-200:] = tone(1000.0)[:200]  # a burst at the very end, silence before it
    y = equalize(x, RATE, [12.0, -12.0, 12.0, -12.0, 12.0, -12.0])
    assert float(y[-200:].abs().max()) > 0.05  # the burst itself is still there
    assert float(y[:RATE // 2].abs().max()) < 0.3 * 10 ** (-80 / 20)


def test_eq_probability_colors_some_samples_and_leaves_the_other_draws_alone():
    x = speech()
    half = WaveformAugmenter(AugmentConfig(eq_probability=0.5, eq_db=10.0), RATE)
    assert half.enabled
    changed = [not torch.equal(half(x, seed), x) for seed in range(40)]
    assert 10 < sum(changed) < 30
    # Each channel stays within the reach: tilt plus ripple, at most 1.5 x eq_db per band.
    for seed in range(40):
        assert abs(level_change_db(x, half(x, seed))) <= 15.0
    # The speed draw is what it was without it; the channel comes after it.
    always = WaveformAugmenter(AugmentConfig(speed=[0.9, 1.1], eq_probability=1.0), RATE)
    speed_only = WaveformAugmenter(AugmentConfig(speed=[0.9, 1.1]), RATE)
    assert len({speed_only(x, seed).numel() for seed in range(5)}) > 1
    for seed in range(5):
        assert torch.equal(always(x, seed),
                           equalize(speed_only(x, seed), RATE, always.channel_gains(seed)))
    assert always.channel_gains(7) != always.channel_gains(8)
    assert WaveformAugmenter(AugmentConfig(), RATE).channel_gains(7) is None


def test_clip_below_peak_cuts_at_the_depth_and_keeps_the_peak():
    x = tone(440.0)
    clipped = clip_below_peak(x, 6.0)
    ceiling = 0.3 * 10 ** (-6 / 20)
    torch.testing.assert_close(clipped, x.clamp(-ceiling, ceiling) * (0.3 / ceiling))
    assert float(clipped.abs().max()) == pytest.approx(float(x.abs().max()))
    flat = (clipped.abs() >= float(clipped.abs().max()) * 0.999).float().mean()
    assert 0.4 < float(flat) < 0.8  # a sine cut at half its peak is flat 2/3 of the time
    assert torch.equal(clip_below_peak(x, 0.0), x)
    assert torch.equal(clip_below_peak(torch.zeros(100), 10.0), torch.zeros(100))


def test_clip_probability_clips_some_samples_and_leaves_the_other_draws_alone():
    x = speech()
    half = WaveformAugmenter(AugmentConfig(clip_probability=0.5, clip_db=[3.0, 20.0]), RATE)
    assert half.enabled
    changed = [not torch.equal(half(x, seed), x) for seed in range(40)]
    assert 10 < sum(changed) < 30
    # The speed draw is what it was without it; the clipping comes after it.
    always = WaveformAugmenter(AugmentConfig(speed=[0.9, 1.1], clip_probability=1.0,
                                             clip_db=[6.0, 6.0]), RATE)
    speed_only = WaveformAugmenter(AugmentConfig(speed=[0.9, 1.1]), RATE)
    for seed in range(5):
        assert torch.equal(always(x, seed), clip_below_peak(speed_only(x, seed), 6.0))
