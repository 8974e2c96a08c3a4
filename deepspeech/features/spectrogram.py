"""The spectrogram stage: Deep Speech 2's linear spectrogram, log-mel as an option.

Linear: |STFT| with a 20 ms Hann window and 10 ms hop, compressed with log(1 + x),
or (``dynamic_range_db``) with a log floored relative to the utterance's peak, which
together with per-utterance normalization makes the features level-independent.
Normalization is per utterance (zero mean, unit variance per frequency bin) or with
global statistics (``deepspeech.features.stats``). Training's VTLP warps and SpecAugment
masks (``deepspeech.features.augment``) come in as each utterance's own choices.

One implementation, ``FeatureExtractor.batch``, computes the features of a padded batch
on whatever device the extractor is on (``to``); one utterance is a batch of one
(``__call__``), and the streaming form (``deepspeech.features.streaming``) runs the same
stage on the frames each chunk completes. Each waveform comes reflect-padded by its own
``centered`` and zero after it, and its peak, its normalization and the padding of its
output see only its own frames, so that its features do not depend on its batch.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from typing import TypeVar

import torch

from deepspeech.config import FeaturesConfig
from deepspeech.errors import AudioError, ConfigError
from deepspeech.features.augment import covered, vtlp_matrix
from deepspeech.features.mel import mel_filterbank
from deepspeech.features.stats import FeatureStats, frame_sums

EPSILON = 1e-5
"""Added to the standard deviation, keeping silent bins finite."""
Count = TypeVar("Count", int, torch.Tensor)


class FeatureExtractor:
    """Waveforms -> features ``[bins, frames]``, one utterance or a padded batch."""

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
            self.mel = mel_filterbank(config.n_mels, self.n_fft // 2 + 1, sample_rate)
        self._vtlp: dict[float, torch.Tensor] = {}

    def to(self, device: torch.device) -> FeatureExtractor:
        """This extractor with its window, filters and statistics on ``device``."""
        moved = copy.copy(self)
        moved.window = self.window.to(device)
        moved.mel = copy.deepcopy(self.mel).to(device) if self.mel is not None else None
        if self.stats is not None:
            moved.stats = FeatureStats(self.stats.mean.to(device), self.stats.std.to(device))
        moved._vtlp = {}
        return moved

    @property
    def device(self) -> torch.device:
        """Where ``batch`` computes: the device of the window and the filters."""
        return self.window.device

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
        """The waveform with the reflect padding of a centered STFT: what ``batch`` takes,
        so that each utterance of a padded batch mirrors its own last samples, not the
        zeros after them."""
        self.check_length(waveform.shape[-1])
        return torch.nn.functional.pad(waveform[None], (self.pad, self.pad), mode="reflect")[0]

    def audio_seconds(self, frame_counts: torch.Tensor) -> float:
        """Seconds of real audio behind these frame counts: padding excluded, so the
        audio-seconds per second of training and evaluation logs mean the same thing."""
        return float(frame_counts.sum()) * self.hop_length / self.sample_rate

    def global_stats(self) -> FeatureStats:
        """The statistics ``features.normalize: global`` needs, refused by name if missing."""
        if self.stats is None:
            raise ConfigError("features.normalize is global but no feature statistics "
                              "were computed or stored in the checkpoint")
        return self.stats

    def compute_stats(self, waveforms: Iterable[torch.Tensor]) -> FeatureStats:
        """Per-bin mean/std over all frames of ``waveforms``; also installs them."""
        self.stats = FeatureStats.from_sums(
            frame_sums(map(self.log_spectrogram, waveforms), self.num_bins))
        return self.stats

    def __call__(self, waveform: torch.Tensor, warp: float = 1.0,
                 freq_spans: torch.Tensor | None = None,
                 time_spans: torch.Tensor | None = None) -> torch.Tensor:
        """The features of one waveform (1-D), ``[bins, frames]``: ``batch`` on a batch of
        one, SpecAugment's ``[masks, 2]`` spans (``spec_augment_spans``) zeroed."""
        return self.batch(self.centered(waveform)[None], None, [warp],
                          None if freq_spans is None else freq_spans[None],
                          None if time_spans is None else time_spans[None])[0]

    def log_spectrogram(self, waveform: torch.Tensor, warp: float = 1.0) -> torch.Tensor:
        """One waveform's unnormalized log(1 + |STFT|) (or log-mel, or the floored log),
        ``[bins, frames]``: what global statistics are computed on."""
        return self._log_spectrogram(self.centered(waveform)[None], [warp], None)[0]

    def batch(self, samples: torch.Tensor, num_samples: torch.Tensor | None = None,
              warps: Sequence[float] | None = None, freq_spans: torch.Tensor | None = None,
              time_spans: torch.Tensor | None = None) -> torch.Tensor:
        """The stage: features ``[B, bins, frames]`` of ``centered`` samples ``[B, S]`` on
        this extractor's device, zero past each utterance's frames.

        ``num_samples`` (``[B]``, before centering) says how many samples each row holds
        before its zero padding; None: every row is one whole utterance, as a single
        utterance or a stream's frames are (which also picks the normalization's
        arithmetic, ``_normalized``). ``warps`` per utterance (``vtlp_matrix``)
        and SpecAugment's spans (``spec_augment_spans``, stacked ``[B, masks, 2]``) as the
        loader worker drew them.
        """
        valid = None
        if num_samples is not None:
            lengths = self.num_frames(num_samples.to(self.device, non_blocking=True))
            frames = self.num_frames(samples.shape[1] - 2 * self.pad)
            valid = (torch.arange(frames, device=self.device) < lengths[:, None])[:, None, :]
        features = self._normalized(self._log_spectrogram(samples, warps, valid), valid)
        keep = valid
        if freq_spans is not None and freq_spans.shape[1]:
            keep = _and(keep, ~covered(freq_spans, features.shape[1])[:, :, None])
        if time_spans is not None and time_spans.shape[1]:
            keep = _and(keep, ~covered(time_spans, features.shape[2])[:, None, :])
        return features if keep is None else torch.where(keep, features, 0.0)

    def _log_spectrogram(self, samples: torch.Tensor, warps: Sequence[float] | None,
                         valid: torch.Tensor | None) -> torch.Tensor:
        spectrum = torch.stft(
            samples, n_fft=self.n_fft, hop_length=self.hop_length, win_length=self.win_length,
            window=self.window, center=False, return_complex=True,
        ).abs()
        if warps is not None and any(warp != 1.0 for warp in warps):
            spectrum = torch.stack([self._warp(warp) for warp in warps]) @ spectrum
        if self.mel is not None:
            spectrum = self.mel(spectrum.pow(2))
        return self._compressed(spectrum, valid)

    def _compressed(self, spectrum: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
        """log(1 + x), or the log floored under each utterance's own peak."""
        if not self.config.dynamic_range_db:
            return torch.log1p(spectrum)
        # Power (mel) or magnitude (linear): dB are 10 or 20 times log10 of it.
        decibels_per_decade = 10.0 if self.mel is not None else 20.0
        own = spectrum if valid is None else spectrum.masked_fill(~valid, 0)
        # Clamped after the scaling: digital silence (a peak of 0) would otherwise floor at
        # 0, and log(0) makes every feature of the utterance NaN once normalized.
        floor = (own.amax(dim=(1, 2), keepdim=True)
                 * 10.0 ** (-self.config.dynamic_range_db / decibels_per_decade)
                 ).clamp_min(torch.finfo(spectrum.dtype).tiny)
        return torch.log(spectrum.clamp_min(floor))

    def _normalized(self, features: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
        """``features.normalize`` applied to each utterance's log spectrogram.

        The one arithmetic choice between whole rows and padded ones: a whole row's
        deviation is torch's ``std`` (Welford's algorithm, what the loader workers have
        always computed, which trained weights depend on bit for bit), a padded row's is
        the square root of masked sums of squares. The means are the same bits either way;
        the deviations agree to float rounding (about 1e-7 relative).
        """
        mode = self.config.normalize
        if mode == "utterance":
            if valid is None:
                mean = features.mean(dim=2, keepdim=True)
                return _standardized(features, mean,
                                     features.std(dim=2, keepdim=True, unbiased=False))
            count = valid.sum(dim=2, keepdim=True).to(features.dtype)
            mean = torch.where(valid, features, 0.0).sum(dim=2, keepdim=True) / count
            variance = torch.where(valid, (features - mean).pow(2), 0.0).sum(dim=2, keepdim=True)
            return _standardized(features, mean, (variance / count).sqrt())
        if mode == "global":
            stats = self.global_stats()
            return _standardized(features, stats.mean[:, None], stats.std[:, None])
        return features

    def _warp(self, warp: float) -> torch.Tensor:
        """``vtlp_matrix`` on this device, copied once per factor (they come rounded)."""
        if warp not in self._vtlp:
            self._vtlp[warp] = vtlp_matrix(self.n_fft // 2 + 1, warp).to(self.device)
        return self._vtlp[warp]


def _and(mask: torch.Tensor | None, other: torch.Tensor) -> torch.Tensor:
    return other if mask is None else mask & other


def _standardized(features: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    return (features - mean) / (std + EPSILON)
