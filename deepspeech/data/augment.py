"""Waveform augmentation for training: trimmed silence, speed, channel, noise, clipping,
telephone band, gain.

Deep Speech 2 trained on noise-added copies of its data; speed perturbation
(Ko et al., 2015) resamples the waveform so tempo and pitch change together.
``WaveformAugmenter(config, sample_rate)(waveform, seed)`` applies, in order:

0. with probability ``trim_probability``, the leading and trailing silence cut off
   (``trim_silence``), drawn from a stream of its own so that the other draws stay
   what they were without it;
1. speed: factor ``s`` from ``config.speed``, rounded to a multiple of 0.05 so
   that the resampling ratios stay small (21/20, 9/10: short kernels, each
   built once per worker); the output has ``len / s`` samples;
2. another microphone and room, with probability ``eq_probability``: an octave-band
   equalizer (``equalize``) with a random tilt of up to ``eq_db`` decibels and a ripple of
   half that, drawn from a stream of its own like the trimming;
3. noise, with probability ``noise_probability``: a random clip of the noise
   manifest at a random offset (looped if short), or, without a manifest,
   generated colored noise (power spectrum 1/f^alpha, alpha in {0, 0.5, 1, 1.5,
   2}: white to brown), scaled to an SNR drawn from ``snr_db`` (utterance power
   over noise power). Generated noise is a random stretch of a bank (five
   colors, 20 s each, made once per process from a fixed seed): a copy, not an FFT;
4. clipping, with probability ``clip_probability``: the waveform cut off at a depth
   drawn from ``clip_db`` below its peak (``clip_below_peak``), as an overdriven input
   stage records speech and noise together, drawn from a stream of its own;
5. telephone band, with probability ``telephone_probability``: resampled to 8 kHz
   and back, which removes everything above 4 kHz as a phone line does (noise
   included: the line carries both);
6. gain from ``gain_db``, applied last so that it leaves the SNR unchanged;
7. a vocal tract length factor from ``vtlp`` (``warp_factor``), rounded to 0.01, which
   the feature extractor applies to the spectrum (``deepspeech.features.vtlp_matrix``).

Every choice comes from the sample's seed (``BucketBatchSampler`` hands one out
per item), so a sample is the same in any worker, on any rank, after a resume.
Only the training set is augmented; a disabled config returns the input itself.
"""

from __future__ import annotations

import functools
import math
import typing
from fractions import Fraction

import numpy as np
import torch
import torchaudio.transforms

from deepspeech.config import AugmentConfig
from deepspeech.data.audio import load_audio
from deepspeech.data.manifest import Utterance, read_manifest
from deepspeech.data.probe import find_unreadable
from deepspeech.errors import ConfigError

TELEPHONE_RATE = 8000
SPEED_STEPS = 20         # speed factors are multiples of 0.05 (Kaldi's recipes use 0.9/1.0/1.1)
NOISE_COLORS = (0.0, 0.5, 1.0, 1.5, 2.0)   # spectral slopes alpha of the generated noise
BANK_SECONDS = 20.0
TRIM_TOP_DB = 40.0       # frames this far below the loudest count as silence at the edges
EQ_LOWEST_BAND = 125.0   # Hz: the equalizer's bands are the octaves from here to Nyquist
_STREAM = 0xA0613E       # keeps these draws apart from SpecAugment's stream of the same seed


@functools.lru_cache(maxsize=64)
def _resampler(orig: int, new: int) -> torchaudio.transforms.Resample:
    # Building the windowed-sinc kernel costs more than applying it: once per ratio.
    return torchaudio.transforms.Resample(orig, new)


def speed_perturb(waveform: torch.Tensor, factor: float) -> torch.Tensor:
    """Play ``factor`` times faster (``len / factor`` samples), pitch shifted with tempo."""
    ratio = Fraction(round(factor * SPEED_STEPS), SPEED_STEPS)
    if ratio <= 0:
        raise ValueError(f"speed factor must be positive, got {factor}")
    if ratio == 1:
        return waveform
    # Resampling from rate p to rate q and playing at p again speeds up by p / q.
    with torch.no_grad():
        return _resampler(ratio.numerator, ratio.denominator)(waveform)


def telephone_band(waveform: torch.Tensor, sample_rate: int) -> torch.Tensor:
    """Down to 8 kHz and back: the same length, no energy above 4 kHz."""
    if sample_rate <= TELEPHONE_RATE:
        return waveform
    with torch.no_grad():
        narrow = _resampler(sample_rate, TELEPHONE_RATE)(waveform)
        wide = _resampler(TELEPHONE_RATE, sample_rate)(narrow)
    length = waveform.numel()
    return torch.nn.functional.pad(wide[:length], (0, max(0, length - wide.numel())))


def apply_gain(waveform: torch.Tensor, gain_db: float) -> torch.Tensor:
    """Scale by ``gain_db`` decibels (amplitude factor 10^(dB/20))."""
    return waveform if gain_db == 0 else waveform * (10.0 ** (gain_db / 20.0))


def clip_below_peak(waveform: torch.Tensor, depth_db: float) -> torch.Tensor:
    """Hard-clip ``depth_db`` decibels below the peak, then scale the peak back to where it
    was: a recording driven that far past full scale, heard at its own level.
    """
    peak = waveform.abs().max()
    if depth_db == 0 or peak == 0:
        return waveform
    ceiling = peak * 10.0 ** (-depth_db / 20.0)
    return waveform.clamp(-ceiling, ceiling) * (peak / ceiling)


def trim_silence(waveform: torch.Tensor, sample_rate: int,
                 top_db: float = TRIM_TOP_DB) -> torch.Tensor:
    """Cut the leading and trailing 10 ms frames more than ``top_db`` below the loudest.

    What a voice-activity detector or a push-to-talk button hands over: speech from
    the first sample to the last. The cut falls on whole frames, so a last partial frame
    (under 10 ms) always goes. A silent (all-zero) waveform comes back as it was.
    """
    frame = max(1, sample_rate // 100)
    frames = waveform.numel() // frame
    if frames == 0:
        return waveform
    power = waveform[:frames * frame].double().reshape(frames, frame).pow(2).mean(dim=1)
    peak = float(power.max())
    if peak == 0:
        return waveform
    loud = torch.nonzero(power >= peak * 10.0 ** (-top_db / 10.0)).flatten()
    return waveform[int(loud[0]) * frame:(int(loud[-1]) + 1) * frame]


def octave_bands(sample_rate: int) -> list[float]:
    """Centre frequencies of a graphic equalizer's octave bands: 125, 250, ... below Nyquist."""
    bands = [EQ_LOWEST_BAND]
    while bands[-1] * 2 < sample_rate / 2:
        bands.append(bands[-1] * 2)
    return bands


def equalize(waveform: torch.Tensor, sample_rate: int,
             band_gains_db: typing.Sequence[float]) -> torch.Tensor:
    """Raise or cut each octave band (``octave_bands``) by its gain in decibels.

    The gain runs straight between the bands' centres on a log-frequency axis and stays
    flat beyond the first and the last, a smooth curve as a microphone or a room gives,
    applied with zero phase in one FFT of the whole waveform, padded by 250 ms so that what
    rings past one end and wraps around stays 80 dB below the signal at the other. The
    output has the input's length.
    """
    bands = octave_bands(sample_rate)
    if len(band_gains_db) != len(bands):
        raise ValueError(f"{len(bands)} band gains needed at {sample_rate} Hz, "
                         f"got {len(band_gains_db)}")
    length = waveform.numel()
    size = length + sample_rate // 4
    frequencies = np.fft.rfftfreq(size, d=1.0 / sample_rate)
    octaves = np.log2(np.clip(frequencies, bands[0], bands[-1]) / bands[0])
    curve_db = torch.from_numpy(np.interp(octaves, np.arange(len(bands)), band_gains_db))
    spectrum = torch.fft.rfft(waveform.double(), n=size) * 10.0 ** (curve_db / 20.0)
    return torch.fft.irfft(spectrum, n=size)[:length].to(waveform.dtype)


def mix_at_snr(speech: torch.Tensor, noise: torch.Tensor, snr_db: float) -> torch.Tensor:
    """``speech + noise`` with the noise scaled so that power(speech) / power(noise) = SNR."""
    speech_power = float(speech.double().pow(2).mean())
    noise_power = float(noise.double().pow(2).mean())
    if speech_power == 0 or noise_power == 0:
        return speech
    scale = math.sqrt(speech_power / (noise_power * 10.0 ** (snr_db / 10.0)))
    return speech + (noise * scale).to(speech.dtype)


def colored_noise(rng: np.random.Generator, length: int, alpha: float) -> torch.Tensor:
    """Unit-power noise with a 1/f^alpha power spectrum (0 white, 1 pink, 2 brown)."""
    size = 1 << max(4, (length - 1).bit_length())  # FFTs of a power of two, then cut
    generator = torch.Generator().manual_seed(int(rng.integers(1 << 62)))
    spectrum = torch.fft.rfft(torch.randn(size, generator=generator))
    frequencies = torch.arange(spectrum.numel(), dtype=torch.float32).clamp_min(1.0)  # DC: gain 1
    noise = torch.fft.irfft(spectrum * frequencies.pow(-alpha / 2.0), n=size)[:length]
    return noise / (noise.pow(2).mean().sqrt() + 1e-12)


@functools.lru_cache(maxsize=len(NOISE_COLORS) * 2)
def _noise_bank(alpha: float, sample_rate: int) -> torch.Tensor:
    rng = np.random.default_rng([_STREAM, NOISE_COLORS.index(alpha)])
    return colored_noise(rng, round(BANK_SECONDS * sample_rate), alpha)


def _looped(noise: torch.Tensor, start: int, length: int) -> torch.Tensor:
    """``length`` samples of ``noise`` from ``start``, wrapping around as often as needed."""
    start %= noise.numel()
    if start + length > noise.numel():
        noise = noise.repeat(-(-(start + length) // noise.numel()))
    return noise[start:start + length]


def _drawn(seed: int, stream: int, probability: float) -> np.random.Generator | None:
    """The sample's generator on a stream of its own if the effect is drawn, else None.

    A stream per optional effect keeps the other draws what they were without it.
    """
    if probability == 0:
        return None
    rng = np.random.default_rng([_STREAM, seed, stream])
    return rng if rng.random() < probability else None


class WaveformAugmenter:
    """Trimming, speed, channel, noise, clipping, telephone band, gain and VTLP for one
    training sample, every choice drawn from its seed."""

    def __init__(self, config: AugmentConfig, sample_rate: int) -> None:
        self.config = config
        self.sample_rate = sample_rate
        self.noises: list[Utterance] = []
        if config.noise_manifest and config.noise_probability > 0:
            self.noises = read_manifest(config.noise_manifest)
            bad = find_unreadable(self.noises)
            if bad:  # found now, not in a worker hours into training
                shown = "; ".join(f"{p.audio}: {p.message}" for p in bad[:5])
                raise ConfigError(f"data.augment.noise_manifest: {len(bad)} unreadable noise "
                                  f"clip(s) in {config.noise_manifest}: {shown}")

    @property
    def enabled(self) -> bool:
        return self.config.enabled

    def __call__(self, waveform: torch.Tensor, seed: int) -> torch.Tensor:
        if not self.enabled:
            return waveform
        rng = np.random.default_rng([_STREAM, seed])
        # A fixed number of draws in a fixed order: each setting changes only its own effect.
        speed = rng.uniform(*self.config.speed)
        gain = rng.uniform(*self.config.gain_db)
        add_noise = rng.random() < self.config.noise_probability
        snr = rng.uniform(*self.config.snr_db)
        telephone = rng.random() < self.config.telephone_probability
        noise_rng = np.random.default_rng([_STREAM, seed, 1])

        if _drawn(seed, 3, self.config.trim_probability) is not None:
            waveform = trim_silence(waveform, self.sample_rate)
        waveform = speed_perturb(waveform, speed)
        channel = self.channel_gains(seed)
        if channel is not None:
            waveform = equalize(waveform, self.sample_rate, channel)
        if add_noise:
            waveform = mix_at_snr(waveform, self._noise(noise_rng, waveform.numel()), snr)
        clipping = _drawn(seed, 5, self.config.clip_probability)
        if clipping is not None:
            waveform = clip_below_peak(waveform, clipping.uniform(*self.config.clip_db))
        if telephone:
            waveform = telephone_band(waveform, self.sample_rate)
        return apply_gain(waveform, gain)

    def warp_factor(self, seed: int) -> float:
        """The sample's VTLP factor (1 without VTLP), from a stream of its own so that the
        other draws stay what they were without it."""
        if self.config.vtlp == [1.0, 1.0]:
            return 1.0
        rng = np.random.default_rng([_STREAM, seed, 2])
        return round(float(rng.uniform(*self.config.vtlp)), 2)

    def channel_gains(self, seed: int) -> list[float] | None:
        """The sample's equalizer gains, or None for its own channel.

        A tilt (dB at the outermost bands against the middle) and a ripple of half that
        range per band: microphones and rooms differ most in how dull or bright they are.
        """
        rng = _drawn(seed, 4, self.config.eq_probability)
        if rng is None:
            return None
        reach = self.config.eq_db
        bands = len(octave_bands(self.sample_rate))
        tilt = rng.uniform(-reach, reach)
        ripple = rng.uniform(-reach / 2, reach / 2, size=bands)
        slope = np.linspace(-1.0, 1.0, bands)
        return [float(g) for g in tilt * slope + ripple]

    def _noise(self, rng: np.random.Generator, length: int) -> torch.Tensor:
        if not self.noises:
            bank = _noise_bank(NOISE_COLORS[int(rng.integers(len(NOISE_COLORS)))],
                               self.sample_rate)
            return _looped(bank, int(rng.integers(bank.numel())), length)
        clip = self.noises[int(rng.integers(len(self.noises)))]
        needed = length / self.sample_rate
        if clip.duration > needed:  # a random stretch of a long clip
            start = (clip.offset or 0.0) + rng.uniform(0.0, clip.duration - needed)
            noise = load_audio(clip.audio_filepath, self.sample_rate, start, needed)
            return _looped(noise, 0, length)  # rounding may leave it a sample short
        # A short clip, looped from a random point.
        noise = load_audio(clip.audio_filepath, self.sample_rate, clip.offset,
                           clip.duration if clip.offset is not None else None)
        return _looped(noise, int(rng.integers(noise.numel())), length)
