"""LibriSpeech (OpenSLR 12) and Mini LibriSpeech (OpenSLR 31): read English audiobooks, 16 kHz.

Layout: ``LibriSpeech/<part>/<speaker>/<chapter>/`` holding one
``<speaker>-<chapter>.trans.txt`` (``<speaker>-<chapter>-<n> TEXT`` lines, upper case)
beside the audio ``<speaker>-<chapter>-<n>.<ext>``: ``.flac`` as published, or any
other format soundfile reads (a re-encoded copy's ``.ogg``). ``SPEAKERS.TXT`` beside
the parts gives each speaker's sex, kept on every line as ``"gender"`` (``f``/``m``)
for error rates by group (``deepspeech evaluate --group-by gender``).

Every part found (``train-clean-100``, ``dev-clean``, Mini LibriSpeech's
``train-clean-5`` and ``dev-clean-2`` ..., any ``<name>-clean[-<n>]`` or
``<name>-other[-<n>]`` folder) becomes ``<part>.jsonl``, unless ``subsets`` names
the ones to take. The published parts are speaker-disjoint. Without a dev part among
them, dev speakers are carved out of the training parts into ``dev.jsonl`` (each
training part's manifest keeps the rest): a share (default a tenth) of the training
speakers, as many women as men where both are there (LibriSpeech's own dev parts are half
and half), chosen by name and seed only.

The published corpus is complete, so a problem means a damaged copy: a transcript line
without audio, audio without a transcript line, a malformed line, a line of another
chapter, unreadable audio, a malformed ``SPEAKERS.TXT`` line. Each is named by file
(and line), all in one error, and nothing is written (``bad_input="error"``, the
default, as in training's ``data.bad_input``); ``"skip"`` leaves them out with one
warning naming them.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from collections.abc import Sequence
from pathlib import Path

from deepspeech.arguments import non_negative_float
from deepspeech.data.audio import AUDIO_SUFFIXES
from deepspeech.data.manifest import Utterance
from deepspeech.data.prepare.common import (
    BAD_INPUT,
    Option,
    PreparedCorpus,
    Preparer,
    comma_separated,
    download,
    durations,
    extract,
    link_source,
    raise_problems,
    report_problems,
    speaker_count,
    split_speakers,
    write_splits,
)
from deepspeech.errors import AudioError, DeepSpeechError
from deepspeech.files import read_utf8

log = logging.getLogger(__name__)

URL = "https://www.openslr.org/resources/12/{subset}.tar.gz"
# From https://www.openslr.org/resources/12/md5sum.txt
MD5 = {
    "dev-clean": "42e2234ba48799c1f50f24a7926300a1",
    "dev-other": "c8d0bcc9cca99d4f8b62fcc847357931",
    "test-clean": "32fa31d27d2e1cad72775fee3f4849a9",
    "test-other": "fb5a50374b501bb3bac4815ee91d3135",
    "train-clean-100": "2a93770f6d5c6c964bc36631d331a522",
    "train-clean-360": "c0e676e450a7ff2f54aeade5171606fa",
    "train-other-500": "d1a0fd59409feb2c614ce4d30c387708",
}
SUBSETS = tuple(MD5)
DOWNLOADED = ("train-clean-100", "dev-clean", "test-clean")
PART = re.compile(r"[a-z]+-(?:clean|other)(?:-[0-9a-z]+)?")  # train-clean-5, dev-other
UTTERANCE = re.compile(r"(?P<speaker>[^-\s]+)-(?P<chapter>[^-\s]+)-(?P<n>\d+)")
SPEAKERS_LINE = "ID | SEX | SUBSET | MINUTES | NAME"
GENDERS = {"F": "f", "M": "m"}
SHOWN_CHARACTERS = 60  # of a malformed line, in its message
DAMAGED = ("A damaged copy: extract the part(s) again from their archives, or pass "
           "--bad-input skip to leave these out.")


@dataclasses.dataclass(frozen=True)
class _Line:
    """One usable transcript line and the audio file it names."""

    transcript: Path
    number: int
    utterance_id: str
    text: str
    audio: Path
    speaker: str


def download_librispeech(target_dir: str | os.PathLike,
                         subsets: Sequence[str] | None = None) -> Path:
    """Download and unpack ``subsets`` (default ``DOWNLOADED``); returns the ``LibriSpeech``
    folder to prepare from."""
    subsets = DOWNLOADED if subsets is None else subsets
    _check_subsets(subsets)
    target_dir = Path(target_dir)
    for subset in subsets:
        if not (target_dir / "LibriSpeech" / subset).is_dir():
            archive = download(URL.format(subset=subset), target_dir, md5=MD5[subset])
            extract(archive, target_dir)
    return target_dir / "LibriSpeech"


def prepare_librispeech(root: str | os.PathLike, output: str | os.PathLike,
                        subsets: Sequence[str] | None = None, dev_speakers: float = 0.1,
                        seed: int = 0, bad_input: str = "error",
                        workers: int = 8) -> PreparedCorpus:
    """One manifest per part (every part found, or ``subsets``), speakers and gender on
    each line, plus ``dev`` carved out of the training parts when no dev part is taken."""
    if bad_input not in BAD_INPUT:
        raise DeepSpeechError(f"bad_input must be one of {', '.join(BAD_INPUT)}, "
                              f"got {bad_input!r}")
    root, found = _find_parts(Path(root))
    parts = _chosen(root, found, subsets)
    problems: list[str] = []
    speakers_file = root / "SPEAKERS.TXT"
    genders = read_speakers(speakers_file, problems) if speakers_file.is_file() else None
    lines = {part: _read_part(root / part, problems) for part in parts}
    seconds = _seconds([line for part in parts for line in lines[part]], problems, workers)
    if bad_input == "error":
        raise_problems(f"librispeech {root}", problems, hint=DAMAGED)
    report_problems("librispeech", problems)
    _note_genders(speakers_file, genders, {line.speaker for ls in lines.values() for line in ls})

    source = link_source(root, output)
    splits: dict[str, list[Utterance]] = {}
    for part in parts:
        splits[part] = [
            Utterance(str(source / line.audio.relative_to(root)), line.text,
                      seconds[line.audio], speaker=line.speaker,
                      extra=_gender_field(genders, line.speaker))
            for line in lines[part] if line.audio in seconds]
        log.info("librispeech %s: %d utterances", part, len(splits[part]))
    splits = _with_dev(splits, genders or {}, dev_speakers, seed)
    return write_splits("librispeech", output, splits, left_out=len(problems))


def read_speakers(path: Path, problems: list[str]) -> dict[str, str]:
    """``{speaker: "f" | "m"}`` from ``SPEAKERS.TXT``; bad lines to ``problems`` by line.

    Lines starting with ``;`` are comments; the others are ``ID | SEX | SUBSET | MINUTES |
    NAME``, padded with spaces. A name may hold ``|`` itself (``|CBW|Simon``), so only
    the first four separate fields.
    """
    genders: dict[str, str] = {}
    first: dict[str, int] = {}
    try:
        text = read_utf8(path, DeepSpeechError)
    except DeepSpeechError as exc:
        problems.append(str(exc))
        return genders
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip() or line.lstrip().startswith(";"):
            continue
        fields = [field.strip() for field in line.split("|", 4)]
        if len(fields) < 5 or not fields[0] or len(fields[0].split()) > 1:
            problems.append(f"{path} line {number}: expected '{SPEAKERS_LINE}', got "
                            f"{_shown(line)}")
            continue
        speaker, sex = fields[0], fields[1]
        if sex.upper() not in GENDERS:
            problems.append(f"{path} line {number}: speaker {speaker}: sex {sex!r} is not F "
                            "or M")
        elif speaker in first:
            problems.append(f"{path} line {number}: speaker {speaker} again (first at line "
                            f"{first[speaker]})")
        else:
            first[speaker] = number
            genders[speaker] = GENDERS[sex.upper()]
    return genders


def _find_parts(root: Path) -> tuple[Path, list[str]]:
    """The folder holding the parts (``root`` or its ``LibriSpeech``) and their names."""
    for folder in (root, root / "LibriSpeech"):
        if folder.is_dir():
            found = sorted(path.name for path in folder.iterdir()
                           if path.is_dir() and PART.fullmatch(path.name))
            if found:
                return folder, found
    raise DeepSpeechError(f"{root}: no LibriSpeech parts found (folders such as "
                          "train-clean-100/ or train-clean-5/); download them or fix --root")


def _chosen(root: Path, found: list[str], subsets: Sequence[str] | None) -> list[str]:
    """The parts to prepare: ``subsets`` (each must be there), else all ``found``."""
    if not subsets:
        log.info("librispeech: preparing every part in %s: %s", root, ", ".join(found))
        return found
    absent = [subset for subset in subsets if subset not in found]
    if absent:
        raise DeepSpeechError(f"{root}: part(s) {', '.join(absent)} not found; found "
                              f"{', '.join(found)}; fix --subsets or --root")
    return list(dict.fromkeys(subsets))


def _read_part(folder: Path, problems: list[str]) -> list[_Line]:
    """Every chapter's transcript lines, matched one to one with its audio files."""
    lines = []
    for chapter in sorted(path for path in folder.glob("*/*") if path.is_dir()):
        speaker = chapter.parent.name
        audio: dict[str, list[Path]] = {}
        for path in sorted(chapter.iterdir()):
            if path.is_file() and path.suffix.lower() in AUDIO_SUFFIXES:
                audio.setdefault(path.name[:-len(path.suffix)], []).append(path)
        transcript = chapter / f"{speaker}-{chapter.name}.trans.txt"
        if not transcript.is_file():
            if audio:
                problems.append(f"{chapter}: {transcript.name} missing; its {len(audio)} "
                                "audio file(s) have no transcript")
            continue
        read, listed = _read_transcript(transcript, speaker, audio, problems)
        lines += read
        problems += [f"{paths[0]}: no line for {stem} in {transcript}"
                     for stem, paths in audio.items() if stem not in listed]
    return lines


def _read_transcript(transcript: Path, speaker: str, audio: dict[str, list[Path]],
                     problems: list[str]) -> tuple[list[_Line], set[str]]:
    """The usable lines of one chapter's ``.trans.txt``, the rest named by line, and every
    id with a line: its audio file is not reported once more as untranscribed."""
    try:
        text = read_utf8(transcript, DeepSpeechError)
    except DeepSpeechError as exc:
        problems.append(str(exc))
        return [], set(audio)
    chapter = transcript.parent.name
    lines: list[_Line] = []
    first: dict[str, int] = {}
    # split("\n"), not splitlines(): line numbers as an editor counts them.
    for number, line in enumerate(text.split("\n"), 1):
        fields = line.split(maxsplit=1)
        if not fields:
            continue
        where = f"{transcript} line {number}"
        match = UTTERANCE.fullmatch(fields[0])
        if match is None:
            problems.append(f"{where}: expected '{speaker}-{chapter}-NNNN TEXT', got "
                            f"{_shown(line)}")
            continue
        utterance_id = fields[0]
        if (match["speaker"], match["chapter"]) != (speaker, chapter):
            problems.append(f"{where}: {utterance_id} is not of this chapter (its ids start "
                            f"{speaker}-{chapter}-)")
            continue
        if utterance_id in first:
            problems.append(f"{where}: {utterance_id} again (first at line "
                            f"{first[utterance_id]})")
            continue
        first[utterance_id] = number
        words = " ".join(fields[1].split()) if len(fields) > 1 else ""
        files = audio.get(utterance_id, [])
        if not words:
            problems.append(f"{where}: {utterance_id} has no transcript")
        elif not files:
            problems.append(f"{where}: {utterance_id}: audio file missing (no "
                            f"{utterance_id}.flac or other audio in {transcript.parent})")
        elif len(files) > 1:
            problems.append(f"{where}: {utterance_id}: several audio files "
                            f"({', '.join(path.name for path in files)}); keep one")
        else:
            lines.append(_Line(transcript, number, utterance_id, words, files[0], speaker))
    return lines, set(first)


def _seconds(lines: list[_Line], problems: list[str], workers: int) -> dict[Path, float]:
    """Seconds per readable audio file from its header; unreadable ones named by line."""
    found = {}
    for line, result in zip(lines, durations([line.audio for line in lines], workers),
                            strict=True):
        if isinstance(result, AudioError):
            problems.append(f"{line.transcript} line {line.number}: {line.utterance_id}: "
                            f"{result}")
        else:
            found[line.audio] = result
    return found


def _gender_field(genders: dict[str, str] | None, speaker: str) -> dict[str, str]:
    gender = (genders or {}).get(speaker)
    return {"gender": gender} if gender else {}


def _note_genders(path: Path, genders: dict[str, str] | None, speakers: set[str]) -> None:
    """Say which lines will have no ``gender`` field, and why."""
    if genders is None:
        log.warning("librispeech: %s not found; lines have no gender, and dev speakers (if "
                    "carved out) are not balanced by it", path)
        return
    unknown = sorted(speakers - genders.keys(), key=lambda s: (len(s), s))
    if unknown:
        log.warning("librispeech: %s has no line for %d speaker(s) (%s); their lines have no "
                    "gender", path, len(unknown), ", ".join(unknown))


def _with_dev(splits: dict[str, list[Utterance]], genders: dict[str, str], share: float,
              seed: int) -> dict[str, list[Utterance]]:
    """``splits`` and a ``dev`` split: empty when a dev part is taken, else ``share`` of
    the training parts' speakers, moved out of them."""
    dev_parts = [part for part in splits if part.startswith("dev-")]
    train_parts = [part for part in splits if part.startswith("train-")]
    if dev_parts or not train_parts:
        if dev_parts:
            log.info("librispeech: dev from %s (no speakers carved out)", ", ".join(dev_parts))
        return {**splits, "dev": []}
    speakers = {u.speaker for part in train_parts for u in splits[part]}
    chosen = _balanced_dev({speaker: genders.get(speaker) for speaker in speakers}, share, seed)
    by_gender = ", ".join(f"{sum(genders.get(s) == g for s in chosen)} {g}"
                          for g in sorted(set(GENDERS.values())))
    log.info("librispeech: no dev part; %d of %d speakers of %s carved out as dev (%s; seed %d)",
             len(chosen), len(speakers), ", ".join(train_parts), by_gender, seed)
    carved = {part: [u for u in utterances if u.speaker not in chosen]
              if part in train_parts else utterances for part, utterances in splits.items()}
    return {**carved, "dev": [u for part in train_parts for u in splits[part]
                              if u.speaker in chosen]}


def _balanced_dev(genders: dict[str, str | None], share: float, seed: int) -> set[str]:
    """``share`` (a count, or a fraction) of the speakers, as many of each gender as the
    data allows (each keeps a speaker in training); which ones depends on names and seed."""
    wanted = speaker_count(share, len(genders))
    groups: dict[str, list[str]] = {}
    for speaker, gender in genders.items():
        groups.setdefault(gender or "", []).append(speaker)
    # Largest group first, so an odd count gives the extra speaker to the larger group.
    order = sorted(groups, key=lambda gender: (-len(groups[gender]), gender))
    counts = dict.fromkeys(order, 0)
    for _ in range(wanted):
        room = [gender for gender in order if counts[gender] < len(groups[gender]) - 1]
        if not room:
            raise DeepSpeechError(
                f"librispeech: {len(genders)} training speakers cannot give {wanted} dev "
                "speakers and keep each gender in training; ask for fewer (--dev-speakers, "
                "0: no dev)")
        counts[min(room, key=lambda gender: counts[gender])] += 1
    return {speaker for gender, count in counts.items()
            for speaker in split_speakers(groups[gender], dev=count, seed=seed)["dev"]}


def _shown(line: str) -> str:
    """A line as a message quotes it, cut short if long."""
    line = line.rstrip("\r")
    return repr(line if len(line) <= SHOWN_CHARACTERS else line[:SHOWN_CHARACTERS] + "...")


def _check_subsets(subsets: Sequence[str]) -> None:
    unknown = [subset for subset in subsets if subset not in MD5]
    if unknown:
        raise DeepSpeechError(f"unknown LibriSpeech subset(s) {', '.join(unknown)}; "
                              f"choose from {', '.join(SUBSETS)}")


PREPARER = Preparer(
    "librispeech", prepare_librispeech, download_librispeech,
    help="LibriSpeech (OpenSLR 12) or Mini LibriSpeech (OpenSLR 31): every part found, "
         "speaker and gender on each line, dev carved out by speaker when there is no dev part",
    root_help="the LibriSpeech folder (holding train-clean-100/, train-clean-5/ ..., "
              "SPEAKERS.TXT)",
    options=(
        Option("--subsets", comma_separated, None,
               "comma-separated parts to prepare, e.g. train-clean-5,dev-clean-2 (default: "
               f"every part under --root; without --root, download {','.join(DOWNLOADED)})",
               download=True),
        Option("--dev-speakers", non_negative_float, 0.1,
               "without a dev part: dev speakers carved out of the training parts, a count "
               "or a fraction, as many women as men where both are there (0: no dev)"),
        Option("--seed", int, 0, "which speakers go to dev"),
        Option("--bad-input", str, "error",
               "error: name every damaged file and line and write nothing; skip: leave them "
               "out with one warning naming them", choices=BAD_INPUT),
    ))
