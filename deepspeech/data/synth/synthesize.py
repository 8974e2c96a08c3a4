"""``synthesize_corpus``: generated sentences, spoken by espeak-ng (and other engines), as a corpus.

For each split (train, dev, test) utterances are planned one by one: a sentence,
an engine (uniformly among the requested ones that have a voice in the split,
from a stream of its own, so that espeak-ng alone plans as it did before other
engines existed), a speaker (for espeak-ng a base voice + one of the split's
voice variants, else one of the split's voices) and its prosody (speaking rate,
pitch...), all drawn from random streams seeded by ``(seed, split, index)``.
Batches of ``BATCH`` planned utterances are spoken in fresh worker processes
(``batches.py``; espeak-ng and Piper keep state between utterances); the parent
trims the engine's silences, resamples its rate (espeak-ng: 22,050 Hz) to
16,000 Hz, pads, mixes in background noise and writes 16-bit audio, until the
split holds its share of ``hours``. The output is a function of the
options alone, not of the number of workers: the same seed gives byte-identical
manifests and audio.

Layout of the output folder::

    train.jsonl dev.jsonl test.jsonl      manifests, paths relative to the folder
    audio-<key>/{train,dev,test}/*.flac   <key>: a hash of the options

Interrupting never corrupts an existing corpus: audio goes to a hidden partial
folder that is renamed into place when complete, the manifests are replaced
atomically after that, and only then are the audio folders of the previous
corpus removed.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import random
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import soundfile
import torch
import torchaudio.transforms
from tqdm import tqdm

from deepspeech.data.manifest import Utterance, write_manifest
from deepspeech.data.synth import engines as synth_engines
from deepspeech.data.synth.batches import BATCH, Batches, PlannedUtterance
from deepspeech.data.synth.engine import pick
from deepspeech.data.synth.engines import DEFAULT_ENGINES
from deepspeech.data.synth.espeak import SynthesisError
from deepspeech.data.synth.mandarin import mandarin_sentence
from deepspeech.data.synth.noise import add_noise
from deepspeech.data.synth.sentences import english_sentence
from deepspeech.data.synth.voices import SPLITS, split_variants, split_voices, usable_variants

log = logging.getLogger(__name__)

SAMPLE_RATE = 16_000
FORMATS = {"flac": ("FLAC", "PCM_16"), "wav": ("WAV", "PCM_16")}
VERSION = 1  # bump when the same options start giving different audio
_MARKER = ".deepspeech-synth"
_SENTENCES = {"en": english_sentence, "cmn": mandarin_sentence}


@dataclass(frozen=True)
class SynthOptions:
    """Everything that determines the corpus (the worker count does not)."""

    hours: float = 1.0
    seed: int = 0
    language: str = "en"
    audio_format: str = "flac"
    noise_snr: tuple[float, float] | None = (10.0, 30.0)
    dev_fraction: float = 0.1
    test_fraction: float = 0.1
    rate_wpm: tuple[int, int] = (130, 200)
    # Sentences to speak, drawn at random (e.g. a real corpus's transcripts, so that
    # many synthetic voices say in-domain text); empty: generated sentences.
    sentences: tuple[str, ...] = ()
    engines: tuple[str, ...] = DEFAULT_ENGINES  # those installed of the requested ones

    def validate(self) -> None:
        """Raise ``SynthesisError`` naming the first bad option."""
        if not (isinstance(self.hours, (int, float)) and self.hours > 0 and self.hours <= 1000):
            raise SynthesisError(f"--hours must be > 0 and <= 1000, got {self.hours}")
        if self.language not in _SENTENCES:
            raise SynthesisError(
                f"unknown --language {self.language!r}: choose from {', '.join(_SENTENCES)}"
            )
        if self.audio_format not in FORMATS:
            raise SynthesisError(
                f"unknown --format {self.audio_format!r}: choose from {', '.join(FORMATS)}"
            )
        for name, value in (("dev", self.dev_fraction), ("test", self.test_fraction)):
            if not 0 <= value < 1:
                raise SynthesisError(f"--{name}-fraction must be in [0, 1), got {value}")
        if self.dev_fraction + self.test_fraction >= 1:
            raise SynthesisError(
                "--dev-fraction + --test-fraction must leave something for training, got "
                f"{self.dev_fraction} + {self.test_fraction}"
            )
        if self.noise_snr is not None:
            low, high = self.noise_snr
            if not -10 <= low <= high <= 100:
                raise SynthesisError(
                    f"--noise-snr must be LOW-HIGH dB with -10 <= LOW <= HIGH <= 100, "
                    f"got {low}-{high}"
                )
        if any(not sentence.strip() for sentence in self.sentences):
            raise SynthesisError("the sentences to speak must not be empty")
        low, high = self.rate_wpm
        if not 80 <= low <= high <= 450:
            raise SynthesisError(f"speaking rate must be within 80-450 wpm, got {low}-{high}")

    def key(self) -> str:
        """Short hash naming the audio folder of this corpus."""
        text = json.dumps({**self.record(), "version": VERSION, "batch": BATCH}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:10]

    def record(self) -> dict:
        """The options as recorded beside the audio and hashed into its folder's name.

        ``engines`` is left out when espeak-ng alone speaks, so that a corpus made
        before other engines existed keeps its folder name and bytes.
        """
        fields = asdict(self)
        if self.engines == DEFAULT_ENGINES:
            del fields["engines"]
        return fields

    def fraction(self, split: str) -> float:
        return {"train": 1 - self.dev_fraction - self.test_fraction,
                "dev": self.dev_fraction, "test": self.test_fraction}[split]


@dataclass
class SplitSummary:
    """What one split holds."""

    utterances: int = 0
    seconds: float = 0.0
    variants: set[str] = field(default_factory=set)
    speakers: set[str] = field(default_factory=set)
    engine_seconds: dict[str, float] = field(default_factory=dict)
    engine_speakers: dict[str, set[str]] = field(default_factory=dict)


@dataclass
class CorpusSummary:
    """The result of :func:`synthesize_corpus`, for the command's closing report."""

    output_dir: Path
    manifests: dict[str, Path]
    splits: dict[str, SplitSummary]
    wall_seconds: float

    @property
    def utterances(self) -> int:
        return sum(split.utterances for split in self.splits.values())

    @property
    def hours(self) -> float:
        return sum(split.seconds for split in self.splits.values()) / 3600

    def format(self) -> str:
        speed = self.hours * 3600 / max(self.wall_seconds, 1e-9)
        lines = [
            f"synthesized {self.utterances} utterances, {self.hours:.3f} h of audio in "
            f"{self.wall_seconds:.1f} s ({speed:.0f}x real time) -> {self.output_dir}"
        ]
        for name, split in self.splits.items():
            lines.append(
                f"  {name:5s} {split.utterances:6d} utterances {split.seconds / 3600:7.3f} h  "
                f"{len(split.variants):3d} voice variants {len(split.speakers):4d} speakers  "
                f"-> {self.manifests[name].name}"
            )
        seconds: dict[str, float] = {}
        speakers: dict[str, set[str]] = {}
        for split in self.splits.values():
            for engine, value in split.engine_seconds.items():
                seconds[engine] = seconds.get(engine, 0.0) + value
                speakers.setdefault(engine, set()).update(split.engine_speakers[engine])
        if len(seconds) > 1:
            lines.append("  engines: " + ", ".join(
                f"{engine} {value / 3600:.3f} h {len(speakers[engine])} speakers"
                for engine, value in sorted(seconds.items())))
        return "\n".join(lines)


def _stream_seed(*parts: object) -> int:
    digest = hashlib.sha256("/".join(str(part) for part in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little")


def _voices_by_split(options: SynthOptions) -> dict[str, dict[str, list[str]]]:
    """``{split: {engine: voices}}``; a split asked for that gets no voice is an error."""
    recorded = {name: synth_engines.get(name).voices() for name in options.engines
                if name != "espeak"}
    chosen = split_voices(recorded, options.seed, options.dev_fraction, options.test_fraction)
    if "espeak" in options.engines:
        variants = split_variants(
            usable_variants(), options.seed, options.dev_fraction, options.test_fraction
        )
        for split, names in variants.items():
            chosen[split]["espeak"] = names
    for split in SPLITS:
        if options.fraction(split) > 0 and not chosen[split]:
            people = len({voice.person for voices in recorded.values() for voice in voices})
            raise SynthesisError(
                f"no voice left for {split}: the engines {', '.join(options.engines)} have "
                f"{people} speaker(s), too few for disjoint train, dev and test speakers; add "
                f"espeak or another engine to --engines, or set --{split}-fraction 0"
            )
    return chosen


def _plan(options: SynthOptions, split: str, index: int,
          voices: dict[str, list[str]]) -> PlannedUtterance:
    rng = random.Random(_stream_seed(options.seed, split, index, "plan"))
    text = pick(rng, options.sentences) if options.sentences else _SENTENCES[options.language](rng)
    names = [name for name in options.engines if voices.get(name)]
    name = names[0] if len(names) == 1 else pick(
        random.Random(_stream_seed(options.seed, split, index, "engine")), names)
    engine = synth_engines.get(name)
    voice, params = engine.draw(rng, voices[name], options.language, options.rate_wpm)
    speaker = engine.speaker(voice)
    return PlannedUtterance(
        split=split, index=index, text=text, engine=name, voice=voice, speaker=speaker,
        # espeak's splits are disjoint in the variant ("en-us+m3": "m3"), the others' in the voice
        variant=voice.split("+", 1)[1] if name == "espeak" else speaker,
        params=params,
    )


def _finish_audio(
    options: SynthOptions, planned: PlannedUtterance, pcm: np.ndarray, rate: int
) -> np.ndarray | None:
    """An engine's int16 at ``rate`` -> trimmed, resampled, padded, noisy int16 at 16 kHz."""
    samples = pcm.astype(np.float32) / 32768.0
    loud = np.flatnonzero(np.abs(samples) > 1e-3)
    if len(loud) < rate // 10:
        return None
    samples = samples[loud[0] : loud[-1] + 1]
    audio = _resampler(rate)(torch.from_numpy(samples)).numpy().astype(np.float64)
    rng = np.random.default_rng(_stream_seed(options.seed, planned.split, planned.index, "audio"))
    lead, tail = rng.uniform(0.1, 0.35), rng.uniform(0.15, 0.4)
    audio = np.concatenate(
        [np.zeros(int(lead * SAMPLE_RATE)), audio, np.zeros(int(tail * SAMPLE_RATE))]
    )
    if options.noise_snr is not None:
        audio = add_noise(rng, audio, SAMPLE_RATE, rng.uniform(*options.noise_snr))
    peak_db = rng.uniform(-12.0, -1.0)
    audio *= 10 ** (peak_db / 20) / (np.abs(audio).max() + 1e-12)
    return np.clip(np.round(audio * 32767), -32768, 32767).astype(np.int16)


@functools.cache
def _resampler(rate: int) -> torchaudio.transforms.Resample:
    # torchaudio.functional.resample with its sinc kernel computed once per rate, not per call
    return torchaudio.transforms.Resample(rate, SAMPLE_RATE)


@contextlib.contextmanager
def _single_thread() -> Iterator[None]:
    # Resampling is a convolution; one thread keeps its float sums the same on any machine.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _remove_stale(output_dir: Path, keep: Path, hidden_only: bool) -> None:
    """Delete audio folders this module made (they hold the marker file), except ``keep``."""
    for path in output_dir.iterdir():
        prefixes = (".audio-",) if hidden_only else ("audio-", ".audio-")
        ours = path.name.startswith(prefixes) and (path / _MARKER).is_file()
        if ours and path != keep:
            shutil.rmtree(path, ignore_errors=True)


def synthesize_corpus(
    output_dir: str | os.PathLike,
    hours: float = 1.0,
    seed: int = 0,
    language: str = "en",
    audio_format: str = "flac",
    noise_snr: tuple[float, float] | None = (10.0, 30.0),
    dev_fraction: float = 0.1,
    test_fraction: float = 0.1,
    workers: int | None = None,
    progress: bool = True,
    sentences: Sequence[str] = (),
    engines: Sequence[str] = DEFAULT_ENGINES,
) -> CorpusSummary:
    """Write a synthetic corpus (audio + train/dev/test manifests) into ``output_dir``.

    ``hours`` is the total over the splits, shared by ``dev_fraction`` and
    ``test_fraction`` (train gets the rest); voice variants are disjoint between
    splits. ``noise_snr`` is a (low, high) dB range for background noise, or None
    for clean audio. ``workers`` processes speak in parallel (default: up to 2);
    the output does not depend on it. ``sentences``, when given, are spoken
    instead of generated ones. ``engines`` speak the corpus (``engines.names()``);
    one not installed is left out with a warning that says how to install it.
    """
    options = SynthOptions(
        hours=hours, seed=seed, language=language, audio_format=audio_format,
        noise_snr=None if noise_snr is None else (float(noise_snr[0]), float(noise_snr[1])),
        dev_fraction=dev_fraction, test_fraction=test_fraction,
        sentences=tuple(sentence.strip() for sentence in sentences), engines=tuple(engines),
    )
    options.validate()
    options = replace(options, engines=synth_engines.usable(options.engines, options.language))
    voices = _voices_by_split(options)
    workers = max(1, workers if workers is not None else min(2, os.cpu_count() or 1))
    started = time.perf_counter()
    output_dir = Path(output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise SynthesisError(f"{output_dir}: exists and is not a folder; choose another -o")
    output_dir.mkdir(parents=True, exist_ok=True)
    folder = f"audio-{options.key()}"
    final = output_dir / folder
    partial = output_dir / f".{folder}.partial-{os.getpid()}"
    _remove_stale(output_dir, keep=final, hidden_only=True)  # left by interrupted runs
    partial.mkdir()
    (partial / _MARKER).write_text(json.dumps(options.record()) + "\n")

    splits = [name for name in SPLITS if options.fraction(name) > 0]
    summaries = {name: SplitSummary() for name in splits}
    utterances: dict[str, list[Utterance]] = {name: [] for name in splits}
    file_format, subtype = FORMATS[options.audio_format]
    try:
        bar = tqdm(
            total=options.hours * 3600, unit="s", desc="synth", disable=not progress,
            bar_format="{l_bar}{bar}| {n:.0f}/{total_fmt} s of audio [{elapsed}<{remaining}]",
        )
        batches = Batches(
            partial, splits, lambda split, index: _plan(options, split, index, voices[split]),
            ahead=workers,
        )
        with contextlib.closing(batches), bar, _single_thread():
            for split in splits:
                (partial / split).mkdir()
                summary, target = summaries[split], options.hours * 3600 * options.fraction(split)
                while summary.seconds < target:
                    for planned, (pcm, rate) in batches.next(split):
                        audio = _finish_audio(options, planned, pcm, rate)
                        if audio is None:
                            log.warning("%s said nothing for %r, skipped", planned.engine,
                                        planned.text)
                            continue
                        name = f"{split}/{split}_{planned.index:06d}.{options.audio_format}"
                        soundfile.write(
                            partial / name, audio, SAMPLE_RATE, format=file_format, subtype=subtype
                        )
                        duration = len(audio) / SAMPLE_RATE
                        utterances[split].append(
                            Utterance(f"{folder}/{name}", planned.text, duration,
                                      speaker=planned.speaker)
                        )
                        # ends at the total (the splits' targets may sum past it by a
                        # rounding error: 1 - 0.1 - 0.1 is 0.8000000000000002)
                        bar.update(min(duration, target - summary.seconds, bar.total - bar.n))
                        summary.utterances += 1
                        summary.seconds += duration
                        summary.speakers.add(planned.speaker)
                        summary.variants.add(planned.variant)
                        summary.engine_seconds[planned.engine] = (
                            summary.engine_seconds.get(planned.engine, 0.0) + duration)
                        summary.engine_speakers.setdefault(planned.engine, set()).add(
                            planned.speaker)
                        if summary.seconds >= target:
                            break
                batches.finish(split)
        # Commit: the audio folder into place, then the manifests, then old corpora away.
        if final.exists():  # the same options were synthesized before: same content
            final.rename(output_dir / f".{folder}.old-{os.getpid()}")
        partial.rename(final)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    manifests = {}
    for split in SPLITS:
        path = output_dir / f"{split}.jsonl"
        if split in utterances:
            write_manifest(path, utterances[split])
            manifests[split] = path
        else:
            path.unlink(missing_ok=True)  # it would point at audio removed below
    _remove_stale(output_dir, keep=final, hidden_only=False)
    return CorpusSummary(output_dir, manifests, summaries, time.perf_counter() - started)
