"""Mozilla Common Voice: crowd-sourced read sentences, MP3, one folder per language.

Layout of a release (``cv-corpus-<version>/<language>/``)::

    clips/*.mp3                 48 kHz MP3 (soundfile decodes MP3, libsndfile >= 1.1)
    train.tsv dev.tsv test.tsv  client_id, path, sentence, ... (tab-separated, one header)
    clip_durations.tsv          clip, duration[ms]   (newer releases; read when present)

The official splits are speaker-disjoint; ``client_id`` is the speaker. Common
Voice needs an e-mail and a click-through licence: download it by hand from
https://commonvoice.mozilla.org/datasets, unpack it, and pass ``--root``.
"""

from __future__ import annotations

import csv
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from deepspeech.data.manifest import Utterance
from deepspeech.data.prepare.common import (
    Option,
    PreparedCorpus,
    Preparer,
    comma_separated,
    link_source,
    report_problems,
    with_durations,
    write_splits,
)
from deepspeech.errors import DeepSpeechError
from deepspeech.files import not_utf8

log = logging.getLogger(__name__)

DATASETS_PAGE = "https://commonvoice.mozilla.org/datasets"


def download_commonvoice(target_dir: str | os.PathLike) -> Path:
    """Common Voice has no anonymous download: this explains what to do instead."""
    raise DeepSpeechError(
        f"Common Voice must be downloaded by hand (e-mail and licence): {DATASETS_PAGE}; "
        f"unpack it under {target_dir} and run 'deepspeech data prepare commonvoice "
        "--root cv-corpus-<version>/<language> -o <output>'"
    )


def prepare_commonvoice(root: str | os.PathLike, output: str | os.PathLike,
                        splits: Sequence[str] = ("train", "dev", "test"),
                        workers: int = 8) -> PreparedCorpus:
    """One manifest per official split from a language folder (clips/ + *.tsv)."""
    root = Path(root)
    if not (root / "clips").is_dir():
        raise DeepSpeechError(f"{root}: not a Common Voice language folder (no clips/)")
    source = link_source(root, output)
    known = _clip_durations(root / "clip_durations.tsv")
    result, problems = {}, []
    for split in splits:
        table = root / f"{split}.tsv"
        if not table.is_file():
            raise DeepSpeechError(f"{table}: split not found")
        entries = _read_table(table, root / "clips", problems)
        # clip_durations.tsv saves decoding every MP3 header; other clips are probed.
        fast = [Utterance(str(source / "clips" / path), text, known[path], speaker=speaker)
                for path, text, speaker in entries if known.get(path, 0) > 0]
        slow = [(str(source / "clips" / path), text, speaker)
                for path, text, speaker in entries if known.get(path, 0) <= 0]
        result[split] = fast + with_durations(slow, problems, workers)
        log.info("%s: %d clips (%d durations from clip_durations.tsv)", split, len(entries),
                 len(fast))
    report_problems("commonvoice", problems)
    return write_splits("commonvoice", output, result, left_out=len(problems))


def _read_table(table: Path, clips: Path, problems: list[str]) -> list[tuple[str, str, str]]:
    """(clip, sentence, speaker) per usable row; the others go to ``problems`` by line."""
    entries = []
    with table.open(encoding="utf-8", newline="") as handle:
        rows = csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        try:
            missing = {"client_id", "path", "sentence"} - set(rows.fieldnames or ())
            if missing:
                raise DeepSpeechError(f"{table}: column(s) {', '.join(sorted(missing))} missing")
            for number, row in enumerate(rows, start=2):
                if row["path"] is None or row["sentence"] is None:
                    problems.append(f"{table} line {number}: too few tab-separated fields")
                    continue
                sentence = " ".join(row["sentence"].split())
                if not sentence:
                    problems.append(f"{table} line {number}: empty sentence")
                    continue
                if not (clips / row["path"]).is_file():
                    problems.append(f"{table} line {number}: audio file missing: "
                                    f"{clips / row['path']}")
                    continue
                entries.append((row["path"], sentence, row["client_id"]))
        except UnicodeDecodeError:
            raise not_utf8(table, DeepSpeechError) from None
    return entries


def _clip_durations(path: Path) -> dict[str, float]:
    if not path.is_file():
        return {}
    durations = {}
    with path.open(encoding="utf-8", newline="") as handle:
        for row in csv.reader(handle, delimiter="\t"):
            if len(row) >= 2 and row[1].strip().isdigit():
                durations[row[0]] = int(row[1]) / 1000.0
    return durations


PREPARER = Preparer(
    # download_commonvoice only explains the download by hand: --root is required.
    "commonvoice", prepare_commonvoice, None,
    help="Mozilla Common Voice (download by hand): clips/*.mp3 + *.tsv",
    root_help="the language folder, e.g. cv-corpus-17.0/en",
    options=(
        Option("--splits", comma_separated, ("train", "dev", "test"),
               "which .tsv files, comma-separated"),
    ))
