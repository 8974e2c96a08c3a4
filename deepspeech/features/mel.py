"""The mel filterbank of ``features.kind: mel``, refused where a band would stay empty."""

from __future__ import annotations

import warnings

import torch
import torchaudio

from deepspeech.errors import ConfigError


def mel_filterbank(n_mels: int, n_freqs: int, sample_rate: int) -> torchaudio.transforms.MelScale:
    """``n_mels`` triangular filters over ``n_freqs`` FFT bins, none of them empty."""
    filters = _filterbank(n_mels, n_freqs, sample_rate)
    _check_mel_bands(filters, sample_rate)
    return filters


def _filterbank(n_mels: int, n_freqs: int, sample_rate: int) -> torchaudio.transforms.MelScale:
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
        if _empty_bands(_filterbank(middle, n_freqs, sample_rate)).any():
            fewest_empty = middle
        else:
            most = middle
    raise ConfigError(
        f"features.n_mels: {n_mels} mel bands over the {n_freqs} FFT bins of this window at "
        f"{sample_rate} Hz leave {empty} band(s) empty; use at most {most} or a longer "
        f"features.window_ms")
