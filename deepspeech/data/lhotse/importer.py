"""``deepspeech data import lhotse``: lhotse manifests in, one project manifest out.

Three inputs: cut files (``cuts.jsonl.gz``, ``*_cuts_*.jsonl``), a recordings file with
its supervisions file (each supervision one utterance), or a Shar folder (its audio
members written out as files). Which file is which is read from its first line, not its
name. Every cut the manifest cannot hold (``cuts.Unrepresentable``) is named with its
file, line and id; with ``bad_input="error"`` (the default) all of them make one error
and nothing is written, with ``"skip"`` they make one warning and the rest is written.

Relative source paths are relative to the folder lhotse ran in, which this cannot know:
they are resolved against ``root`` (the working folder by default, as lhotse does), and
reached through the output folder's ``source`` link, as the Kaldi preparer does.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from deepspeech.data.lhotse.cuts import (
    Unrepresentable,
    cut_utterance,
    supervision_cut,
)
from deepspeech.data.lhotse.lines import read_lines
from deepspeech.data.lhotse.shar import (
    Shard,
    audio_members,
    extract_members,
    find_shards,
    member_target,
)
from deepspeech.data.manifest import Utterance, parse_line
from deepspeech.data.prepare.common import (
    BAD_INPUT,
    PreparedCorpus,
    link_source,
    raise_problems,
    report_problems,
    write_splits,
)
from deepspeech.errors import DeepSpeechError, ManifestError

log = logging.getLogger(__name__)
Records = Iterator[tuple[str, dict]]


@dataclasses.dataclass
class _Reading:
    """What reading the inputs found: utterances (with where they came from), problems,
    Shar members to write out, fields left behind."""

    utterances: list[tuple[str, str, Utterance]] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)
    members: dict[tuple[Path, str], Path] = dataclasses.field(default_factory=dict)
    ignored: Counter = dataclasses.field(default_factory=Counter)

    def add(self, where: str, make: Callable[..., tuple[str, Utterance]], *args: Any) -> None:
        """One cut: the utterance ``make(*args)`` gives, or its problem named by ``where``."""
        try:
            kind, utterance = make(*args)
        except Unrepresentable as exc:
            self.problems.append(f"{where}: {exc}")
        else:
            self.utterances.append((where, kind, utterance))


def _kind(where: str, record: dict) -> str:
    """cuts, recordings or supervisions: what one line of a lhotse manifest is."""
    if "recording_id" in record:
        return "supervisions"
    if "supervisions" in record or "tracks" in record or str(record.get("type")).endswith("Cut"):
        return "cuts"
    if "sources" in record:
        return "recordings"
    raise DeepSpeechError(f"{where}: neither a lhotse cut, recording nor supervision (fields "
                          f"{', '.join(sorted(record))})")


def _open(path: Path) -> tuple[str, Records]:
    """The file's kind (from its first line) and all its lines."""
    lines = read_lines(path)
    first = next(lines, None)
    if first is None:
        raise DeepSpeechError(f"{path}: empty lhotse manifest")
    return _kind(*first), itertools.chain([first], lines)


def _read_cuts(lines: Records, reading: _Reading) -> None:
    for where, cut in lines:
        reading.add(f"{where}: cut {cut.get('id')}", cut_utterance, cut, reading.ignored)


def _read_supervisions(recordings: Records, supervisions: Records, reading: _Reading) -> None:
    by_id: dict[str, tuple[str, dict]] = {}
    for where, recording in recordings:
        key = recording.get("id")
        if key in by_id:
            reading.problems.append(f"{where}: recording {key} again (first at "
                                    f"{by_id[key][0]})")
        by_id.setdefault(key, (where, recording))
    used = set()
    for where, supervision in supervisions:
        named = f"{where}: supervision {supervision.get('id')}"
        key = supervision.get("recording_id")
        if key not in by_id:
            reading.problems.append(f"{named}: recording {key} is not in the recordings file")
            continue
        used.add(key)
        cut = supervision_cut(supervision, by_id[key][1])
        reading.add(named, cut_utterance, cut, reading.ignored)
    unused = [key for key in by_id if key not in used]
    if unused:
        log.warning("%d recording(s) have no supervision, so nothing to transcribe, and are "
                    "not imported (first: %s)", len(unused), ", ".join(map(str, unused[:3])))


def _read_shar(folder: Path, output: Path, reading: _Reading) -> None:
    shards = find_shards(folder)
    if not shards:
        raise DeepSpeechError(f"{folder}: a folder without Shar shards (cuts.000000.jsonl.gz); "
                              "give the cuts file, or the recordings and supervisions files")
    for shard in shards:
        cuts = list(read_lines(shard.cuts))
        members = audio_members(shard.recording) if shard.recording else None
        if members is not None and len(members) != len(cuts):
            raise DeepSpeechError(f"{shard.recording}: audio of {len(members)} cuts, but "
                                  f"{shard.cuts.name} holds {len(cuts)}")
        for index, (where, cut) in enumerate(cuts):
            member = None if members is None else (shard.recording, members[index])
            reading.add(f"{where}: cut {cut.get('id')}", _shar_cut, cut, shard, member,
                        output / "shar" / folder.resolve().name, reading)


def _shar_cut(cut: dict, shard: Shard, member: tuple[Path, str | None] | None,
              audio_dir: Path, reading: _Reading) -> tuple[str, Utterance]:
    """A Shar cut, its audio the tar member that is written out to a file for it."""
    kind, utterance = cut_utterance(cut, reading.ignored)
    if kind != "shar":
        return kind, utterance
    if member is None:
        raise Unrepresentable(f"its audio is in a Shar tar, and there is no recording tar "
                              f"beside {shard.cuts.name}")
    target = member_target(*member, str(cut.get("id")), audio_dir)
    reading.members[member] = target
    return kind, dataclasses.replace(utterance, audio_filepath=str(target))


def _read(paths: Sequence[Path], output: Path, reading: _Reading) -> str:
    """Read the inputs into ``reading``; returns the default manifest name."""
    if len(paths) == 1 and paths[0].is_dir():
        _read_shar(paths[0], output, reading)
        return paths[0].resolve().name
    opened = [(path, *_open(path)) for path in paths]
    kinds = sorted(kind for _, kind, _ in opened)
    if set(kinds) == {"cuts"}:
        for _, _, lines in opened:
            _read_cuts(lines, reading)
    elif kinds == ["recordings", "supervisions"]:
        files = {kind: lines for _, kind, lines in opened}
        _read_supervisions(files["recordings"], files["supervisions"], reading)
    else:
        raise DeepSpeechError(f"{', '.join(map(str, paths))}: {', '.join(kinds)}; give cuts "
                              "files, or one recordings file and its supervisions file, or a "
                              "Shar folder")
    named = next(path for path, kind, _ in opened if kind != "recordings")
    return named.name.removesuffix(".gz").removesuffix(".jsonl")


def _located(source: str, base: Path) -> tuple[Path, Path | None]:
    """Where a source path is, and its path inside ``base`` when it is relative and stays
    there (the manifest reaches it through the output folder's link to ``base``)."""
    if os.path.isabs(source):
        return Path(source), None
    relative = Path(os.path.normpath(source))
    if relative.parts[0] == "..":  # out of base, so not through the link: absolute
        return (base / relative).resolve(), None
    return base / relative, relative


def import_lhotse(paths: Sequence[str | os.PathLike], output: str | os.PathLike,
                  split: str | None = None, root: str | os.PathLike | None = None,
                  bad_input: str = "error") -> PreparedCorpus:
    """``OUTPUT/<split>.jsonl`` from lhotse cuts, recordings + supervisions, or a Shar folder."""
    if bad_input not in BAD_INPUT:
        raise DeepSpeechError(f"bad_input must be one of {', '.join(BAD_INPUT)}, got {bad_input!r}")
    paths, output = [Path(path) for path in paths], Path(output).resolve()
    base = Path(root) if root is not None else Path.cwd()
    reading = _Reading()
    found = _read(paths, output, reading)
    name = split or found
    if not name or "/" in name or name.startswith("."):
        raise DeepSpeechError(f"lhotse: {name!r} cannot name a manifest; give --split NAME")
    kept: list[tuple[Utterance, Path | None]] = []
    for where, kind, utterance in reading.utterances:
        inside = None
        if kind == "file":
            path, inside = _located(utterance.audio_filepath, base)
            utterance = dataclasses.replace(utterance, audio_filepath=str(path))
            if not path.is_file():
                reading.problems.append(f"{where}: {path}: audio file missing")
                continue
        try:  # the manifest's own reader is the judge of what it can hold
            parse_line(utterance.to_json(), where, output)
        except ManifestError as exc:
            reading.problems.append(str(exc))
            continue
        kept.append((utterance, inside))
    if bad_input == "error":
        raise_problems(", ".join(map(str, paths)), reading.problems)
    report_problems("lhotse", reading.problems)
    if reading.ignored:
        log.warning("lhotse: not kept, the manifest has no place for them: %s",
                    ", ".join(f"{what} ({count})" for what, count in reading.ignored.items()))
    link = link_source(base, output) if any(inside for _, inside in kept) else None
    utterances = [utterance if inside is None else
                  dataclasses.replace(utterance, audio_filepath=str(link / inside))
                  for utterance, inside in kept]
    wanted = {utterance.audio_filepath for utterance in utterances}
    for tar in dict.fromkeys(tar for tar, _ in reading.members):
        extract_members(tar, {member: target for (owner, member), target
                              in reading.members.items()
                              if owner == tar and str(target) in wanted})
    return write_splits("lhotse", output, {name: utterances}, left_out=len(reading.problems))
