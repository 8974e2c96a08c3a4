"""One lhotse cut (or one supervision of a recording) as one manifest utterance.

The manifest can say "this stretch of this file, all its channels mixed to mono, says
this": a cut that holds one supervision over a recording read from one local file, on all
of that file's channels. Everything else raises ``Unrepresentable``, whose message says
what the cut holds and how to turn it into something the project reads (lhotse's own
calls, mostly). The importer collects those messages per cut; nothing is dropped unsaid.

Which channels the audio has is decided by the cut (what lhotse's ``cut.load_audio()``
returns); a supervision's own ``channel`` is not consulted inside a cut, since
``CutSet.from_manifests`` leaves it at 0 on every multi-channel recording. A supervision
read beside its recording (no cuts) is its own cut, on its own channels.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from deepspeech.data.manifest import OPTIONAL_FIELDS, REQUIRED_FIELDS, Utterance

# A supervision may end this far past its recording (lhotse rounds durations to whole
# samples; its own validation allows 25 ms); the utterance is cut at the recording's end.
END_TOLERANCE = 0.025
# A supervision that starts within this of 0 and ends within it of the recording's end is
# the whole file: the utterance has no offset and is read as the file.
WHOLE_FILE = 0.001
CUT_TYPES = ("MonoCut", "MultiCut")
OWN_FIELDS = REQUIRED_FIELDS + OPTIONAL_FIELDS
TRIM = "split them with cuts.trim_to_supervisions(keep_overlapping=False) and import that"
SAVE = "write the audio of each cut to files with cuts.save_audios(DIR) and import that"


class Unrepresentable(Exception):
    """A cut the manifest cannot hold; the message says why and what to do."""


def _number(record: dict, key: str, what: str) -> float:
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise Unrepresentable(f"{what} has no valid {key!r} (got {value!r})")
    return float(value)


def _channels(value: Any) -> list[int]:
    return sorted(value) if isinstance(value, list) else [value]


def recording_file(recording: dict, channels: list[int]) -> tuple[str, str]:
    """``(source type, source)`` of a recording stored as one file (or a Shar member),
    checked to need no channel selection and no transform the audio reader lacks."""
    sources = recording.get("sources")
    name = recording.get("id")
    if not isinstance(sources, list) or not sources:
        raise Unrepresentable(f"recording {name} has no audio source")
    if len(sources) > 1:
        raise Unrepresentable(f"recording {name} has {len(sources)} audio sources (one file "
                              f"per channel); the project reads one file a recording: {SAVE}")
    kind, source = sources[0].get("type"), sources[0].get("source")
    if kind == "url":
        raise Unrepresentable(f"recording {name} is at a URL ({source}); download it and "
                              "point the source at the file (type 'file')")
    if kind == "command":
        raise Unrepresentable(f"recording {name} comes from a command ({source!r}); run it to "
                              "write the audio to a file and point the source at that")
    if kind == "memory":
        raise Unrepresentable(f"recording {name} is held in memory, not in a file: {SAVE}")
    if kind not in ("file", "shar") or not isinstance(source, str):
        raise Unrepresentable(f"recording {name} has an audio source of type {kind!r}, which "
                              f"the project cannot read: {SAVE}")
    transforms = [t.get("name", "?") if isinstance(t, dict) else "?"
                  for t in recording.get("transforms") or []]
    # Resampling changes nothing in seconds, and the audio reader resamples anyway.
    applied = [t for t in transforms if t != "Resample"]
    if applied:
        raise Unrepresentable(f"recording {name} has transforms ({', '.join(applied)}) that "
                              f"the project's audio reader does not apply: {SAVE}")
    recorded = recording.get("channel_ids") or sources[0].get("channels") or [0]
    if sorted(recorded) != channels:
        raise Unrepresentable(
            f"uses channel(s) {', '.join(map(str, channels))} of recording {name}, which has "
            f"channels {', '.join(map(str, sorted(recorded)))}; the audio reader mixes all of "
            f"a file's channels: {SAVE}")
    return kind, source


def _extra(cut: dict, supervision: dict, ignored: Counter) -> dict[str, Any]:
    """language, gender and custom fields (the cut's, then the supervision's) as extra keys."""
    extra: dict[str, Any] = {}
    for custom in (cut.get("custom"), supervision.get("custom")):
        for key, value in (custom or {}).items():
            if isinstance(value, dict) and "storage_type" in value:
                ignored[f"custom array {key!r}"] += 1  # features or codes, not text
                continue
            extra[key] = value
    for key in ("language", "gender"):
        if supervision.get(key) is not None:
            extra[key] = supervision[key]
    clash = [key for key in extra if key in OWN_FIELDS]
    if clash:
        raise Unrepresentable(f"custom field(s) {', '.join(map(repr, clash))} would overwrite "
                              "the manifest's own; rename them")
    if supervision.get("alignment"):
        ignored["supervision alignment"] += 1
    return extra


def cut_utterance(cut: dict, ignored: Counter) -> tuple[str, Utterance]:
    """``(source type, utterance)`` of a one-supervision cut. The utterance's
    ``audio_filepath`` is the source as written: a path (relative ones are relative to
    where lhotse ran) for ``"file"``, nothing yet for ``"shar"`` (audio in a Shar tar)."""
    cut_type = cut.get("type")
    if cut_type == "MixedCut":
        raise Unrepresentable("a MixedCut (cuts mixed, padded or overlapped), whose audio is "
                              f"made when loaded, not read from one file: {SAVE}")
    if cut_type not in CUT_TYPES:
        raise Unrepresentable(f"a cut of type {cut_type!r}, not one of {', '.join(CUT_TYPES)}")
    supervisions = cut.get("supervisions") or []
    if not supervisions:
        raise Unrepresentable("no supervision, so no transcript; leave it out "
                              "(cuts.filter(lambda c: c.supervisions)) and import the rest")
    if len(supervisions) > 1:
        raise Unrepresentable(f"{len(supervisions)} supervisions in one cut; a manifest line "
                              f"holds one transcript: {TRIM}")
    recording = cut.get("recording")
    if not isinstance(recording, dict):
        raise Unrepresentable("no recording (features only?); the project reads audio")
    if cut.get("features"):
        ignored["cut features"] += 1
    supervision = supervisions[0]
    text = supervision.get("text")
    if not isinstance(text, str):
        raise Unrepresentable(f"supervision {supervision.get('id')} has no text")
    kind, source = recording_file(recording, _channels(cut.get("channel", 0)))
    seconds = _number(recording, "duration", f"recording {recording.get('id')}")
    start = _number(cut, "start", "the cut") + _number(supervision, "start", "the supervision")
    duration = _number(supervision, "duration", "the supervision")
    if start < -WHOLE_FILE or duration <= 0:
        raise Unrepresentable(f"supervision span {start:g} s + {duration:g} s is not inside "
                              f"recording {recording.get('id')}")
    start, end = max(start, 0.0), start + duration
    if end > seconds + END_TOLERANCE:
        raise Unrepresentable(f"supervision {start:.3f}-{end:.3f} s runs past the end of "
                              f"recording {recording.get('id')} ({seconds:.3f} s)")
    end = min(end, seconds)
    whole = start <= WHOLE_FILE and abs(end - seconds) <= WHOLE_FILE
    speaker = supervision.get("speaker")
    return kind, Utterance(source, text, end - start, offset=None if whole else start,
                           speaker=None if speaker is None else str(speaker),
                           extra=_extra(cut, supervision, ignored))


def supervision_cut(supervision: dict, recording: dict) -> dict:
    """A supervision beside its recording (a SupervisionSet) as the cut it makes alone."""
    return {"type": "MonoCut", "id": supervision.get("id"), "start": 0.0,
            "channel": supervision.get("channel", 0), "recording": recording,
            "supervisions": [supervision]}
