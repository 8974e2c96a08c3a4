"""``deepspeech bench decode``: real-time factor of greedy and beam search decoding.

Decoding is timed alone, on synthetic CTC outputs shaped like a Deep Speech 2
model's: 100 feature frames per second, stride 2 in time, so 50 output frames
per second of audio, over the English characters. Each utterance spells random
words (from the LM's vocabulary) with a few frames per character and blanks in
between; the right class gets most of the probability and noise spreads the rest,
so the beam has real competitors to prune. Without ``--lm``, a 3-gram model is
built from a random corpus over a random vocabulary first.

RTF = decoding seconds / audio seconds (lower is better; 1 is real time).
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from deepspeech.arguments import (
    finite_float,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
)
from deepspeech.config import DecodeConfig
from deepspeech.data.text import Vocabulary
from deepspeech.decoding.beam import BeamSearchDecoder
from deepspeech.decoding.greedy import greedy_decode
from deepspeech.lm import BOS, EOS, UNK, build_lm, read_unigrams


@dataclass
class DecodeBenchResult:
    """Seconds spent and real-time factor of one decoder on the benchmark's audio."""

    name: str
    seconds: float
    audio_seconds: float

    @property
    def rtf(self) -> float:
        return self.seconds / self.audio_seconds


def random_words(count: int, rng: random.Random) -> list[str]:
    """Distinct pronounceable-looking words of 2-9 letters."""
    consonants, vowels = "bcdfghjklmnprstvwz", "aeiou"
    words: set[str] = set()
    while len(words) < count:
        length = rng.randint(2, 9)
        words.add("".join(rng.choice(vowels if i % 2 else consonants) for i in range(length)))
    return sorted(words)


def synthetic_log_probs(
    vocabulary: Vocabulary,
    words: list[str],
    frames: int,
    rng: random.Random,
    peak: float = 6.0,
) -> tuple[torch.Tensor, str]:
    """``[frames, classes]`` log-probs that spell random words, and the spelled text."""
    generator = torch.Generator().manual_seed(rng.randrange(2**31))
    target: list[int] = []
    spoken: list[str] = []
    while len(target) < frames:
        word = rng.choice(words)
        spoken.append(word)
        for ch in word + " ":
            (index,) = vocabulary.encode(ch)
            # CTC needs a blank between two equal letters ("ll"); elsewhere it is optional.
            target += [vocabulary.blank] * rng.randint(int(bool(target) and target[-1] == index), 2)
            target += [index] * rng.randint(1, 3)
    scores = torch.randn(frames, len(vocabulary), generator=generator)
    index = torch.tensor(target[:frames])
    scores[torch.arange(frames), index] += peak
    return torch.log_softmax(scores, dim=1), " ".join(spoken)


def _time(function, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - start)
    return best


def bench_decode(
    lm: str | None = None,
    utterances: int = 16,
    seconds: float = 10.0,
    frames_per_second: float = 50.0,
    beam: int = DecodeConfig.beam,
    lm_weight: float = 0.5,
    word_bonus: float = 1.0,
    repeats: int = 3,
    seed: int = 0,
    peak: float = 6.0,
    workdir: str | Path | None = None,
) -> list[DecodeBenchResult]:
    """Time greedy, beam without LM and beam + LM on the same synthetic batch (best of
    ``repeats``); ``peak`` is the right class's logit margin (lower: harder to decode)."""
    rng = random.Random(seed)
    vocabulary = Vocabulary.english()
    with tempfile.TemporaryDirectory(prefix="deepspeech-bench-") as tmp:
        if lm is None:
            words = random_words(2000, rng)
            corpus = Path(workdir or tmp) / "corpus.txt"
            corpus.write_text("\n".join(" ".join(rng.choices(words, k=rng.randint(3, 15)))
                                        for _ in range(20000)) + "\n", encoding="utf-8")
            lm = str(Path(workdir or tmp) / "bench.arpa")
            build_lm(corpus, lm, order=3)
        else:
            characters = set(vocabulary.characters)
            words = [w for w in read_unigrams(lm)
                     if w not in (BOS, EOS, UNK) and set(w) <= characters]
        frames = int(round(seconds * frames_per_second))
        batch = torch.stack([synthetic_log_probs(vocabulary, words, frames, rng, peak)[0]
                             for _ in range(utterances)])
        lengths = torch.full((utterances,), frames, dtype=torch.long)
        audio_seconds = utterances * frames / frames_per_second

        config = DecodeConfig(mode="beam", beam=beam, lm_weight=lm_weight, word_bonus=word_bonus)
        no_lm = BeamSearchDecoder(vocabulary, config)
        with_lm = BeamSearchDecoder(vocabulary, DecodeConfig(
            mode="beam", lm=lm, beam=beam, lm_weight=lm_weight, word_bonus=word_bonus))
        runs = {
            "greedy": lambda: greedy_decode(batch, lengths, vocabulary),
            f"beam {beam}, no LM": lambda: no_lm.decode(batch, lengths),
            f"beam {beam} + LM ({with_lm.mode})": lambda: with_lm.decode(batch, lengths),
        }
        return [DecodeBenchResult(name, _time(run, repeats), audio_seconds)
                for name, run in runs.items()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``deepspeech bench decode``."""
    parser.add_argument("--lm", help="ARPA model to decode with (default: build a random 3-gram)")
    parser.add_argument("--utterances", type=positive_int, default=16,
                        help="batch size (default: 16)")
    parser.add_argument("--seconds", type=positive_float, default=10.0,
                        help="audio seconds per utterance (default: 10)")
    parser.add_argument("--frames-per-second", type=positive_float, default=50.0,
                        help="model output frames per audio second (default: 50, i.e. 10 ms "
                             "hop and stride 2)")
    parser.add_argument("--beam", type=positive_int, default=DecodeConfig.beam,
                        help=f"beam size (default: {DecodeConfig.beam}, decode.beam's)")
    parser.add_argument("--lm-weight", type=finite_float, default=0.5)
    parser.add_argument("--word-bonus", type=finite_float, default=1.0)
    parser.add_argument("--repeats", type=positive_int, default=3, help="timed runs, best kept")
    parser.add_argument("--threads", type=non_negative_int, default=0,
                        help="torch intra-op threads (default: leave as is)")
    parser.add_argument("--peak", type=non_negative_float, default=6.0,
                        help="logit margin of the right class over noise (default: 6; "
                             "lower values make outputs less certain and the beam busier)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print results as JSON")


def run(args: argparse.Namespace) -> int:
    """Run the benchmark and print one line per decoder."""
    if args.threads:
        torch.set_num_threads(args.threads)
    results = bench_decode(lm=args.lm, utterances=args.utterances, seconds=args.seconds,
                           frames_per_second=args.frames_per_second, beam=args.beam,
                           lm_weight=args.lm_weight, word_bonus=args.word_bonus,
                           repeats=args.repeats, seed=args.seed, peak=args.peak)
    if args.json:
        print(json.dumps([{"decoder": r.name, "seconds": r.seconds,
                           "audio_seconds": r.audio_seconds, "rtf": r.rtf} for r in results]))
        return 0
    audio = results[0].audio_seconds
    print(f"decoding {args.utterances} x {args.seconds:g} s of synthetic CTC output "
          f"({args.frames_per_second:g} frames/s, {torch.get_num_threads()} threads): "
          f"{audio:g} s of audio")
    for result in results:
        print(f"  {result.name:<36} {result.seconds:8.3f} s   RTF {result.rtf:.5f}")
    return 0
