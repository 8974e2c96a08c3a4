"""``deepspeech data export lhotse``: one project manifest out as lhotse manifests.

Writes ``recordings.jsonl.gz`` (one recording per audio file: its sampling rate, samples
and channels from the file's header, read by ``probe.probe_audio`` without decoding),
``supervisions.jsonl.gz`` (one per utterance) and ``cuts.jsonl.gz`` (one cut per
supervision, spanning it, as ``trim_to_supervisions`` makes them), which lhotse loads
with ``CutSet.from_file`` and ``RecordingSet``/``SupervisionSet.from_file``.

Sources are absolute paths: lhotse resolves a relative one against the folder it runs
in, not against the manifest. A recording's id is its file's path relative to the
manifest's folder, without the suffix (``clips/a`` for ``clips/a.wav``): the same
manifest gives the same ids, and two files that would share one (``a.wav``, ``a.flac``)
both keep their suffix. A supervision's id is its recording's when it is the only
utterance of a whole file, else ``REC-START-END`` in milliseconds. A whole-file utterance
lasts what the header says, whatever the manifest's duration.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from deepspeech.data.lhotse.lines import write_lines
from deepspeech.data.manifest import Utterance, iter_manifest
from deepspeech.data.prepare.common import raise_problems
from deepspeech.data.probe import UNREADABLE, AudioFacts, probe_files, segment_problems
from deepspeech.errors import ManifestError

# Extra manifest fields that are fields of a lhotse supervision; the rest go to ``custom``.
SUPERVISION_FIELDS = ("language", "gender")


@dataclass(frozen=True)
class Exported:
    """What ``export_lhotse`` wrote, for the command's summary."""

    output: Path
    recordings: int
    supervisions: int

    def format(self) -> str:
        return (f"lhotse: {self.recordings} recordings, {self.supervisions} supervisions and "
                f"cuts -> {self.output}/{{recordings,supervisions,cuts}}.jsonl.gz")


def recording_ids(paths: Sequence[str], base: Path) -> dict[str, str]:
    """Audio path -> recording id (see the module's note)."""
    def named(path: str, suffix: bool) -> str:
        relative = Path(path)
        relative = (relative.relative_to(base) if relative.is_relative_to(base)
                    else relative.relative_to(relative.anchor))
        return (relative if suffix else relative.with_suffix("")).as_posix()

    unique = list(dict.fromkeys(paths))
    counts = Counter(named(path, False) for path in unique)
    return {path: named(path, counts[named(path, False)] > 1) for path in unique}


def _recording(key: str, path: str, facts: AudioFacts) -> dict:
    channels = list(range(facts.channels))
    return {"id": key, "sources": [{"type": "file", "channels": channels,
                                    "source": os.path.abspath(path)}],
            "sampling_rate": facts.sample_rate, "num_samples": facts.frames,
            "duration": facts.seconds, "channel_ids": channels}


def _supervision(key: str, recording: dict, utterance: Utterance) -> dict:
    seconds = recording["duration"]
    start = utterance.offset or 0.0
    # An offset segment may overshoot its file by the probe's tolerance: lhotse's may not.
    duration = seconds if utterance.offset is None else min(utterance.duration, seconds - start)
    channels = recording["channel_ids"]
    record = {"id": key, "recording_id": recording["id"], "start": start, "duration": duration,
              "channel": channels[0] if len(channels) == 1 else channels,
              "text": utterance.text}
    custom = {}
    for field, value in utterance.extra.items():
        if field in SUPERVISION_FIELDS and isinstance(value, str):
            record[field] = value
        else:
            custom[field] = value
    if utterance.speaker is not None:
        record["speaker"] = utterance.speaker
    if custom:
        record["custom"] = custom
    return record


def _cut(supervision: dict, recording: dict) -> dict:
    """The cut spanning one supervision, whose times inside it start at 0."""
    return {"id": supervision["id"], "start": supervision["start"],
            "duration": supervision["duration"], "channel": supervision["channel"],
            "supervisions": [{**supervision, "start": 0.0}], "recording": recording,
            "type": "MonoCut" if len(recording["channel_ids"]) == 1 else "MultiCut"}


def _problems(manifest: Path, lines: list[tuple[int, Utterance]],
              facts: dict[str, AudioFacts]) -> list[str]:
    problems = []
    for number, utterance in lines:
        found = facts[utterance.audio_filepath]
        for kind, message in found.problems + segment_problems(utterance, found):
            if kind in UNREADABLE:
                problems.append(f"{manifest} line {number}: {utterance.audio_filepath}: "
                                f"{message}")
                break
    return problems


def export_lhotse(manifest: str | os.PathLike, output: str | os.PathLike,
                  workers: int = 8) -> Exported:
    """Write the three lhotse manifests of ``manifest`` into ``output``."""
    manifest, output = Path(manifest), Path(output)
    lines = list(iter_manifest(manifest))
    if not lines:
        raise ManifestError(f"{manifest}: manifest is empty")
    facts = probe_files([utterance.audio_filepath for _, utterance in lines], workers=workers)
    raise_problems(str(manifest), _problems(manifest, lines, facts))
    ids = recording_ids([utterance.audio_filepath for _, utterance in lines],
                        manifest.resolve().parent)
    recordings = {path: _recording(key, path, facts[path]) for path, key in ids.items()}
    per_file = Counter(utterance.audio_filepath for _, utterance in lines)
    supervisions, cuts, taken = [], [], Counter()
    for _, utterance in lines:
        recording = recordings[utterance.audio_filepath]
        if utterance.offset is None and per_file[utterance.audio_filepath] == 1:
            key = recording["id"]
        else:
            start = utterance.offset or 0.0
            end = start + utterance.duration
            key = f"{recording['id']}-{round(start * 1000):07d}-{round(end * 1000):07d}"
        taken[key] += 1
        key = key if taken[key] == 1 else f"{key}-{taken[key]}"
        supervisions.append(_supervision(key, recording, utterance))
        cuts.append(_cut(supervisions[-1], recording))
    output.mkdir(parents=True, exist_ok=True)
    write_lines(output / "recordings.jsonl.gz", recordings.values())
    write_lines(output / "supervisions.jsonl.gz", supervisions)
    write_lines(output / "cuts.jsonl.gz", cuts)
    return Exported(output, len(recordings), len(supervisions))
