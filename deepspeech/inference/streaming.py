"""Streaming transcription: audio in chunks, partial text out, the offline text at the end.

A unidirectional DeepSpeech2 (with a lookahead convolution for future context)
can emit text while audio still arrives. Three stages carry state between chunks:

* ``StreamingFeatures`` (``deepspeech.features.streaming``) frames the STFT across
  chunk boundaries: every frame is the offline extractor's frame, computed as soon as
  its last sample arrives. Normalization must be ``global`` or ``none``.
* the model's ``StreamState`` (conv context, RNN hidden states, lookahead frames),
  advanced by ``DeepSpeech2.stream_step``.
* the partial text: greedy, extended frame by frame (argmax, merge repeats, drop
  blanks). The final text, and its words with their times and confidences, are
  decoded once from all log-probs with the checkpoint's decoder (greedy, or beam
  search with an LM), as offline.

Latency has two parts. The algorithmic latency is the audio an output frame needs
beyond its own start before it is final: the STFT window's second half, the
convolutions' future context and the lookahead frames (``algorithmic_latency_s``).
The compute latency is the time spent on each chunk, measured here; chunks are
fed as fast as they are computed (simulated real time, no sleeping).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from deepspeech.data.audio import load_audio
from deepspeech.errors import ConfigError, naming_audio_file
from deepspeech.features import StreamingFeatures
from deepspeech.inference.recognizer import Recognizer
from deepspeech.inference.transcribe import Transcript, transcript_words
from deepspeech.model import StreamState
from deepspeech.model.layers import future_frames, time_stride


@dataclass
class ChunkResult:
    """What one chunk produced: the partial text so far and what it cost."""

    index: int
    audio_seconds: float  # audio received so far
    final_seconds: float  # audio covered by final output frames
    text: str
    compute_ms: float
    final: bool


@dataclass
class StreamResult:
    """A streamed file: the final transcript, every chunk, and latency figures."""

    transcript: Transcript
    log_probs: torch.Tensor
    chunks: list[ChunkResult] = field(default_factory=list)
    chunk_ms: float = 0.0
    algorithmic_latency_ms: float = 0.0

    def latency(self) -> dict:
        """Per-chunk compute latency (mean, p95, max ms), algorithmic latency, real-time factor."""
        times = sorted(chunk.compute_ms for chunk in self.chunks)
        p95 = times[min(len(times) - 1, math.ceil(0.95 * len(times)) - 1)] if times else 0.0
        total_s = sum(times) / 1000.0
        return {"chunks": len(times), "chunk_ms": self.chunk_ms,
                "compute_ms_mean": round(sum(times) / max(len(times), 1), 3),
                "compute_ms_p95": round(p95, 3),
                "compute_ms_max": round(times[-1] if times else 0.0, 3),
                "algorithmic_latency_ms": round(self.algorithmic_latency_ms, 3),
                "real_time_factor": round(total_s / max(self.transcript.duration, 1e-9), 5)}


class StreamingRecognizer:
    """One stream at a time through a ``Recognizer``: ``accept`` chunks, then ``finish``."""

    def __init__(self, recognizer: Recognizer) -> None:
        model_config = recognizer.config.model
        if model_config.rnn.bidirectional:
            raise ConfigError(
                "streaming needs a unidirectional model; this checkpoint's RNN is "
                "bidirectional (train with model.rnn.bidirectional=false and "
                "model.rnn.lookahead=N for future context)")
        if recognizer.config.decode.vtln_enabled:
            raise ConfigError(
                "streaming cannot use decode.vtln: the warp is chosen on the whole "
                "utterance's output; set decode.vtln=[1.0,1.0]")
        self.recognizer = recognizer
        self.features = StreamingFeatures(recognizer.extractor)
        self.state: StreamState = recognizer.model.init_stream()
        self._log_probs: list[torch.Tensor] = []
        self._frames_out = 0
        self._last = recognizer.vocabulary.blank  # the class of the previous output frame
        self._characters: list[str] = []

    @property
    def sample_rate(self) -> int:
        return self.recognizer.extractor.sample_rate

    def latency_samples(self) -> int:
        """Samples an output frame needs beyond its own start (at ``stride * hop``) to be final.

        Output frame j reads conv frame ``j + lookahead``, which reads feature frames
        up to ``future_frames`` past its start; feature frame i reads samples up to
        ``i * hop - n_fft // 2 + n_fft - 1``.
        """
        config = self.recognizer.config.model
        extractor = self.recognizer.extractor
        frames = time_stride(config.conv) * config.rnn.lookahead + future_frames(config.conv)
        return frames * extractor.hop_length + extractor.n_fft - self.features.pad

    def algorithmic_latency_s(self) -> float:
        """Seconds of audio an output frame needs beyond its own start."""
        return self.latency_samples() / self.sample_rate

    def final_frames_after(self, samples: int) -> int:
        """Output frames that are final once ``samples`` samples have arrived (stream open)."""
        # The start padding mirrors sample pad, so nothing is final before pad + 1 samples.
        if samples <= self.features.pad or samples < self.latency_samples():
            return 0
        conv = self.recognizer.config.model.conv
        step = time_stride(conv) * self.recognizer.extractor.hop_length
        return (samples - self.latency_samples()) // step + 1

    def accept(self, samples: torch.Tensor, final: bool = False) -> torch.Tensor:
        """Feed samples; return the new final log-probs ``[t', C]`` (may be empty)."""
        features = self.features.accept(samples, final)
        model = self.recognizer.model
        if features.shape[1] == 0 and not final:
            return torch.zeros(0, model.num_classes)
        device = self.recognizer.device
        with torch.inference_mode():
            log_probs, self.state = model.stream_step(features.unsqueeze(0).to(device),
                                                      self.state, final)
        log_probs = log_probs[0].float().cpu()
        self._extend_text(log_probs)
        self._log_probs.append(log_probs)
        self._frames_out += log_probs.shape[0]
        return log_probs

    def _extend_text(self, log_probs: torch.Tensor) -> None:
        """Greedy CTC on new frames: a non-blank class unlike the last one starts a character."""
        vocabulary = self.recognizer.vocabulary
        for cls in log_probs.argmax(dim=1).tolist():
            if cls != vocabulary.blank and cls != self._last:
                self._characters.append(vocabulary.characters[cls - 1])
            self._last = cls

    @property
    def partial_text(self) -> str:
        """Greedy text of the frames that are final so far (spaces collapsed, as offline)."""
        text = "".join(self._characters)
        return " ".join(w for w in text.split(" ") if w) if " " in text else text

    @property
    def frames_out(self) -> int:
        return self._frames_out

    def log_probs(self) -> torch.Tensor:
        """All log-probs emitted so far, ``[T', C]``."""
        if not self._log_probs:
            return torch.zeros(0, self.recognizer.model.num_classes)
        return torch.cat(self._log_probs)

    def final_text(self) -> str:
        """The checkpoint's decoder (greedy or beam) on every frame: the offline text."""
        log_probs = self.log_probs()
        return self.recognizer.decode(log_probs.unsqueeze(0), torch.tensor([log_probs.shape[0]]))[0]


def stream_waveform(recognizer: Recognizer, waveform: torch.Tensor, chunk_ms: float = 200.0,
                    path: str = "<waveform>",
                    on_chunk: Callable[[ChunkResult], None] | None = None,
                    warmup: bool = True) -> StreamResult:
    """Feed a waveform chunk by chunk as if it arrived live; time each chunk."""
    if chunk_ms <= 0:
        raise ConfigError(f"the chunk length must be positive, got {chunk_ms} ms")
    stream = StreamingRecognizer(recognizer)
    rate = stream.sample_rate
    size = max(1, round(chunk_ms * rate / 1000))
    if warmup:  # first calls of each shape pay for lazy setup (kernels, the LM): not latency
        warm = StreamingRecognizer(recognizer)
        for final in (False, False, True):
            warm.accept(torch.zeros(max(size, 2 * recognizer.extractor.n_fft)), final)
        warm.final_text()
    frame_s = recognizer.frame_seconds()
    starts = list(range(0, waveform.numel(), size)) or [0]
    chunks: list[ChunkResult] = []
    for index, start in enumerate(starts):
        final = index == len(starts) - 1
        begin = time.perf_counter()
        stream.accept(waveform[start:start + size], final=final)
        text = stream.final_text() if final else stream.partial_text
        compute_ms = 1000 * (time.perf_counter() - begin)
        received = min(start + size, waveform.numel()) / rate
        chunk = ChunkResult(index, received, stream.frames_out * frame_s, text, compute_ms,
                            final)
        chunks.append(chunk)
        if on_chunk is not None:
            on_chunk(chunk)
    log_probs = stream.log_probs()
    _, words, confidence = transcript_words(recognizer, log_probs)
    transcript = Transcript(path=path, text=chunks[-1].text, duration=waveform.numel() / rate,
                            words=words, confidence=confidence)
    return StreamResult(transcript, log_probs, chunks, chunk_ms,
                        1000 * stream.algorithmic_latency_s())


def stream_file(recognizer: Recognizer, path: str, chunk_ms: float = 200.0,
                on_chunk: Callable[[ChunkResult], None] | None = None) -> StreamResult:
    """Read an audio file (any rate, any channels) and stream it in ``chunk_ms`` chunks."""
    waveform = load_audio(path, recognizer.extractor.sample_rate)
    with naming_audio_file(path):
        return stream_waveform(recognizer, waveform, chunk_ms, str(path), on_chunk)
