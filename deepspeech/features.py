"""Spectrogram features: Deep Speech 2's linear spectrogram, log-mel as an option.

Linear: |STFT| with a 20 ms Hann window and 10 ms hop, compressed with log(1 + x),
or (``dynamic_range_db``) with a log floored relative to the utterance's peak, which
together with per-utterance normalization makes the features level-independent.
Normalization is per utterance (zero mean, unit variance per frequency bin) or
with global statistics computed once on the training set and stored in the
checkpoint, so that evaluation and transcription use the same numbers.
SpecAugment masks and vocal tract length perturbation (a warp of the frequency axis,
``vtlp_matrix``) are applied in training only, seeded per sample.
``BatchFeatureExtractor`` computes the same features for a padded batch on any device
(training's ``data.features_on: device``).
"""

from __future__ import annotations

import copy
import functools
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

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
Count = TypeVar("Count", int, torch.Tensor)


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

    def num_frames(self, num_samples: Count) -> Count:
        """Frames produced for a waveform of ``num_samples`` (centered STFT), an int or an
        integer tensor of them."""
        return (num_samples + 2 * self.pad - self.n_fft) // self.hop_length + 1

    @property
    def pad(self) -> int:
        """Samples that a centered STFT mirrors onto each end of the waveform."""
        return self.n_fft // 2

    def centered(self, waveform: torch.Tensor) -> torch.Tensor:
        """The waveform with the reflect padding of a centered STFT: what
        ``BatchFeatureExtractor`` takes, so that each utterance of a padded batch mirrors
        its own last samples, not the zeros after them."""
        self.check_length(waveform.shape[-1])
        return torch.nn.functional.pad(waveform[None], (self.pad, self.pad), mode="reflect")[0]

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
        spectrum = self._magnitudes(waveform, self.window, center)
        if warp != 1.0:
            spectrum = vtlp_matrix(spectrum.shape[0], warp).to(spectrum.dtype) @ spectrum
        if self.mel is not None:
            spectrum = self.mel(spectrum.pow(2))
        return self._compressed(spectrum, lambda: spectrum.max())

    def _magnitudes(self, waveform: torch.Tensor, window: torch.Tensor,
                    center: bool) -> torch.Tensor:
        """|STFT| ``[..., bins, frames]`` of one waveform or of a batch of them."""
        return torch.stft(
            waveform, n_fft=self.n_fft, hop_length=self.hop_length, win_length=self.win_length,
            window=window, center=center, pad_mode="reflect", return_complex=True,
        ).abs()

    def _compressed(self, spectrum: torch.Tensor,
                    peak: Callable[[], torch.Tensor]) -> torch.Tensor:
        """log(1 + x), or the log floored under the utterance's ``peak`` (computed only then)."""
        if not self.config.dynamic_range_db:
            return torch.log1p(spectrum)
        # Power (mel) or magnitude (linear): dB are 10 or 20 times log10 of it.
        decibels_per_decade = 10.0 if self.mel is not None else 20.0
        # Clamped after the scaling: digital silence (a peak of 0) would otherwise floor at
        # 0, and log(0) makes every feature of the utterance NaN once normalized.
        floor = (peak() * 10.0 ** (-self.config.dynamic_range_db / decibels_per_decade)
                 ).clamp_min(torch.finfo(spectrum.dtype).tiny)
        return torch.log(spectrum.clamp_min(floor))

    def normalize(self, features: torch.Tensor) -> torch.Tensor:
        """Apply ``features.normalize`` to a log spectrogram."""
        mode = self.config.normalize
        if mode == "utterance":
            mean = features.mean(dim=1, keepdim=True)
            std = features.std(dim=1, keepdim=True, unbiased=False)
            return standardized(features, mean, std)
        if mode == "global":
            stats = self.global_stats()
            return standardized(features, stats.mean[:, None], stats.std[:, None])
        return features

    def global_stats(self) -> FeatureStats:
        """The statistics ``features.normalize: global`` needs, refused by name if missing."""
        if self.stats is None:
            raise ConfigError("features.normalize is global but no feature statistics "
                              "were computed or stored in the checkpoint")
        return self.stats

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


def standardized(features: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Zero mean, unit variance, ``EPSILON`` keeping silent bins finite."""
    return (features - mean) / (std + EPSILON)


def spec_augment_spans(bins: int, frames: int, config: SpecAugmentConfig,
                       generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """SpecAugment's random choices for one utterance: its frequency and its time masks,
    ``[masks, 2]`` (start, width) each, drawn as ``spec_augment`` draws them."""
    frequency = _drawn_spans(config.freq_masks, config.freq_width, bins, generator)
    time = _drawn_spans(config.time_masks, int(frames * config.time_width), frames, generator)
    return frequency, time


def _drawn_spans(count: int, widest: int, size: int,
                 generator: torch.Generator) -> torch.Tensor:
    spans = []
    for _ in range(count):
        width = int(torch.randint(0, widest + 1, (1,), generator=generator))
        start = int(torch.randint(0, max(1, size - width), (1,), generator=generator))
        spans.append((start, width))
    return torch.tensor(spans, dtype=torch.int64).view(-1, 2)


def spec_augment(features: torch.Tensor, config: SpecAugmentConfig,
                 generator: torch.Generator) -> torch.Tensor:
    """Zero out random frequency bands and time spans (Park et al., 2019), in a copy."""
    if not (config.freq_masks or config.time_masks):
        return features
    features = features.clone()
    freq_spans, time_spans = spec_augment_spans(*features.shape, config, generator)
    for start, width in freq_spans.tolist():
        features[start:start + width, :] = 0
    for start, width in time_spans.tolist():
        features[:, start:start + width] = 0
    return features


def _covered(spans: torch.Tensor, size: int) -> torch.Tensor:
    """``[B, size]``: which positions the ``[B, masks, 2]`` (start, width) spans cover."""
    positions = torch.arange(size, device=spans.device)
    start, width = spans[..., :1], spans[..., 1:]
    return ((positions >= start) & (positions < start + width)).any(dim=1)


class BatchFeatureExtractor:
    """``FeatureExtractor``'s features for a padded batch of waveforms, on any device (the
    GPU, where training computes them with ``data.features_on: device``).

    The same arithmetic in batched form: each waveform comes reflect-padded by its own
    ``FeatureExtractor.centered`` and zero after it, and the peak, the normalization and
    the padding of the output see only its own frames, so that an utterance's features do
    not depend on what it is batched with. Only reductions are ordered differently from
    the single-utterance path (masked sums over the batch's frames against ``std``):
    the two agree to float rounding, and each is bitwise the same from run to run.
    """

    def __init__(self, extractor: FeatureExtractor, device: torch.device) -> None:
        self.extractor = extractor
        self.device = device
        self.window = extractor.window.to(device)
        self.mel = copy.deepcopy(extractor.mel).to(device) if extractor.mel is not None else None
        self.global_mean_std: tuple[torch.Tensor, torch.Tensor] | None = None
        if extractor.config.normalize == "global":
            stats = extractor.global_stats()
            self.global_mean_std = (stats.mean.to(device)[:, None], stats.std.to(device)[:, None])
        self._vtlp: dict[float, torch.Tensor] = {}

    def __call__(self, samples: torch.Tensor, num_samples: torch.Tensor,
                 warps: Sequence[float] | None = None,
                 freq_spans: torch.Tensor | None = None,
                 time_spans: torch.Tensor | None = None) -> torch.Tensor:
        """Features ``[B, bins, frames]`` (zero past each utterance's frames) of ``samples``
        ``[B, S]`` on this device, which hold ``num_samples`` (``[B]``, before padding)
        each; ``warps`` per utterance (``vtlp_matrix``) and SpecAugment's spans
        (``spec_augment_spans``, stacked) as the single-utterance path takes them."""
        extractor = self.extractor
        spectrum = extractor._magnitudes(samples, self.window, center=False)
        frames = spectrum.shape[-1]
        lengths = extractor.num_frames(num_samples.to(self.device, non_blocking=True))
        valid = (torch.arange(frames, device=self.device) < lengths[:, None])[:, None, :]
        if warps is not None and any(warp != 1.0 for warp in warps):
            spectrum = torch.stack([self._warp(warp) for warp in warps]) @ spectrum
        if self.mel is not None:
            spectrum = self.mel(spectrum.pow(2))
        features = extractor._compressed(
            spectrum, lambda: spectrum.masked_fill(~valid, 0).amax(dim=(1, 2), keepdim=True))
        features = self._normalized(features, valid, lengths)
        keep = valid
        if freq_spans is not None and freq_spans.shape[1]:
            keep = keep & ~_covered(freq_spans, features.shape[1])[:, :, None]
        if time_spans is not None and time_spans.shape[1]:
            keep = keep & ~_covered(time_spans, frames)[:, None, :]
        return torch.where(keep, features, 0.0)

    def _normalized(self, features: torch.Tensor, valid: torch.Tensor,
                    lengths: torch.Tensor) -> torch.Tensor:
        mode = self.extractor.config.normalize
        if mode == "utterance":
            count = lengths[:, None, None].to(features.dtype)
            mean = torch.where(valid, features, 0.0).sum(dim=2, keepdim=True) / count
            variance = torch.where(valid, (features - mean).pow(2), 0.0).sum(dim=2, keepdim=True)
            return standardized(features, mean, (variance / count).sqrt())
        if mode == "global":
            return standardized(features, *self.global_mean_std)
        return features

    def _warp(self, warp: float) -> torch.Tensor:
        """``vtlp_matrix`` on this device, copied once per factor (they come rounded)."""
        if warp not in self._vtlp:
            bins = self.extractor.n_fft // 2 + 1
            self._vtlp[warp] = vtlp_matrix(bins, warp).to(self.device)
        return self._vtlp[warp]
