"""Live transcription for ``deepspeech serve``'s WebSocket: PCM chunks in, partial text out.

A ``LiveSession`` holds one stream's state. Its methods run in the server's thread
pool, one call at a time per session; the server feeds it whatever arrived since the
last call (chunks coalesce while the model works, so a slow model falls behind by at
most one call, not by a growing queue). Partials come one of two ways, chosen once per
model (``live_mode``):

* ``chunks``: a unidirectional model (with ``features.normalize`` global or none) runs
  ``StreamingRecognizer``: the partial is the greedy text of the output frames that are
  final so far, each computed once.
* ``window``: a bidirectional RNN reads the future too, so nothing is final before the
  end. Every ``every_s`` of new audio the open window (at most ``window_s`` of the latest
  audio) is decoded again, greedily. When the window outgrows ``window_s``, the words
  that end in its first half are committed to the text and the window restarts between
  the last of them and the next word, so the cost of a partial stays bounded.

The final transcript of either path is the offline one, ``transcribe_file`` on all the
audio received, as ``POST /transcribe`` gives it (word times and confidences included).
The client's rate need not be the model's: ``ChunkResampler`` resamples chunk by chunk
to the samples that resampling the whole stream gives.
"""

from __future__ import annotations

import math
import os
import tempfile

import numpy as np
import soundfile as sf
import torch
import torchaudio.functional as AF

from deepspeech.data.audio import filter_width, polyphase_fits, resample_span, resampled_length
from deepspeech.decoding.greedy import greedy_decode, greedy_word_segments
from deepspeech.errors import ClientError, ConfigError, DeepSpeechError
from deepspeech.inference.limits import LiveSettings
from deepspeech.inference.recognizer import Recognizer
from deepspeech.inference.streaming import StreamingRecognizer
from deepspeech.inference.transcribe import transcribe_file, window_log_probs


def live_mode(recognizer: Recognizer) -> tuple[str, str]:
    """``("chunks" | "window", why)``: how this model makes partial results."""
    try:
        StreamingRecognizer(recognizer)
    except ConfigError as exc:
        return "window", str(exc)
    return "chunks", "a unidirectional model: streaming inference"


def transcript_json(transcript) -> dict:
    """A ``Transcript`` as the server sends it: its ``to_dict`` with ``confidence`` on the
    utterance and on every word (null where the model's transcript has none)."""
    result = transcript.to_dict()
    result.pop("audio_filepath", None)
    result.setdefault("confidence", getattr(transcript, "confidence", None))
    for word in result.get("words", []):
        word.setdefault("confidence", None)
    return result


def transcribe_waveform(recognizer: Recognizer, waveform: torch.Tensor) -> dict:
    """The offline transcript of samples at the model's rate, as ``transcript_json``.

    Through a float WAV file (read back bit for bit) so that it is exactly what
    ``transcribe_file`` gives for a file.
    """
    handle, path = tempfile.mkstemp(suffix=".wav", prefix="deepspeech-live-")
    os.close(handle)
    try:
        sf.write(path, waveform.numpy(), recognizer.extractor.sample_rate, subtype="FLOAT")
        try:
            return transcript_json(transcribe_file(recognizer, path))
        except DeepSpeechError as exc:
            raise type(exc)(str(exc).replace(f"{path}: ", "")) from None
    finally:
        os.unlink(path)


class ChunkResampler:
    """Resample a stream chunk by chunk: each output sample is emitted once enough input
    follows it for the sinc kernel (``margin``), computed from input around it, so the
    result equals ``resample`` of the whole stream (to rounding) wherever that needs no
    ``decimation`` first (every stream rate the server takes). A pair of rates whose
    torchaudio kernel is too large (``polyphase_fits``) computes just the new outputs."""

    def __init__(self, from_rate: int, to_rate: int) -> None:
        divisor = math.gcd(from_rate, to_rate)
        self.down, self.up = from_rate // divisor, to_rate // divisor
        self.polyphase = polyphase_fits(from_rate, to_rate)
        self.margin = filter_width(from_rate, to_rate) + 2
        self._buffer = torch.zeros(0)
        self._base = 0  # input index of the buffer's first sample (a multiple of ``down``
        # for torchaudio, whose output frames start there)
        self._emitted = 0  # output samples emitted

    def accept(self, samples: torch.Tensor, final: bool = False) -> torch.Tensor:
        """More input samples; the output samples that are now known."""
        if self.up == self.down:
            return samples
        self._buffer = torch.cat([self._buffer, samples])
        total = self._base + self._buffer.numel()
        if final:
            ready = resampled_length(total, self.down, self.up)
        else:
            ready = max(0, (total - self.margin) * self.up // self.down)
        if ready <= self._emitted or self._buffer.numel() == 0:
            return torch.zeros(0)
        if self.polyphase:
            out = AF.resample(self._buffer, self.down, self.up)
            offset = self._base * self.up // self.down
            piece = out[self._emitted - offset:ready - offset]
        else:
            piece = resample_span(self._buffer, self.down, self.up, self._emitted, ready,
                                  offset=self._base)
        self._emitted = ready
        # Keep the input that later outputs need: from ``margin`` before the next one.
        keep_from = self._emitted * self.down // self.up - self.margin
        if self.polyphase:
            keep_from = keep_from // self.down * self.down
        if keep_from > self._base:
            self._buffer = self._buffer[keep_from - self._base:]
            self._base = keep_from
        return piece


class LiveSession:
    """One WebSocket stream: 16-bit PCM at ``rate`` in, partial and final transcripts out."""

    def __init__(self, recognizer: Recognizer, rate: int, mode: str,
                 settings: LiveSettings | None = None) -> None:
        self.recognizer = recognizer
        self.mode = mode
        self.settings = settings or LiveSettings()
        self.model_rate = recognizer.extractor.sample_rate
        self.resampler = ChunkResampler(rate, self.model_rate)
        self.stream = StreamingRecognizer(recognizer) if mode == "chunks" else None
        self._pieces: list[torch.Tensor] = []  # all audio at the model's rate, for the final
        self.samples = 0  # at the model's rate
        self._window = torch.zeros(0)  # the window path's open window
        self._window_start = 0  # its first sample
        self._committed: list[str] = []
        self._decoded_at = 0
        self._partial = ""

    @property
    def audio_seconds(self) -> float:
        return self.samples / self.model_rate

    def feed(self, pcm: bytes) -> dict | None:
        """Take 16-bit little-endian PCM; a partial result, or None when nothing is new."""
        samples = torch.from_numpy(np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0)
        samples = self.resampler.accept(samples)
        if samples.numel() == 0:
            return None
        self._pieces.append(samples)
        self.samples += samples.numel()
        if self.stream is not None:
            self.stream.accept(samples)
            text = self.stream.partial_text
        else:
            self._window = torch.cat([self._window, samples])
            if self.samples - self._decoded_at < self.settings.every_s * self.model_rate:
                return None
            text = self._window_partial()
        self._partial = text
        return {"type": "partial", "text": text, "audio_s": round(self.audio_seconds, 3)}

    def _window_partial(self) -> str:
        self._decoded_at = self.samples
        if self._window.numel() < self.recognizer.extractor.min_samples:
            return " ".join(self._committed)
        recognizer = self.recognizer
        whole = self._window.numel() / self.model_rate + 1.0  # one window: no cutting
        log_probs = window_log_probs(recognizer, self._window, whole, 0.0)
        text = greedy_decode(log_probs[None], torch.tensor([log_probs.shape[0]]),
                             recognizer.vocabulary)[0]
        words = [text] if text else []
        if self._window.numel() > self.settings.window_s * self.model_rate:
            words = self._slide(log_probs, text)
        return " ".join([*self._committed, *words])

    def _slide(self, log_probs: torch.Tensor, text: str) -> list[str]:
        """Commit the words that end in the window's first half; restart the window after
        them. Returns the open window's words."""
        frame = self.recognizer.frame_seconds() * self.model_rate  # samples per output frame
        half = self._window.numel() / 2
        segments = greedy_word_segments(log_probs, self.recognizer.vocabulary)
        done = [s for s in segments if s.end * frame <= half]
        if done:
            rest = segments[len(done):]
            cut_frame = (done[-1].end + rest[0].start) / 2 if rest else done[-1].end
            cut = round(cut_frame * frame)
            self._committed.extend(s.word for s in done)
        else:  # no word ends there (one long noise): drop the first half unheard
            rest, cut = segments, round(half)
        self._window = self._window[cut:]
        self._window_start += cut
        return [s.word for s in rest if s.start * frame >= cut]

    def finish(self) -> dict:
        """The offline transcript of everything received: the final result."""
        tail = self.resampler.accept(torch.zeros(0), final=True)
        if tail.numel():
            self._pieces.append(tail)
            self.samples += tail.numel()
        if not self.samples:
            raise ClientError(422, "no audio received before the end of the stream")
        result = transcribe_waveform(self.recognizer, torch.cat(self._pieces))
        return {"type": "final", **result, "audio_s": round(self.audio_seconds, 3)}
