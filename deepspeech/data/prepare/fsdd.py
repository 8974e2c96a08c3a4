"""Free Spoken Digit Dataset: 3,000 recordings of single digits, 6 speakers, 8 kHz WAV.

Files are ``recordings/{digit}_{speaker}_{take}.wav``. Used as they are, each
recording is an utterance ("seven"). With ``sequences`` > 0 the recordings are
joined into connected-digit utterances ("three one four"): 1 to ``max_digits``
takes of one speaker, short random gaps of silence between them, written as
16-bit WAV at 8 or 16 kHz under ``<output>/audio``. Speakers never cross splits
(6 speakers: 4 train, 1 dev, 1 test by default), and every sequence is drawn
from its own seeded stream, so the same options give the same files.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from pathlib import Path

import numpy as np
import soundfile as sf
from tqdm import tqdm

from deepspeech.arguments import non_negative_float, non_negative_int, positive_int
from deepspeech.data.audio import load_audio
from deepspeech.data.manifest import Utterance
from deepspeech.data.prepare.common import (
    Option,
    PreparedCorpus,
    Preparer,
    download,
    extract,
    link_source,
    report_problems,
    split_speakers,
    with_durations,
    write_splits,
)
from deepspeech.errors import DeepSpeechError

log = logging.getLogger(__name__)

# GitHub builds this archive on the fly, so its bytes (and any checksum) are not
# stable; the recordings are checked by name and count instead.
URL = "https://github.com/Jakobovski/free-spoken-digit-dataset/archive/refs/heads/master.tar.gz"
WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
_NAME = re.compile(r"^(?P<digit>\d)_(?P<speaker>[A-Za-z0-9]+)_(?P<take>\d+)\.wav$")
GAP_SECONDS = (0.05, 0.25)    # between digits
EDGE_SECONDS = (0.05, 0.20)   # before the first and after the last digit
FADE_SECONDS = 0.005          # no clicks where a trimmed recording starts or stops


def download_fsdd(target_dir: str | os.PathLike) -> Path:
    """Download and unpack the repository archive; returns its ``recordings`` folder."""
    target_dir = Path(target_dir)
    recordings = target_dir / "free-spoken-digit-dataset-master" / "recordings"
    if not recordings.is_dir():
        extract(download(URL, target_dir), target_dir)
    return recordings


def prepare_fsdd(root: str | os.PathLike, output: str | os.PathLike, sequences: int = 0,
                 max_digits: int = 7, seed: int = 0, sample_rate: int = 8000,
                 dev_speakers: float = 1, test_speakers: float = 1,
                 workers: int = 8) -> PreparedCorpus:
    """Train/dev/test manifests of single digits, or of ``sequences`` connected-digit files."""
    root = Path(root)
    if (root / "recordings").is_dir():
        root = root / "recordings"
    recordings = _recordings(root)
    groups = split_speakers({speaker for speaker, _, _ in recordings}, dev=dev_speakers,
                            test=test_speakers, seed=seed)
    problems: list[str] = []
    if sequences <= 0:
        source = link_source(root, output)
        splits = {
            split: with_durations([(str(source / path.name), WORDS[digit], speaker)
                                   for speaker, digit, path in recordings
                                   if speaker in speakers], problems, workers)
            for split, speakers in groups.items()}
    else:
        if max_digits < 1:
            raise DeepSpeechError(f"--max-digits must be at least 1, got {max_digits}")
        splits = _write_sequences(recordings, groups, Path(output).resolve(), sequences,
                                  max_digits, seed, sample_rate)
    report_problems("fsdd", problems)
    return write_splits("fsdd", output, splits, left_out=len(problems))


def _recordings(root: Path) -> list[tuple[str, int, Path]]:
    """``(speaker, digit, path)`` for every recording, sorted by name."""
    found = []
    for path in sorted(root.glob("*.wav")):
        match = _NAME.match(path.name)
        if match:
            found.append((match["speaker"], int(match["digit"]), path))
    if not found:
        raise DeepSpeechError(f"{root}: no FSDD recordings ({{digit}}_{{speaker}}_{{take}}.wav)")
    return found


def _write_sequences(recordings: list[tuple[str, int, Path]], groups: dict[str, list[str]],
                     output: Path, total: int, max_digits: int, seed: int,
                     sample_rate: int) -> dict[str, list[Utterance]]:
    takes: dict[tuple[str, int], list[Path]] = {}
    for speaker, digit, path in recordings:
        takes.setdefault((speaker, digit), []).append(path)
    counts = {split: sum(1 for s, _, _ in recordings if s in speakers)
              for split, speakers in groups.items()}
    # Sequences per split in proportion to the split's recordings; the rest to train.
    shares = {split: round(total * counts[split] / len(recordings)) for split in ("dev", "test")}
    shares["train"] = total - shares["dev"] - shares["test"]

    # Audio goes to a hidden folder renamed into place when complete: an interrupted
    # run never leaves a corpus whose manifest and audio disagree.
    partial, final = output / ".audio.partial", output / "audio"
    shutil.rmtree(partial, ignore_errors=True)
    cache: dict[Path, np.ndarray] = {}
    splits: dict[str, list[Utterance]] = {}
    progress = tqdm(total=total, unit="file", desc="fsdd sequences")
    for split_index, split in enumerate(("train", "dev", "test")):
        speakers, utterances = groups[split], []
        for index in range(shares[split]):
            rng = np.random.default_rng([seed, split_index, index])
            speaker = speakers[int(rng.integers(len(speakers)))]
            digits = rng.integers(0, 10, size=int(rng.integers(1, max_digits + 1))).tolist()
            pieces = [_silence(rng, EDGE_SECONDS, sample_rate)]
            for position, digit in enumerate(digits):
                options = takes.get((speaker, digit))
                if not options:
                    raise DeepSpeechError(f"fsdd: speaker {speaker} has no recording of {digit}")
                path = options[int(rng.integers(len(options)))]
                if path not in cache:
                    cache[path] = _faded(load_audio(path, sample_rate).numpy(), sample_rate)
                pieces.append(cache[path])
                gaps = EDGE_SECONDS if position == len(digits) - 1 else GAP_SECONDS
                pieces.append(_silence(rng, gaps, sample_rate))
            audio = np.clip(np.concatenate(pieces), -1.0, 1.0)
            relative = Path(split) / speaker / f"{split}-{index:05d}.wav"
            (partial / relative).parent.mkdir(parents=True, exist_ok=True)
            sf.write(partial / relative, audio, sample_rate, subtype="PCM_16")
            utterances.append(Utterance(str(final / relative), " ".join(WORDS[d] for d in digits),
                                        len(audio) / sample_rate, speaker=speaker))
            progress.update()
        splits[split] = utterances
    progress.close()
    if final.exists():
        shutil.rmtree(final)
    partial.rename(final)
    return splits


def _silence(rng: np.random.Generator, seconds: tuple[float, float], rate: int) -> np.ndarray:
    return np.zeros(round(rng.uniform(*seconds) * rate), dtype=np.float32)


def _faded(audio: np.ndarray, rate: int) -> np.ndarray:
    n = min(round(FADE_SECONDS * rate), len(audio) // 2)
    if n:
        ramp = np.linspace(0.0, 1.0, n, dtype=np.float32)
        audio = audio.copy()
        audio[:n] *= ramp
        audio[-n:] *= ramp[::-1]
    return audio


PREPARER = Preparer(
    "fsdd", prepare_fsdd, download_fsdd,
    help="Free Spoken Digit Dataset: single or connected digits, speaker-disjoint",
    root_help="the recordings/ folder or the repository holding it",
    options=(
        Option("--sequences", non_negative_int, 0,
               "write this many connected-digit utterances (0: single digits)"),
        Option("--max-digits", positive_int, 7, "digits per sequence: 1 to this"),
        Option("--seed", int, 0, "fixes speakers per split and sequences"),
        Option("--sample-rate", int, 8000, "rate of the written sequences",
               choices=(8000, 16000)),
        Option("--dev-speakers", non_negative_float, 1, "count or fraction"),
        Option("--test-speakers", non_negative_float, 1, "count or fraction"),
    ))
