"""AN4 (CMU census database): about 50 min of spelled names, addresses, digits; 16 kHz.

Layout of ``an4_sphere.tar.gz``::

    an4/etc/an4_train.fileids          an4_clstk/<speaker>/<utterance>   per line
    an4/etc/an4_train.transcription    <s> TEXT </s> (<utterance>)       per line
    an4/etc/an4_test.{fileids,transcription}
    an4/wav/an4_clstk/<speaker>/<utterance>.sph        NIST SPHERE (soundfile reads it)
    an4/wav/an4test_clstk/<speaker>/<utterance>.sph

The ``an4_raw.bigendian`` distribution has headerless ``.raw`` files instead
(16 kHz, 16-bit big-endian): those are converted to FLAC under the output folder.
The training part is cut into train and dev by speaker; the test part, when
present, becomes ``test.jsonl``.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import soundfile as sf

from deepspeech.arguments import non_negative_float
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
from deepspeech.files import read_utf8

log = logging.getLogger(__name__)

URL = "http://www.speech.cs.cmu.edu/databases/an4/an4_sphere.tar.gz"
RAW_RATE = 16000
# One line: optional <s>, the words, optional </s>, then the utterance id in parentheses.
_LINE = re.compile(r"^(?P<text>.*?)\s*\((?P<id>[^()\s]+)\)\s*$")
_MARKUP = re.compile(r"</?s>|<sil>", re.IGNORECASE)
PARTS = {"train": ("an4_train", "an4_clstk"), "test": ("an4_test", "an4test_clstk")}


def download_an4(target_dir: str | os.PathLike) -> Path:
    """Download and unpack the SPHERE distribution; returns the ``an4`` folder.

    CMU publishes no checksum; the archive's layout is checked by ``prepare_an4``.
    """
    target_dir = Path(target_dir)
    if not (target_dir / "an4" / "etc").is_dir():
        extract(download(URL, target_dir), target_dir)
    return target_dir / "an4"


def prepare_an4(root: str | os.PathLike, output: str | os.PathLike, dev_speakers: float = 0.1,
                seed: int = 0, workers: int = 8) -> PreparedCorpus:
    """``train``/``dev`` (split by speaker) and ``test`` manifests from an ``an4`` folder."""
    root = Path(root)
    if not (root / "etc").is_dir() and (root / "an4" / "etc").is_dir():
        root = root / "an4"
    if not (root / "etc" / "an4_train.transcription").is_file():
        raise DeepSpeechError(f"{root}: not an AN4 folder (etc/an4_train.transcription missing)")
    source = link_source(root, output)
    problems: list[str] = []
    parts = {}
    for part, (stem, _) in PARTS.items():
        if (root / "etc" / f"{stem}.transcription").is_file():
            entries = _read_part(root, source, Path(output).resolve(), part, problems)
            parts[part] = with_durations(entries, problems, workers)
    train = parts["train"]
    groups = split_speakers({u.speaker for u in train}, dev=dev_speakers, seed=seed)
    dev = set(groups["dev"])
    splits = {"train": [u for u in train if u.speaker not in dev],
              "dev": [u for u in train if u.speaker in dev]}
    splits["test"] = parts.get("test", [])
    if "test" not in parts:
        log.info("%s: no test part (etc/an4_test.transcription); writing train and dev only",
                 root)
    report_problems("an4", problems)
    return write_splits("an4", output, splits, left_out=len(problems))


def _read_part(root: Path, source: Path, output: Path, part: str,
               problems: list[str]) -> list[tuple[str, str, str]]:
    stem, wav_dir = PARTS[part]
    transcription = root / "etc" / f"{stem}.transcription"
    # fileids give the speaker folder; without them it is the middle of the id (an251-fash-b).
    folders = {}
    fileids = root / "etc" / f"{stem}.fileids"
    if fileids.is_file():
        for line in read_utf8(fileids, DeepSpeechError).split():
            folders[Path(line).name] = Path(line).parent
    entries = []
    first_line: dict[str, int] = {}
    for number, line in enumerate(read_utf8(transcription, DeepSpeechError).splitlines(), 1):
        if not line.strip():
            continue
        match = _LINE.match(line.strip())
        if match is None:
            problems.append(f"{transcription} line {number}: no (utterance-id) at the end")
            continue
        utterance_id = match["id"]
        if utterance_id in first_line:  # one recording, two transcripts: the first is kept
            problems.append(f"{transcription} line {number}: {utterance_id} again (first at "
                            f"line {first_line[utterance_id]})")
            continue
        first_line[utterance_id] = number
        text = " ".join(_MARKUP.sub(" ", match["text"]).split())
        folder = folders.get(utterance_id) or Path(wav_dir) / _speaker_of(utterance_id)
        audio = _find_audio(root / "wav" / folder, utterance_id, output / "audio" / folder,
                            source, root)
        if audio is None:
            problems.append(f"{transcription} line {number}: no audio for {utterance_id} "
                            f"in {root / 'wav' / folder}")
            continue
        entries.append((audio, text, folder.name))
    return entries


def _speaker_of(utterance_id: str) -> str:
    parts = utterance_id.split("-")
    return parts[1] if len(parts) == 3 else parts[0]


def _find_audio(folder: Path, utterance_id: str, converted: Path, source: Path,
                root: Path) -> str | None:
    for suffix in (".sph", ".wav", ".flac"):
        path = folder / f"{utterance_id}{suffix}"
        if path.is_file():
            return str(source / path.relative_to(root))
    raw = folder / f"{utterance_id}.raw"
    if raw.is_file():
        target = converted / f"{utterance_id}.flac"
        if not target.is_file():
            samples, _ = sf.read(raw, samplerate=RAW_RATE, channels=1, subtype="PCM_16",
                                 endian="BIG", format="RAW", dtype="int16")
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(f".{target.name}.part")
            sf.write(partial, samples, RAW_RATE, format="FLAC", subtype="PCM_16")
            partial.replace(target)  # an interrupted run leaves no half-written file
        return str(target)
    return None


PREPARER = Preparer(
    "an4", prepare_an4, download_an4,
    help="CMU AN4: train/dev split by speaker, plus test when present",
    root_help="the an4 folder (etc/, wav/)",
    options=(
        Option("--dev-speakers", non_negative_float, 0.1,
               "dev speakers: a count (>= 1) or a fraction of the training speakers"),
        Option("--seed", int, 0, "which speakers go to dev"),
    ))
