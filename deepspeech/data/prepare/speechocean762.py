"""speechocean762: read English sentences by non-native speakers (Mandarin first
language), children and adults, 16 kHz; OpenSLR 101 (CC BY 4.0).

Layout: two Kaldi data directories whose ``wav.scp`` paths are relative to the
corpus folder::

    train/{text,wav.scp,utt2spk,spk2utt,spk2age,spk2gender}   125 speakers, 2,500 sentences
    test/...                                                  the other 125
    WAVE/SPEAKER0001/000010011.WAV

Dev speakers are carved out of ``train``, children and adults apart, so that both
are heard in dev whatever the seed: a model tuned on adults alone says nothing of
how it hears a child. ``test``, when present, becomes ``test.jsonl``. Every line
keeps its speaker's ``"age"`` (years), ``"age_group"`` (``child``/``adult``) and
``"gender"`` (``m``/``f``), which the manifest reader carries along, for error rates by
group (``deepspeech evaluate --group-by age_group --group-by gender``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path

from deepspeech.arguments import non_negative_float
from deepspeech.data.manifest import Utterance
from deepspeech.data.prepare.common import (
    Option,
    PreparedCorpus,
    Preparer,
    download,
    extract,
    raise_problems,
    speaker_count,
    split_speakers,
    write_splits,
)
from deepspeech.data.prepare.kaldi import read_kaldi_dir, read_table
from deepspeech.errors import DeepSpeechError

log = logging.getLogger(__name__)

# OpenSLR publishes no checksum; the layout is checked by prepare_speechocean762.
URL = "https://www.openslr.org/resources/101/speechocean762.tar.gz"
ADULT_AGE = 18  # younger speakers count as children (the training part's ages: 6-15, 19-37)
PARTS = ("train", "test")


def download_speechocean762(target_dir: str | os.PathLike) -> Path:
    """Download (about 520 MB) and unpack the corpus; returns its ``speechocean762`` folder."""
    target_dir = Path(target_dir)
    if not (target_dir / "speechocean762" / "train").is_dir():
        extract(download(URL, target_dir), target_dir)
    return target_dir / "speechocean762"


def prepare_speechocean762(root: str | os.PathLike, output: str | os.PathLike,
                           dev_speakers: float = 0.1, seed: int = 0,
                           workers: int = 8) -> PreparedCorpus:
    """``train``/``dev`` (speaker-disjoint, children and adults in both) and ``test``
    when present, each line with its speaker's age and gender."""
    root = Path(root)
    if not (root / "train").is_dir() and (root / "speechocean762" / "train").is_dir():
        root = root / "speechocean762"
    if not (root / "train" / "wav.scp").is_file():
        raise DeepSpeechError(f"{root}: not a speechocean762 folder (train/wav.scp missing)")
    parts = {part: _read_part(root, root / part, output, workers) for part in PARTS
             if (root / part).is_dir()}
    if "test" not in parts:
        log.info("%s: no test part (test/); writing train and dev only", root)
    train = parts["train"]
    dev = _dev_speakers({u.speaker: u.extra["age"] for u in train}, dev_speakers, seed)
    splits = {"train": [u for u in train if u.speaker not in dev],
              "dev": [u for u in train if u.speaker in dev], "test": parts.get("test", [])}
    for split, utterances in splits.items():
        ages = {u.speaker: u.extra["age"] for u in utterances}
        if ages:
            children = sum(age < ADULT_AGE for age in ages.values())
            log.info("speechocean762 %s: %d children, %d adults (a child: under %d)", split,
                     children, len(ages) - children, ADULT_AGE)
    return write_splits("speechocean762", output, splits)


def age_group(age: int) -> str:
    """``child`` under ``ADULT_AGE``, else ``adult``: the groups that dev holds both of."""
    return "child" if age < ADULT_AGE else "adult"


def _read_part(root: Path, data_dir: Path, output: str | os.PathLike,
               workers: int) -> list[Utterance]:
    """One data directory's utterances, each with ``extra`` age, age group and gender."""
    for name in ("utt2spk", "spk2age", "spk2gender"):
        if not (data_dir / name).is_file():
            raise DeepSpeechError(f"{data_dir}: {name} missing")
    utterances = read_kaldi_dir(data_dir, output, root, workers)
    problems: list[str] = []
    tables = {name: read_table(data_dir / name, what, problems)
              for name, what in (("spk2age", "age"), ("spk2gender", "gender"))}
    for speaker, entry in tables["spk2age"].items():
        if entry.value is not None and not entry.value.isdigit():
            problems.append(f"{data_dir / 'spk2age'} line {entry.line}: {speaker}: age "
                            f"{entry.value!r} is not a whole number of years")
    speakers = {u.speaker for u in utterances}
    for name, table in tables.items():
        problems += [f"{data_dir / name}: no line for speaker {speaker}"
                     for speaker in sorted(speakers - table.keys())]
    raise_problems(str(data_dir), problems)
    ages = {speaker: int(entry.value) for speaker, entry in tables["spk2age"].items()}
    return [dataclasses.replace(u, extra={"age": ages[u.speaker],
                                          "age_group": age_group(ages[u.speaker]),
                                          "gender": tables["spk2gender"][u.speaker].value})
            for u in utterances]


def _dev_speakers(ages: dict[str, int], dev: float, seed: int) -> set[str]:
    """``dev`` speakers (a count or a fraction), children and adults in proportion, at
    least one of each group there is; which ones depends on names and seed only."""
    groups = [group for group in ([s for s, age in ages.items() if age_group(age) == name]
                                  for name in ("child", "adult")) if group]
    wanted = speaker_count(dev, len(ages))
    if wanted == 0:
        return set()
    if wanted < len(groups):
        raise DeepSpeechError(f"speechocean762: {wanted} dev speaker(s) cannot hold both "
                              "children and adults; ask for at least 2 (--dev-speakers)")
    first = min(max(1, round(wanted * len(groups[0]) / len(ages))), wanted - len(groups) + 1)
    counts = [first, wanted - first][:len(groups)]
    return {speaker for group, count in zip(groups, counts, strict=True)
            for speaker in split_speakers(group, dev=count, seed=seed)["dev"]}


PREPARER = Preparer(
    "speechocean762", prepare_speechocean762, download_speechocean762,
    help="speechocean762 (OpenSLR 101): non-native read English, children and adults; "
         "train/dev split by speaker with both age groups in dev, plus test when present",
    root_help="the speechocean762 folder (train/, WAVE/)",
    options=(
        Option("--dev-speakers", non_negative_float, 0.1,
               f"dev speakers: a count (>= 2; 0: none) or a fraction of the training "
               f"speakers, drawn from children (under {ADULT_AGE}) and adults in proportion"),
        Option("--seed", int, 0, "which speakers go to dev"),
    ))
