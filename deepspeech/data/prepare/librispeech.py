"""LibriSpeech (OpenSLR 12): 1,000 h of read English audiobooks, 16 kHz FLAC.

Layout: ``LibriSpeech/<subset>/<speaker>/<chapter>/<speaker>-<chapter>-<n>.flac``
with one ``<speaker>-<chapter>.trans.txt`` per chapter (``<id> TEXT`` lines,
upper case). Subsets are the official, speaker-disjoint splits; each becomes
``<subset>.jsonl``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

from deepspeech.data.prepare.common import (
    Option,
    PreparedCorpus,
    Preparer,
    comma_separated,
    download,
    extract,
    link_source,
    report_problems,
    with_durations,
    write_splits,
)
from deepspeech.errors import DeepSpeechError
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


def download_librispeech(target_dir: str | os.PathLike,
                         subsets: Sequence[str] = ("train-clean-100", "dev-clean", "test-clean")
                         ) -> Path:
    """Download and unpack ``subsets``; returns the ``LibriSpeech`` folder to prepare from."""
    _check_subsets(subsets)
    target_dir = Path(target_dir)
    for subset in subsets:
        if not (target_dir / "LibriSpeech" / subset).is_dir():
            archive = download(URL.format(subset=subset), target_dir, md5=MD5[subset])
            extract(archive, target_dir)
    return target_dir / "LibriSpeech"


def prepare_librispeech(root: str | os.PathLike, output: str | os.PathLike,
                        subsets: Sequence[str] = ("train-clean-100", "dev-clean"),
                        workers: int = 8) -> PreparedCorpus:
    """One manifest per subset from a ``LibriSpeech`` folder (or one that holds it)."""
    _check_subsets(subsets)
    root = Path(root)
    if not any((root / subset).is_dir() for subset in subsets) and (root / "LibriSpeech").is_dir():
        root = root / "LibriSpeech"
    source = link_source(root, output)
    splits, problems = {}, []
    for subset in subsets:
        folder = root / subset
        if not folder.is_dir():
            raise DeepSpeechError(f"{folder}: subset not found (download it or fix --root)")
        entries = []
        for transcript in sorted(folder.glob("*/*/*.trans.txt")):
            chapter_dir = transcript.parent
            lines = read_utf8(transcript, DeepSpeechError).splitlines()
            for number, line in enumerate(lines, 1):
                utterance_id, _, text = line.strip().partition(" ")
                if not utterance_id:
                    continue
                audio = chapter_dir / f"{utterance_id}.flac"
                if not audio.is_file():
                    problems.append(f"{transcript} line {number}: audio file missing: {audio}")
                    continue
                speaker = utterance_id.split("-")[0]
                entries.append((str(source / audio.relative_to(root)), text.strip(), speaker))
        log.info("%s: %d transcribed utterances", subset, len(entries))
        splits[subset] = with_durations(entries, problems, workers)
    report_problems("librispeech", problems)
    return write_splits("librispeech", output, splits, left_out=len(problems))


def _check_subsets(subsets: Sequence[str]) -> None:
    unknown = [subset for subset in subsets if subset not in MD5]
    if unknown:
        raise DeepSpeechError(f"unknown LibriSpeech subset(s) {', '.join(unknown)}; "
                              f"choose from {', '.join(SUBSETS)}")


PREPARER = Preparer(
    "librispeech", prepare_librispeech, download_librispeech,
    help="LibriSpeech (OpenSLR 12): FLAC + *.trans.txt",
    root_help="the LibriSpeech folder (holding train-clean-100/ ...)",
    options=(
        Option("--subsets", comma_separated, ("train-clean-100", "dev-clean"),
               "comma-separated, e.g. train-clean-100,dev-clean,test-clean", download=True),
    ))
