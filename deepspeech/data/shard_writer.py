"""``deepspeech data shard``: a manifest's audio written into tar shards, resumably.

The layout and how shards are read: ``deepspeech.data.shards``. The plan (which
utterances go into which shard) follows the manifest's order and the shard size, so a run
that was interrupted, run again, finds the same shards: each is written to a temporary
file and renamed, then its index; a shard is kept when its index names the same lines and
source files (size, modification time) and its bytes still hash as the index records.
The checksums and the manifest of shards are written last.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import stat
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from deepspeech.data.manifest import iter_manifest
from deepspeech.data.shards import CHECKSUMS, MemberRef, file_sha256, member_ref
from deepspeech.errors import AudioError, ManifestError
from deepspeech.files import atomic_write, open_regular, unfinished_writes

log = logging.getLogger(__name__)

DEFAULT_SHARD_MB = 256
MANIFEST = "manifest.jsonl"
INDEX_SUFFIX = ".index.json"
INDEX_FORMAT = "deepspeech-shard-index"
INDEX_VERSION = 1
BLOCK = tarfile.BLOCKSIZE


@dataclass
class _Entry:
    """One input line: its number, its record as given, and its resolved audio file."""

    line: int
    record: dict[str, Any]
    source: str
    stat: tuple[int, int]  # size, mtime_ns


@dataclass
class _Plan:
    """One shard to write: its utterances' positions in the manifest."""

    number: int
    positions: list[int] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.number:06d}.tar"


@dataclass
class ShardSummary:
    """What ``shard_manifest`` did."""

    manifest: Path
    utterances: int
    shards: int
    written: int
    kept: int
    bytes: int

    def format(self) -> str:
        return (f"{self.manifest}: {self.utterances} utterances in {self.shards} shard(s), "
                f"{self.bytes / 1e6:.1f} MB ({self.written} written, {self.kept} kept from an "
                f"earlier run)")


class _HashingWriter:
    """A file that hashes what goes through it, so a shard is hashed as it is written."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle, self.digest, self.size = handle, hashlib.sha256(), 0

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        self.size += len(data)
        return self.handle.write(data)

    def tell(self) -> int:
        return self.size


def _read_entries(manifest: Path) -> list[_Entry]:
    """Every line of ``manifest``, checked as training checks it, its audio stat-ed."""
    # The lines as given (their numbers as iter_manifest counts them): each goes into its
    # shard and the new manifest with only its audio_filepath changed.
    parsed = list(iter_manifest(manifest))
    lines = manifest.read_text(encoding="utf-8").split("\n")
    entries = []
    for number, utterance in parsed:
        where = f"{manifest} line {number}"
        if member_ref(utterance.audio_filepath):
            raise ManifestError(f"{where}: already a shard member: "
                                f"{utterance.audio_filepath}")
        try:
            status = os.stat(utterance.audio_filepath)
        except OSError:
            raise AudioError(f"{where}: audio file missing: {utterance.audio_filepath}") from None
        if not stat.S_ISREG(status.st_mode):
            raise AudioError(f"{where}: not a regular file: {utterance.audio_filepath}")
        entries.append(_Entry(number, json.loads(lines[number - 1]), utterance.audio_filepath,
                              (status.st_size, status.st_mtime_ns)))
    if not entries:
        raise ManifestError(f"{manifest}: manifest is empty")
    return entries


def _padded(size: int) -> int:
    return -(-size // BLOCK) * BLOCK


def _plan(entries: list[_Entry], shard_bytes: int) -> list[_Plan]:
    """Consecutive utterances per shard, each shard up to ``shard_bytes`` (one larger
    utterance fills a shard of its own); a file repeated within a shard counts once."""
    plans: list[_Plan] = [_Plan(0)]
    size, seen = 0, set()
    for position, entry in enumerate(entries):
        cost = 2 * BLOCK + (0 if entry.source in seen else BLOCK + _padded(entry.stat[0]))
        if plans[-1].positions and size + cost > shard_bytes:
            plans.append(_Plan(len(plans)))
            size, seen = 0, set()
            cost = 2 * BLOCK + BLOCK + _padded(entry.stat[0])
        plans[-1].positions.append(position)
        seen.add(entry.source)
        size += cost
    return plans


def _member_stem(position: int) -> str:
    return f"{position:08d}"


def _suffix(source: str) -> str:
    return Path(source).suffix.lower() or ".audio"


def _tar_info(name: str, size: int) -> tarfile.TarInfo:
    # Fixed owner, mode and time: the same input gives the same bytes.
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, 0o644, 0
    return info


def _write_shard(folder: Path, plan: _Plan, entries: list[_Entry]) -> dict[str, Any]:
    """Write one shard atomically and return its index (not yet written)."""
    members: list[dict[str, Any]] = []
    stored: dict[str, dict[str, Any]] = {}
    with atomic_write(folder / plan.name) as handle:
        writer = _HashingWriter(handle)
        with tarfile.open(fileobj=writer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            for position in plan.positions:
                entry = entries[position]
                stem = _member_stem(position)
                if entry.source not in stored:
                    name = stem + _suffix(entry.source)
                    _add_audio(tar, name, entry)
                    size = entry.stat[0]
                    stored[entry.source] = {"name": name, "offset": tar.offset - _padded(size),
                                            "size": size}
                audio = stored[entry.source]
                metadata = (json.dumps(entry.record, ensure_ascii=False) + "\n").encode()
                tar.addfile(_tar_info(f"{stem}.json", len(metadata)), io.BytesIO(metadata))
                members.append({"line": entry.line, "audio": audio["name"],
                                "offset": audio["offset"], "size": audio["size"],
                                "source": entry.source, "source_stat": list(entry.stat)})
    return {"format": INDEX_FORMAT, "version": INDEX_VERSION, "shard": plan.name,
            "size": writer.size, "sha256": writer.digest.hexdigest(), "members": members}


def _add_audio(tar: tarfile.TarFile, name: str, entry: _Entry) -> None:
    try:
        with open_regular(entry.source) as source:
            tar.addfile(_tar_info(name, entry.stat[0]), source)
    except (OSError, ValueError) as exc:  # changed or gone since it was stat-ed
        raise AudioError(f"line {entry.line}: {entry.source}: could not be copied ({exc})"
                         ) from None


def _index_path(folder: Path, plan: _Plan) -> Path:
    return folder / f"{plan.number:06d}{INDEX_SUFFIX}"


def _complete(folder: Path, plan: _Plan, entries: list[_Entry]) -> dict[str, Any] | None:
    """The index of a shard that an earlier run finished for the same utterances and
    sources, whose bytes still hash as recorded; None if it must be written again."""
    try:
        index = json.loads(_index_path(folder, plan).read_text(encoding="utf-8"))
        members = index["members"]
        expected = [(entries[p].line, entries[p].source, list(entries[p].stat))
                    for p in plan.positions]
        if (index.get("format") != INDEX_FORMAT or index.get("version") != INDEX_VERSION
                or [(m["line"], m["source"], m["source_stat"]) for m in members] != expected):
            return None
        shard = folder / plan.name
        if shard.stat().st_size != index["size"] or file_sha256(shard) != index["sha256"]:
            log.warning("%s: does not match its index (cut short or changed): writing it "
                        "again", shard)
            return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return index


def shard_manifest(manifest: str | os.PathLike, output: str | os.PathLike,
                   shard_mb: float = DEFAULT_SHARD_MB) -> ShardSummary:
    """Pack ``manifest``'s audio into tar shards in ``output`` (module docstring).

    Each shard is written atomically, then its index; the checksums and the manifest of
    shards come last, so an interrupted run leaves no manifest that names a missing shard.
    Run again, it keeps every shard whose index matches the plan and whose bytes hash as
    the index records, and writes the rest.
    """
    manifest, folder = Path(manifest), Path(output)
    if shard_mb <= 0:
        raise ValueError(f"shard size must be positive, not {shard_mb} MB")
    entries = _read_entries(manifest)
    plans = _plan(entries, int(shard_mb * 1e6))
    folder.mkdir(parents=True, exist_ok=True)
    indexes, written = [], 0
    for plan in plans:
        for leftover in unfinished_writes(folder / plan.name):  # a run killed mid-shard
            leftover.unlink(missing_ok=True)
        index = _complete(folder, plan, entries)
        if index is None:
            index = _write_shard(folder, plan, entries)
            with atomic_write(_index_path(folder, plan), "w", encoding="utf-8") as handle:
                json.dump(index, handle, ensure_ascii=False)
            written += 1
        indexes.append(index)
    with atomic_write(folder / CHECKSUMS, "w", encoding="utf-8") as handle:
        handle.writelines(f"{index['sha256']}  {index['shard']}\n" for index in indexes)
    by_line = {entry.line: entry for entry in entries}
    with atomic_write(folder / MANIFEST, "w", encoding="utf-8") as handle:
        for index in indexes:
            for member in index["members"]:
                record = dict(by_line[member["line"]].record)
                record["audio_filepath"] = MemberRef(index["shard"], member["audio"],
                                                     member["offset"], member["size"]).path
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    return ShardSummary(folder / MANIFEST, len(entries), len(plans), written,
                        len(plans) - written, sum(index["size"] for index in indexes))
