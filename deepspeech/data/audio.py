"""Audio loading: any format soundfile reads, any rate, mono, resampled to the model rate.

soundfile (libsndfile) reads WAV, FLAC, OGG, MP3 and NIST SPHERE without FFmpeg.
Every failure names the file, so that a bad clip in a million-line manifest is
found in seconds. A WAV or SPHERE file cut off mid-body (an interrupted copy) is
refused, not read in part: libsndfile takes its length from the file size, so only
the header tells what is missing (``cut_off``, which ``deepspeech data check`` uses too).
A path that names a shard member (``deepspeech.data.shards``) is read the same way, from
its bytes, read with one ``pread`` from a shard this process keeps open.

Resampling is torchaudio's windowed sinc at the exact ratio. torchaudio builds one filter
row per output phase, each as wide as the reduced input step, so its kernel grows with the
product of the gcd-reduced rates: 44.1 kHz -> 16 kHz is 160 x 475 taps, but 47,999 Hz ->
16 kHz is 16,000 x 48,037 (a minute and 13 GB). Pairs whose kernel stays under
``POLYPHASE_TAPS`` (every pair of the usual rates) keep torchaudio's result bit for bit;
any other pair gets the same filter applied to each output sample's own taps only
(``resample_span``: 2 x 20 + 1 taps for 47,999 Hz -> 16 kHz), whose cost grows with the
samples in and out, not with the rates; far above the target rate, after an integer
decimation (``decimation``).
"""

from __future__ import annotations

import functools
import io
import math
import os
import re

import numpy as np
import soundfile as sf
import torch
import torchaudio.functional as AF

from deepspeech.data.shards import member_file, member_ref, read_member
from deepspeech.errors import AudioError

AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".oga", ".opus", ".mp3", ".sph", ".nist", ".aiff",
                  ".aif", ".aifc", ".au", ".snd", ".caf", ".w64", ".rf64")
"""File name endings (lower case) of the formats soundfile reads: how a folder's audio files
are told from the rest."""
TRUNCATION_TOLERANCE = (0.05, 0.01)  # seconds, fraction: the larger of the two may be missing
# torchaudio's resampling filter (its defaults), which ``resample_span`` evaluates too: a
# Hann-windowed sinc over LOWPASS_ZEROS zero crossings, cut off at ROLLOFF of the lower
# rate's Nyquist frequency.
LOWPASS_ZEROS = 6
ROLLOFF = 0.99
POLYPHASE_TAPS = 1 << 20
"""Largest torchaudio kernel (phases x taps) that ``resample`` builds, and largest table of
phase taps that ``resample_span`` keeps (4 MB of float32, 8 MB of float64). The largest
pair of usual rates (8 to 48 kHz: 11,025 Hz -> 32 kHz) needs 582,400."""
MAX_DECIMATION = 65_536  # whose one-phase kernel (859,912 taps) fits POLYPHASE_TAPS
_SPAN_BLOCK = 1 << 16  # output samples x taps that ``resample_span`` computes at once


def audio_info(path: str | os.PathLike) -> tuple[int, int]:
    """``(frames, sample_rate)`` from the header, without decoding the samples."""
    ref = member_ref(path)
    # libsndfile 1.2 reports a missing file only as "System error".
    if ref is None and not os.path.lexists(path):
        raise AudioError(f"{path}: audio file missing")
    try:
        if ref is None:
            info = sf.info(str(path))
            return info.frames, info.samplerate
        with sf.SoundFile(member_file(ref)) as handle:
            return handle.frames, handle.samplerate
    except (sf.LibsndfileError, RuntimeError, OSError) as exc:
        raise AudioError(f"{path}: unreadable audio ({exc})") from None


def load_audio(
    path: str | os.PathLike,
    sample_rate: int,
    offset: float | None = None,
    duration: float | None = None,
) -> torch.Tensor:
    """Mono float32 samples in [-1, 1] at ``sample_rate``; optional offset/duration in seconds."""
    path = str(path)
    source = _source(path)
    try:
        with sf.SoundFile(source) as handle:
            native_rate = handle.samplerate
            missing = cut_off(path, handle.frames, native_rate, handle.format)
            if missing:
                raise AudioError(f"{path}: cut off: {missing} (an interrupted copy or "
                                 "download?)")
            start = round((offset or 0.0) * native_rate)
            if start:
                if start >= handle.frames:
                    length = handle.frames / native_rate
                    raise AudioError(f"{path}: offset {offset} s is past the end ({length:.3f} s)")
                handle.seek(start)
            frames = -1 if duration is None else round(duration * native_rate)
            samples = handle.read(frames, dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError) as exc:
        raise AudioError(f"{path}: unreadable audio ({exc})") from None
    if samples.shape[0] == 0:
        raise AudioError(f"{path}: no audio samples")
    mono = samples.mean(axis=1) if samples.shape[1] > 1 else samples[:, 0]
    if not np.isfinite(mono).all():
        raise AudioError(f"{path}: audio contains NaN or infinite samples")
    return resample(torch.from_numpy(np.ascontiguousarray(mono)), native_rate, sample_rate)


def _source(path: str) -> str | io.BytesIO:
    """What soundfile opens for ``path``: the file, or a shard member's bytes (one read)."""
    ref = member_ref(path)
    if ref is not None:
        data = read_member(ref)
    elif os.path.isdir(path):
        raise AudioError(f"{path}: a folder, not an audio file")
    elif not os.path.isfile(path):
        raise AudioError(f"{path}: audio file missing")
    elif os.path.getsize(path) != 0:
        return path
    else:
        data = b""
    if not data:  # libsndfile would only say "format not recognised"
        raise AudioError(f"{path}: empty file (0 bytes)")
    return io.BytesIO(data)


def cut_off(path: str | os.PathLike, frames: int, sample_rate: int, audio_format: str
            ) -> str | None:
    """What is missing when the file holds fewer ``frames`` than its header declares (beyond
    ``TRUNCATION_TOLERANCE``), else None; ``audio_format`` is soundfile's (``"WAV"``...)."""
    declared = declared_frames(path, audio_format)
    if declared is None or not falls_short(frames, declared, sample_rate):
        return None
    return (f"header declares {declared / sample_rate:.3f} s but the file holds "
            f"{frames / sample_rate:.3f} s")


def falls_short(actual: int, expected: int, rate: int) -> bool:
    """Whether ``actual`` frames miss more of ``expected`` than ``TRUNCATION_TOLERANCE``."""
    seconds, fraction = TRUNCATION_TOLERANCE
    return expected - actual > max(seconds * rate, fraction * expected)


def declared_frames(path: str | os.PathLike, audio_format: str) -> int | None:
    """Frames the header promises, for formats where libsndfile trusts the file size
    (WAV, NIST SPHERE); None for others, or a header that leaves the length open."""
    if audio_format not in ("WAV", "NIST"):
        return None
    ref = member_ref(path)
    if ref is not None:
        head = read_member(ref, 0, 1 << 16)
    else:
        with open(path, "rb") as handle:
            head = handle.read(1 << 16)
    if audio_format == "WAV" and head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        position, block_align = 12, 0
        while position + 8 <= len(head):
            chunk = head[position:position + 4]
            size = int.from_bytes(head[position + 4:position + 8], "little")
            if chunk == b"fmt " and position + 22 <= len(head):
                block_align = int.from_bytes(head[position + 20:position + 22], "little")
            if chunk == b"data":
                # 0 and 0xFFFFFFFF mark streams written without a known size.
                if block_align and 0 < size < 0xFFFFFFFF:
                    return size // block_align
                return None
            position += 8 + size + (size & 1)
    if audio_format == "NIST":
        match = re.search(rb"sample_count -i (\d+)", head[:1024])
        return int(match.group(1)) if match else None
    return None


def resample(samples: torch.Tensor, from_rate: int, to_rate: int) -> torch.Tensor:
    """Band-limited resampling at the exact ratio, a no-op when rates agree; about the same
    cost per sample for any pair of rates (module docstring)."""
    if from_rate == to_rate:
        return samples
    if polyphase_fits(from_rate, to_rate):
        up, down = _reduced_ratio(from_rate, to_rate)
        return AF.resample(samples, down, up)
    stop = resampled_length(samples.numel(), from_rate, to_rate)
    factor = decimation(from_rate, to_rate)
    if factor > 1:
        samples = AF.resample(samples, factor, 1)
    return resample_span(samples, from_rate, to_rate * factor, 0, stop)


def resampled_length(frames: int, from_rate: int, to_rate: int) -> int:
    """Output samples of resampling ``frames`` input samples (torchaudio's count)."""
    return -(-frames * to_rate // from_rate)


def polyphase_fits(from_rate: int, to_rate: int) -> bool:
    """Whether torchaudio's kernel for this pair stays under ``POLYPHASE_TAPS``."""
    up, down = _reduced_ratio(from_rate, to_rate)
    return up * (down + 2 * filter_width(from_rate, to_rate)) <= POLYPHASE_TAPS


def decimation(from_rate: int, to_rate: int) -> int:
    """The integer factor that ``resample`` first decimates by (torchaudio's kernel of one
    phase), 1 for none: only where neither torchaudio's kernel nor a table of phase taps
    fits, far above the target rate (10,000,001 Hz -> 16 kHz: 625), so that the taps left
    to evaluate per output are 17, not 7,581."""
    if polyphase_fits(from_rate, to_rate) or _phase_table_fits(from_rate, to_rate):
        return 1
    return min(from_rate // to_rate, MAX_DECIMATION)


def filter_width(from_rate: int, to_rate: int) -> int:
    """Input samples that the filter reaches on either side of an output sample
    (torchaudio's ``width``)."""
    up, down = _reduced_ratio(from_rate, to_rate)
    return math.ceil(LOWPASS_ZEROS * down / (ROLLOFF * min(up, down)))


def resample_span(samples: torch.Tensor, from_rate: int, to_rate: int, start: int, stop: int,
                  offset: int = 0) -> torch.Tensor:
    """Output samples ``start`` to ``stop`` of resampling a signal that holds ``samples``
    from input index ``offset`` on and zeros elsewhere: torchaudio's filter at each output's
    own taps (about 12 of the higher rate), so that work and memory grow with the samples,
    not with the rates. The taps of each output phase are computed once per pair of rates
    where they fit in ``POLYPHASE_TAPS``, else for each output."""
    up, down = _reduced_ratio(from_rate, to_rate)
    if stop <= start:
        return samples.new_zeros(0)
    reach = _reach(from_rate, to_rate)
    taps = 2 * reach + 1
    bank = _phase_taps(up, down, reach) if _phase_table_fits(from_rate, to_rate) else None
    # The inputs these outputs reach (zeros outside ``samples``) as overlapping windows.
    low, high = start * down // up - reach, (stop - 1) * down // up + reach + 1
    signal = torch.zeros(high - low, dtype=torch.float64)
    begin, end = max(low, offset), min(high, offset + samples.numel())
    if begin < end:
        signal[begin - low:end - low] = samples[begin - offset:end - offset]
    windows = signal.unfold(0, taps, 1)
    # Written in place: a small result kept from each block would pin glibc's heap above
    # the block's freed temporaries, and the process would grow with every block.
    out = torch.empty(stop - start, dtype=torch.float64)
    rows = max(1, _SPAN_BLOCK // taps)
    for first in range(start, stop, rows):
        outputs = torch.arange(first, min(first + rows, stop))
        nearest = torch.div(outputs * down, up, rounding_mode="floor")
        weights = bank[outputs % up] if bank is not None else _filter(outputs, nearest, reach,
                                                                        up, down)
        torch.sum(windows[nearest - reach - low] * weights, dim=1,
                  out=out[first - start:first - start + outputs.numel()])
    return out.to(samples.dtype)


def _reach(from_rate: int, to_rate: int) -> int:
    # Input samples read on either side of an output's nearest one: one more than the
    # filter's width, as the output falls between two inputs.
    return filter_width(from_rate, to_rate) + 1


def _phase_table_fits(from_rate: int, to_rate: int) -> bool:
    up, _ = _reduced_ratio(from_rate, to_rate)
    return up * (2 * _reach(from_rate, to_rate) + 1) <= POLYPHASE_TAPS


def _filter(outputs: torch.Tensor, nearest: torch.Tensor, reach: int, up: int, down: int
            ) -> torch.Tensor:
    """``[outputs, 2 reach + 1]``: torchaudio's filter (gcd-reduced rates ``up``/``down``)
    between each output sample and the inputs within ``reach`` of its ``nearest``."""
    inputs = nearest[:, None] + torch.arange(-reach, reach + 1)
    cutoff = ROLLOFF * min(up, down)
    # Exact integers, then one rounding: the time from output to input times the cutoff,
    # in zero crossings of the sinc.
    t = (inputs * up - outputs[:, None] * down).to(torch.float64) * (cutoff / (up * down))
    window = torch.cos(t * (math.pi / (2 * LOWPASS_ZEROS))) ** 2
    return torch.where(t.abs() < LOWPASS_ZEROS, torch.sinc(t) * window, 0.0) * (cutoff / down)


@functools.lru_cache(maxsize=4)
def _phase_taps(up: int, down: int, reach: int) -> torch.Tensor:
    # Output k's taps depend only on k mod up: the input grid repeats every ``down``.
    blocks = torch.arange(up).split(max(1, _SPAN_BLOCK // (2 * reach + 1)))
    return torch.cat([_filter(phases, torch.div(phases * down, up, rounding_mode="floor"),
                              reach, up, down) for phases in blocks])


@functools.lru_cache(maxsize=64)
def _reduced_ratio(from_rate: int, to_rate: int) -> tuple[int, int]:
    # torchaudio's kernel size grows with the rates themselves; reducing by the gcd
    # keeps 44.1 kHz -> 16 kHz as cheap as 441 -> 160.
    if min(from_rate, to_rate) <= 0:
        raise ValueError(f"sample rates must be positive, not {from_rate} -> {to_rate} Hz")
    divisor = math.gcd(from_rate, to_rate)
    return to_rate // divisor, from_rate // divisor
