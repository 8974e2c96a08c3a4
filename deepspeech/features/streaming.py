"""The spectrogram stage in streaming form: samples in by chunks, feature frames out.

The offline extractor runs a centered STFT: the waveform is reflect-padded by
``n_fft // 2`` samples at both ends, then cut into frames every hop. The start padding
mirrors samples ``1 .. n_fft // 2``, so it is known once ``n_fft // 2 + 1`` samples have
arrived; the end padding mirrors the last samples and is only known at the end of the
file. In between, each frame is computed as soon as its last sample arrives, by the
offline stage (``FeatureExtractor.batch``) on a buffer of the samples not yet framed:
every frame is the offline extractor's frame. Normalization must be ``global`` or
``none`` and ``dynamic_range_db`` 0 (per-utterance statistics and peaks need the whole
utterance).
"""

from __future__ import annotations

import torch

from deepspeech.errors import ConfigError
from deepspeech.features.spectrogram import FeatureExtractor


class StreamingFeatures:
    """Incremental features: ``FeatureExtractor``'s frames of the whole file, chunk by chunk."""

    def __init__(self, extractor: FeatureExtractor) -> None:
        if extractor.config.normalize == "utterance":
            raise ConfigError(
                "streaming needs features.normalize: global or none; this model was trained "
                "with per-utterance normalization, which needs the whole utterance")
        if extractor.config.dynamic_range_db:
            raise ConfigError(
                "streaming needs features.dynamic_range_db: 0; a floor relative to the "
                "utterance's peak needs the whole utterance")
        self.extractor = extractor
        self.pad = extractor.pad
        self._buffer = torch.zeros(0)  # padded samples from the next frame's start on
        self._tail = torch.zeros(0)  # the last pad + 1 samples, for the end padding
        self._started = False
        self.samples = 0
        self.frames = 0
        self.finished = False

    def accept(self, samples: torch.Tensor, final: bool = False) -> torch.Tensor:
        """Take more samples (1-D); return the feature frames now complete, ``[bins, t]``."""
        if self.finished:
            raise RuntimeError("this stream is finished; start a new one")
        samples = samples.reshape(-1).float()
        self.samples += samples.numel()
        self._tail = torch.cat([self._tail, samples])[-(self.pad + 1):]
        self._buffer = torch.cat([self._buffer, samples])
        if not self._started and self._buffer.numel() > self.pad:
            # Reflect padding at the start: x[pad], ..., x[1] before x[0].
            self._buffer = torch.cat([self._buffer[1:self.pad + 1].flip(0), self._buffer])
            self._started = True
        if final:
            if not self._started:
                self.extractor.check_length(self.samples)
            # Reflect padding at the end: x[n-2], ..., x[n-1-pad] after x[n-1].
            self._buffer = torch.cat([self._buffer, self._tail[:-1].flip(0)])
            self.finished = True
        if not self._started:
            return torch.zeros(self.extractor.num_bins, 0)
        n_fft, hop = self.extractor.n_fft, self.extractor.hop_length
        ready = (self._buffer.numel() - n_fft) // hop + 1 if self._buffer.numel() >= n_fft else 0
        if ready == 0:
            return torch.zeros(self.extractor.num_bins, 0)
        features = self.extractor.batch(self._buffer[None, :(ready - 1) * hop + n_fft])[0]
        self._buffer = self._buffer[ready * hop:]
        self.frames += ready
        return features
