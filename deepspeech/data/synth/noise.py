"""Generated background noise for the synthetic corpus, mixed in at a chosen SNR.

No recordings are needed: noise is shaped white noise. Two kinds, picked per
utterance:

* colored: a power spectrum falling as 1/f^alpha, alpha from 0 (white hiss) over 1
  (pink) to 2 (brown rumble);
* babble-like: speech-shaped noise (energy mostly between 150 Hz and 4 kHz) whose level
  follows the summed syllable-rate (2-7 Hz) envelopes of several talkers, which gives
  the fluctuating level of a crowd rather than a steady hiss.

Everything is drawn from the ``numpy.random.Generator`` passed in, so the noise
is fixed by the utterance's seed.
"""

from __future__ import annotations

import numpy as np


def _fast_length(n: int) -> int:
    return 1 << max(int(n - 1).bit_length(), 4)  # FFTs of a power of two, then cut


def _shaped(rng: np.random.Generator, n: int, gains: np.ndarray) -> np.ndarray:
    """n samples of white noise filtered by ``gains`` (one per rfft bin of the fast length)."""
    spectrum = np.fft.rfft(rng.standard_normal(_fast_length(n), dtype=np.float32)) * gains
    noise = np.fft.irfft(spectrum)[:n]
    return noise / (np.sqrt(np.mean(noise**2)) + 1e-12)


def _freqs(n: int, sample_rate: float) -> np.ndarray:
    return np.fft.rfftfreq(_fast_length(n), 1.0 / sample_rate).astype(np.float32)


def colored_noise(rng: np.random.Generator, n: int, sample_rate: int) -> np.ndarray:
    """Unit-RMS noise with a 1/f^alpha power spectrum, alpha drawn from [0, 2]."""
    alpha = rng.uniform(0.0, 2.0)
    freqs = _freqs(n, sample_rate)
    gains = np.maximum(freqs, 20.0) ** (-alpha / 2.0)
    return _shaped(rng, n, gains)


def babble_noise(rng: np.random.Generator, n: int, sample_rate: int) -> np.ndarray:
    """Unit-RMS babble-like noise: speech-shaped noise under the summed syllable
    envelopes of 3-6 talkers."""
    freqs = _freqs(n, sample_rate)
    # a band-pass "voice" spectrum with a random brightness
    low, high = rng.uniform(120, 250), rng.uniform(2500, 4500)
    gains = 1.0 / np.sqrt((1 + (low / np.maximum(freqs, 1.0)) ** 4) * (1 + (freqs / high) ** 4))
    carrier = _shaped(rng, n, gains)
    # each talker: low-passed noise at 100 frames/s, rectified, at a syllable rate of 2-7 Hz
    frames = n // 160 + 2
    envelope = np.zeros(frames)
    for _ in range(int(rng.integers(3, 7))):
        rate = rng.uniform(2.0, 7.0)
        talker = _shaped(rng, frames, np.exp(-0.5 * (_freqs(frames, 100.0) / rate) ** 2))
        envelope += np.maximum(talker + rng.uniform(-0.3, 0.5), 0.0)
    total = carrier * np.interp(np.arange(n) / 160.0, np.arange(frames), envelope)
    return total / (np.sqrt(np.mean(total**2)) + 1e-12)


def speech_power(audio: np.ndarray, sample_rate: int) -> float:
    """Mean power over the 20 ms frames within 40 dB of the loudest (pauses do not count)."""
    frame = sample_rate // 50
    usable = len(audio) // frame * frame
    if usable == 0:
        return float(np.mean(audio**2))
    energies = np.mean(audio[:usable].reshape(-1, frame) ** 2, axis=1)
    active = energies[energies >= energies.max() * 1e-4]
    return float(np.mean(active))


def add_noise(
    rng: np.random.Generator, audio: np.ndarray, sample_rate: int, snr_db: float
) -> np.ndarray:
    """``audio`` plus colored or babble-like noise at ``snr_db`` relative to the speech."""
    make = colored_noise if rng.random() < 0.5 else babble_noise
    noise = make(rng, len(audio), sample_rate)
    scale = np.sqrt(speech_power(audio, sample_rate) / 10.0 ** (snr_db / 10.0))
    return audio + scale * noise
