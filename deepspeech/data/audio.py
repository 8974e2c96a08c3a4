"""Audio loading: any format soundfile reads, any rate, mono, resampled to the model rate.

soundfile (libsndfile) reads WAV, FLAC, OGG, MP3 and NIST SPHERE without FFmpeg.
Every failure names the file, so that a bad clip in a million-line manifest is
found in seconds. A WAV or SPHERE file cut off mid-body (an interrupted copy) is
refused, not read in part: libsndfile takes its length from the file size, so only
the header tells what is missing (``cut_off``, which ``deepspeech data check`` uses too).
"""

from __future__ import annotations

import functools
import math
import os
import re

import numpy as np
import soundfile as sf
import torch
import torchaudio.functional as AF

from deepspeech.errors import AudioError

AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".oga", ".opus", ".mp3", ".sph", ".nist", ".aiff",
                  ".aif", ".aifc", ".au", ".snd", ".caf", ".w64", ".rf64")
"""File name endings (lower case) of the formats soundfile reads: how a folder's audio files
are told from the rest."""
TRUNCATION_TOLERANCE = (0.05, 0.01)  # seconds, fraction: the larger of the two may be missing


def audio_info(path: str | os.PathLike) -> tuple[int, int]:
    """``(frames, sample_rate)`` from the header, without decoding the samples."""
    try:
        info = sf.info(str(path))
    except FileNotFoundError:
        raise AudioError(f"{path}: audio file missing") from None
    except (sf.LibsndfileError, RuntimeError, OSError) as exc:
        raise AudioError(f"{path}: unreadable audio ({exc})") from None
    return info.frames, info.samplerate


def load_audio(
    path: str | os.PathLike,
    sample_rate: int,
    offset: float | None = None,
    duration: float | None = None,
) -> torch.Tensor:
    """Mono float32 samples in [-1, 1] at ``sample_rate``; optional offset/duration in seconds."""
    path = str(path)
    if os.path.isdir(path):
        raise AudioError(f"{path}: a folder, not an audio file")
    if not os.path.isfile(path):
        raise AudioError(f"{path}: audio file missing")
    if os.path.getsize(path) == 0:  # libsndfile would only say "format not recognised"
        raise AudioError(f"{path}: empty file (0 bytes)")
    try:
        with sf.SoundFile(path) as handle:
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
    """Band-limited resampling (torchaudio's windowed sinc), a no-op when rates agree."""
    if from_rate == to_rate:
        return samples
    up, down = _reduced_ratio(from_rate, to_rate)
    return AF.resample(samples, down, up)


@functools.lru_cache(maxsize=64)
def _reduced_ratio(from_rate: int, to_rate: int) -> tuple[int, int]:
    # torchaudio's kernel size grows with the rates themselves; reducing by the gcd
    # keeps 44.1 kHz -> 16 kHz as cheap as 441 -> 160.
    divisor = math.gcd(from_rate, to_rate)
    return to_rate // divisor, from_rate // divisor
