"""Transcribe audio files of any length, rate and channel count with a checkpoint.

Long recordings are cut into overlapping windows (the bidirectional RNN needs
context on both sides, and memory grows with length). Each window contributes
only the frames of its centre; the halves of each overlap go to the neighbours,
so every output frame was computed with at least ``overlap / 2`` of context on
either side. The stitched log-probabilities are decoded once, as a whole, and
word times come from the CTC frames. With ``decode.vtln`` each window is run at each
warp factor and keeps the output that best explains its own transcript
(``deepspeech.decoding.vtln``), so a long recording of several speakers gets a warp for
each stretch. Each word, and the whole transcript, comes with a confidence in [0, 1]
(``deepspeech.decoding.confidence``): from the greedy path or from the beam search's
words, as ``decode.mode`` says.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from deepspeech.data.audio import load_audio
from deepspeech.decoding.confidence import utterance_confidence
from deepspeech.decoding.vtln import transcript_log_likelihood, warp_factors
from deepspeech.errors import naming_audio_file
from deepspeech.inference.recognizer import Recognizer


@dataclass
class Word:
    """A word with its start and end time in seconds and the model's confidence in it."""

    word: str
    start: float
    end: float
    confidence: float | None = None


@dataclass
class Transcript:
    """What ``deepspeech transcribe`` prints for one file."""

    path: str
    text: str
    duration: float
    words: list[Word] = field(default_factory=list)
    confidence: float | None = None  # that every word is right (decoding.confidence)

    def to_dict(self) -> dict:
        return {"audio_filepath": self.path, "text": self.text,
                "duration": round(self.duration, 3), **_rounded(self.confidence),
                "words": [{"word": w.word, "start": round(w.start, 3), "end": round(w.end, 3),
                           **_rounded(w.confidence)} for w in self.words]}


def _rounded(confidence: float | None) -> dict:
    return {} if confidence is None else {"confidence": round(confidence, 4)}


def transcript_words(recognizer: Recognizer, log_probs: torch.Tensor
                     ) -> tuple[str, list[Word], float]:
    """Text, timed words with their confidences, and the utterance's confidence, of one
    utterance's ``[frames, classes]`` log-probs."""
    ((text, segments),) = recognizer.decode_words(log_probs[None],
                                                  torch.tensor([log_probs.shape[0]]))
    frame_s = recognizer.frame_seconds()
    words = [Word(s.word, s.start * frame_s, s.end * frame_s, s.confidence) for s in segments]
    confidence = utterance_confidence([s.confidence for s in segments], log_probs,
                                      recognizer.vocabulary)
    return text, words, confidence


def window_log_probs(recognizer: Recognizer, waveform: torch.Tensor, window_s: float,
                     overlap_s: float, warps: Sequence[float] = (1.0,)) -> torch.Tensor:
    """Log-probabilities ``[T', C]`` of a whole waveform, computed window by window, each
    window at the one of ``warps`` that best explains its own transcript."""
    rate = recognizer.extractor.sample_rate
    frame_s = recognizer.frame_seconds()
    window, overlap = round(window_s * rate), round(overlap_s * rate)
    if waveform.numel() <= window:
        return _best_warp(recognizer, waveform, warps)
    hop = window - overlap
    starts = list(range(0, waveform.numel() - overlap, hop))
    pieces = []
    for number, start in enumerate(starts):
        chunk = waveform[start:start + window]
        log_probs = _best_warp(recognizer, chunk, warps)
        # Keep output frames whose time lies in this window's share of the audio.
        keep_from = 0.0 if number == 0 else overlap / 2 / rate
        last = number == len(starts) - 1
        keep_to = math.inf if last else (window - overlap / 2) / rate
        times = torch.arange(log_probs.shape[0]) * frame_s
        pieces.append(log_probs[(times >= keep_from) & (times < keep_to)])
    return torch.cat(pieces)


def _best_warp(recognizer: Recognizer, waveform: torch.Tensor,
                    warps: Sequence[float]) -> torch.Tensor:
    outputs = [_log_probs(recognizer, waveform, warp) for warp in warps]
    if len(outputs) == 1:  # nothing to choose: no CTC pass
        return outputs[0]
    return max(outputs, key=lambda out: float(
        transcript_log_likelihood(out[None], torch.tensor([len(out)]))))


def _log_probs(recognizer: Recognizer, waveform: torch.Tensor, warp: float) -> torch.Tensor:
    features = recognizer.extractor(waveform, warp)
    lengths = torch.tensor([features.shape[1]])
    log_probs, out_lengths = recognizer.log_probs(features.unsqueeze(0), lengths)
    return log_probs[0, : int(out_lengths[0])]


def transcribe_file(recognizer: Recognizer, path: str, window_s: float = 20.0,
                    overlap_s: float = 2.0) -> Transcript:
    """Text and word times for one audio file (any format soundfile reads)."""
    if overlap_s >= window_s:
        raise ValueError("the overlap must be shorter than the window")
    waveform = load_audio(path, recognizer.extractor.sample_rate)
    with naming_audio_file(path):
        log_probs = window_log_probs(recognizer, waveform, window_s, overlap_s,
                                     warp_factors(recognizer.config.decode))
    text, words, confidence = transcript_words(recognizer, log_probs)
    duration = waveform.numel() / recognizer.extractor.sample_rate
    return Transcript(path=str(path), text=text, duration=duration, words=words,
                      confidence=confidence)
