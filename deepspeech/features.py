"""Spectrogram features: Deep Speech 2's linear spectrogram, log-mel as an option.

Linear: |STFT| with a 20 ms Hann window and 10 ms hop, compressed with log(1 + x),
or (``dynamic_range_db``) with a log floored relative to the utterance's peak, which
together with per-utterance normalization makes the features level-independent.
Normalization is per utterance (zero mean, unit variance per frequency bin) or
with global statistics computed once on the training set and stored in the
checkpoint, so that evaluation and transcription use the same numbers.
SpecAugment masks and vocal tract length perturbation (a warp of the frequency axis,
``vtlp_matrix``) are applied in training only, seeded per sample.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch
import torchaudio

from deepspeech.config import FeaturesConfig, SpecAugmentConfig
from deepspeech.errors import AudioError, ConfigError

EPSILON = 1e-5
STATS_FRACTION_BITS = 16
"""Binary places kept of each waveform's feature sums (``FeatureExtractor.frame_sums``)."""
VTLP_BEND = 0.8
"""Share of the band where the VTLP warp bends, so that the top frequency stays in place."""


@dataclass
class FeatureStats:
    """Global per-bin mean and standard deviation of the log spectrogram."""

    mean: torch.Tensor
    std: torch.Tensor

    def to_dict(self) -> dict[str, torch.Tensor]:
        return {"mean": self.mean, "std": self.std}

    @classmethod
    def from_dict(cls, data: dict[str, torch.Tensor]) -> FeatureStats:
        return cls(mean=data["mean"], std=data["std"])

    @classmethod
    def from_sums(cls, sums: torch.Tensor) -> FeatureStats:
        """Statistics from ``FeatureExtractor.frame_sums`` (added over processes, maybe)."""
        bins = (sums.numel() - 1) // 2
        frames = float(sums[-1])
        if frames == 0:
            raise ValueError("no audio to compute feature statistics from")
        mean = sums[:bins] / frames
        std = (sums[bins:-1] / frames - mean.pow(2)).clamp_min(0).sqrt()
        return cls(mean=mean.float(), std=std.float())


def _mel_filterbank(n_mels: int, n_freqs: int, sample_rate: int) -> torchaudio.transforms.MelScale:
    with warnings.catch_warnings():  # torchaudio's warning names none of the config's keys
        warnings.simplefilter("ignore", UserWarning)
        return torchaudio.transforms.MelScale(n_mels=n_mels, sample_rate=sample_rate,
                                              n_stft=n_freqs)


def _empty_bands(mel: torchaudio.transforms.MelScale) -> torch.Tensor:
    return (mel.fb == 0).all(dim=0)


def _check_mel_bands(mel: torchaudio.transforms.MelScale, sample_rate: int) -> None:
    """Refuse mel bands narrower than the FFT's bin spacing: they stay zero, and their
    log is a constant the model would be fed as if it were a feature."""
    n_freqs, n_mels = mel.fb.shape
    empty = int(_empty_bands(mel).sum())
    if not empty:
        return
    most, fewest_empty = 1, n_mels  # bands only narrow as their number grows: bisect
    while fewest_empty - most > 1:
        middle = (most + fewest_empty) // 2
        if _empty_bands(_mel_filterbank(middle, n_freqs, sample_rate)).any():
            fewest_empty = middle
        else:
            most = middle
    raise ConfigError(
        f"features.n_mels: {n_mels} mel bands over the {n_freqs} FFT bins of this window at "
        f"{sample_rate} Hz leave {empty} band(s) empty; use at most {most} or a longer "
        f"features.window_ms")


class FeatureExtractor:
    """Waveform (1-D float tensor) -> features ``[bins, frames]``."""

    def __init__(self, config: FeaturesConfig, sample_rate: int,
                 stats: FeatureStats | None = None) -> None:
        self.config = config
        self.sample_rate = sample_rate
        self.win_length = round(sample_rate * config.window_ms / 1000)
        self.hop_length = round(sample_rate * config.hop_ms / 1000)
        # Linear features use one bin per window sample as Deep Speech 2 does; mel
        # zero-pads to a power of two so that 80 triangular filters all get bins.
        self.n_fft = self.win_length
        if config.kind == "mel":
            self.n_fft = 1 << (self.win_length - 1).bit_length()
        self.window = torch.hann_window(self.win_length)
        self.stats = stats
        self.mel = None
        if config.kind == "mel":
            self.mel = _mel_filterbank(config.n_mels, self.n_fft // 2 + 1, sample_rate)
            _check_mel_bands(self.mel, sample_rate)

    @property
    def num_bins(self) -> int:
        return self.config.n_mels if self.config.kind == "mel" else self.n_fft // 2 + 1

    @property
    def min_samples(self) -> int:
        """The fewest samples a centered STFT takes: its reflect padding mirrors
        ``n_fft // 2`` samples after the first one."""
        return self.n_fft // 2 + 1

    def check_length(self, num_samples: int) -> None:
        """Refuse audio shorter than ``min_samples``, before torch's padding fails on it."""
        if num_samples < self.min_samples:
            raise AudioError(
                f"{num_samples} samples ({1000 * num_samples / self.sample_rate:g} ms) are too "
                f"few for the features: a centered STFT needs at least {self.min_samples} "
                f"({1000 * self.min_samples / self.sample_rate:g} ms)")

    def num_frames(self, num_samples: int) -> int:
        """Frames produced for a waveform of ``num_samples`` (centered STFT)."""
        return num_samples // self.hop_length + 1

    def audio_seconds(self, frame_counts: torch.Tensor) -> float:
        """Seconds of real audio behind these frame counts: padding excluded, so the
        audio-seconds per second of training and evaluation logs mean the same thing."""
        return float(frame_counts.sum()) * self.hop_length / self.sample_rate

    def log_spectrogram(self, waveform: torch.Tensor, center: bool = True,
                        warp: float = 1.0) -> torch.Tensor:
        """Unnormalized log(1 + |STFT|) (or log-mel, or the floored log), ``[bins, frames]``.

        ``center=False`` takes samples that the caller already padded (streaming
        builds the same reflect padding itself, chunk by chunk). ``warp`` stretches the
        frequency axis (``vtlp_matrix``) before the mel filters.
        """
        if center:
            self.check_length(waveform.shape[-1])
        spectrum = torch.stft(
            waveform, n_fft=self.n_fft, hop_length=self.hop_length, win_length=self.win_length,
            window=self.window, center=center, pad_mode="reflect", return_complex=True,
        ).abs()
        if warp != 1.0:
            spectrum = vtlp_matrix(spectrum.shape[0], warp).to(spectrum.dtype) @ spectrum
        if self.mel is not None:
            spectrum = self.mel(spectrum.pow(2))
        if not self.config.dynamic_range_db:
            return torch.log1p(spectrum)
        # Power (mel) or magnitude (linear): dB are 10 or 20 times log10 of it.
        decibels_per_decade = 10.0 if self.mel is not None else 20.0
        peak = spectrum.max().clamp_min(torch.finfo(spectrum.dtype).tiny)
        floor = peak * 10.0 ** (-self.config.dynamic_range_db / decibels_per_decade)
        return torch.log(spectrum.clamp_min(floor))

    def normalize(self, features: torch.Tensor) -> torch.Tensor:
        """Apply ``features.normalize`` to a log spectrogram."""
        mode = self.config.normalize
        if mode == "utterance":
            mean = features.mean(dim=1, keepdim=True)
            std = features.std(dim=1, keepdim=True, unbiased=False)
            return (features - mean) / (std + EPSILON)
        if mode == "global":
            if self.stats is None:
                raise ConfigError("features.normalize is global but no feature statistics "
                                  "were computed or stored in the checkpoint")
            return (features - self.stats.mean[:, None]) / (self.stats.std[:, None] + EPSILON)
        return features

    def __call__(self, waveform: torch.Tensor, warp: float = 1.0) -> torch.Tensor:
        return self.normalize(self.log_spectrogram(waveform, warp=warp))

    def compute_stats(self, waveforms: Iterable[torch.Tensor]) -> FeatureStats:
        """Per-bin mean/std over all frames of ``waveforms``; also installs them."""
        self.stats = FeatureStats.from_sums(self.frame_sums(waveforms))
        return self.stats

    def frame_sums(self, waveforms: Iterable[torch.Tensor]) -> torch.Tensor:
        """Per-bin sums and sums of squares of the log spectrogram, then the frame count,
        ``[2 * num_bins + 1]`` in float64, for ``FeatureStats.from_sums``.

        Each waveform's sums are rounded to multiples of ``2**-STATS_FRACTION_BITS``:
        float64 adds such numbers exactly below ``2**(52 - STATS_FRACTION_BITS)``, so
        processes that each sum a share of the waveforms and then add their sums get the
        same bits as one process summing them all, however the waveforms are shared out.
        """
        sums = torch.zeros(2 * self.num_bins + 1, dtype=torch.float64)
        scale = 2.0 ** STATS_FRACTION_BITS
        for waveform in waveforms:
            features = self.log_spectrogram(waveform).double()
            moments = torch.cat([features.sum(dim=1), features.pow(2).sum(dim=1)])
            sums[:-1] += torch.round(moments * scale) / scale
            sums[-1] += features.shape[1]
        largest = float(sums.abs().max())
        if largest >= 2.0 ** (52 - STATS_FRACTION_BITS):
            raise ValueError(f"feature sums reach {largest:g}, past what float64 adds exactly")
        return sums


@functools.lru_cache(maxsize=128)
def vtlp_matrix(bins: int, factor: float) -> torch.Tensor:
    """``[bins, bins]`` interpolation that stretches a spectrum's frequency axis by ``factor``.

    Jaitly and Hinton's piecewise-linear warp: what was at frequency f moves to
    ``factor * f`` up to a bend at ``VTLP_BEND`` of the band, and from there a second
    line takes the rest of the band to the top bin, so no energy leaves the band and none
    is invented above it. Each output bin interpolates linearly between the two input
    bins around where its content came from.
    """
    top = bins - 1
    bend = VTLP_BEND * top * min(factor, 1.0)
    source = np.interp(np.arange(bins), [0.0, bend, top], [0.0, bend / factor, top])
    low = np.clip(np.floor(source).astype(np.int64), 0, max(top - 1, 0))
    fraction = torch.from_numpy(source - low).float()
    matrix = torch.zeros(bins, bins)
    rows, low = torch.arange(bins), torch.from_numpy(low)
    matrix[rows, low] = 1.0 - fraction
    matrix[rows, (low + 1).clamp_max(top)] += fraction
    return matrix


def spec_augment(features: torch.Tensor, config: SpecAugmentConfig,
                 generator: torch.Generator) -> torch.Tensor:
    """Zero out random frequency bands and time spans (Park et al., 2019), in a copy."""
    if not (config.freq_masks or config.time_masks):
        return features
    features = features.clone()
    bins, frames = features.shape
    for _ in range(config.freq_masks):
        width = int(torch.randint(0, config.freq_width + 1, (1,), generator=generator))
        start = int(torch.randint(0, max(1, bins - width), (1,), generator=generator))
        features[start:start + width, :] = 0
    max_time = int(frames * config.time_width)
    for _ in range(config.time_masks):
        width = int(torch.randint(0, max_time + 1, (1,), generator=generator))
        start = int(torch.randint(0, max(1, frames - width), (1,), generator=generator))
        features[:, start:start + width] = 0
    return features
