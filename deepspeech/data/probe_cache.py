"""The pre-flight's audio probes, shared across ranks and kept between runs.

Before step one the trainer opens every audio file (``probe.probe_files``) to name
what training could not load. At a thousand hours that is minutes, and every rank
and every resume used to repeat it. Here each rank probes its share of the distinct
files (``files[rank::size]``), the facts are gathered to every rank, and the facts
are written to a cache that the next run, a resume, or another rank, reads instead.

What is cached is each file's ``AudioFacts`` (frames, rate, channels, peak, problems),
never a verdict: the verdict (which utterances are dropped, offsets past the end, too
short for the features) is computed from the facts and the manifest's lines every
time, by the same code as without a cache, so it is bit-for-bit the same.

Keys. One cache file per manifest (its resolved path) and probe settings (headers or
full decode, the silence threshold, ``PROBE_VERSION``, the libsndfile version); in
it, one entry per audio file, valid while the file's size, modification time (ns)
and inode are those recorded (``stat`` follows links: a rewritten target counts; a shard
member's are its shard's, ``deepspeech.data.shards``).
Entries are per file, not per manifest, because a file's facts do not depend on the
manifest: a line added to a 280,000-line manifest re-probes one file, not all. The
manifest's SHA-256 is recorded to tell, in the log, an unchanged manifest from an
edited one. A file that cannot be stat-ed (missing) is probed every time (cheap).

Where: ``$DEEPSPEECH_CACHE_DIR``, else ``$XDG_CACHE_HOME/deepspeech/probes``, else
``~/.cache/deepspeech/probes``; deleting the folder clears it. Format: JSON, two
lines: a header (format name, version, the body's SHA-256) and the body. A file that
fails the checksum, the format, the settings or the shape of an entry, or is no regular
file (a FIFO would block its reader, a link to /dev/zero never end), is ignored with a
warning; writes are atomic (``files.atomic_write``); a folder that cannot be written
only warns.

Distrust. A file can change without its size, mtime or inode showing it (rewritten in
place with its mtime put back, bit rot): a loader that fails to decode a file calls
``distrust``, which leaves a marker in ``distrusted/`` (one small file per audio file,
written atomically: ranks and loader workers never contend for the cache files) that
keeps every cache file, of every manifest and check mode, from vouching for it while it
stays as it is: ``deepspeech data check`` then decodes it again and names it. A marker
goes once its file changes or disappears.
"""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing
import os
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from itertools import repeat
from pathlib import Path
from typing import Any, Protocol

import soundfile as sf
import torch

from deepspeech.data.probe import AudioFacts, probe_files
from deepspeech.data.shards import stored_file
from deepspeech.errors import AudioError
from deepspeech.files import CACHE_DIR_VARIABLE, atomic_write, cache_dir, open_regular

log = logging.getLogger(__name__)

FORMAT = "deepspeech-probe-cache"
FORMAT_VERSION = 1
# Raise when probe_audio's findings or messages change: every cached entry is then stale.
PROBE_VERSION = 1
DISTRUSTED = "distrusted"  # the cache folder's sub-folder of distrust markers
# Probing is bound by the GIL (threads gain nothing past one): from this many files on, a
# rank with several cores of its own probes in that many processes.
PROCESS_THRESHOLD = 10_000
PROCESS_PART = 1_000  # files a probing process takes at a time

Stat = tuple[int, int, int]  # size, mtime_ns, inode


class Ranks(Protocol):
    """The part of ``training.sync.GradientSync`` the probes need (data sits below training)."""

    rank: int
    size: int

    def gather_objects(self, value: Any) -> list[Any]:
        """Every rank's ``value`` in rank order, on every rank."""


class _OneProcess:
    rank, size = 0, 1

    def gather_objects(self, value: Any) -> list[Any]:
        return [value]


def probe_settings(decode: bool, silence_db: float = -60.0) -> dict[str, Any]:
    """Everything besides the file itself that changes what a probe finds."""
    return {"decode": decode, "silence_db": silence_db if decode else None,
            "probe_version": PROBE_VERSION, "libsndfile": sf.__libsndfile_version__}


def cache_path(manifest: str, settings: dict[str, Any], folder: Path | None = None) -> Path:
    """The cache file of ``manifest`` probed with ``settings``: named after the manifest,
    so that it can be found and deleted alone."""
    resolved = os.path.realpath(manifest)
    key = hashlib.sha256(json.dumps([resolved, settings], sort_keys=True).encode()).hexdigest()
    return (folder or cache_dir()) / f"{Path(manifest).stem}-{key[:16]}.json"


def _stat(path: str) -> Stat | None:
    # A shard member changes with its shard: the shard's stat stands for it.
    try:
        status = os.stat(stored_file(path))
    except OSError:
        return None
    return (status.st_size, status.st_mtime_ns, status.st_ino) if status.st_size else None


def _facts_to_json(facts: AudioFacts) -> list:
    return [facts.frames, facts.sample_rate, facts.channels, facts.peak,
            [list(p) for p in facts.problems]]


def _facts_from_json(row: list) -> AudioFacts:
    frames, rate, channels, peak, problems = row
    return AudioFacts(frames, rate, channels, peak, [(k, m) for k, m in problems])


def _facts_row_error(row: Any) -> str | None:
    """What is wrong with a cached ``_facts_to_json`` row, or None: the checksum only
    proves that the file is as it was written, not that its writer wrote facts. (``type``,
    not ``isinstance``: JSON's true and false are ints to isinstance; and a million rows
    are checked at the start of a run.)"""
    if type(row) is not list or len(row) != 5:
        return "facts are not a list of 5"
    frames, rate, channels, peak, problems = row
    if type(frames) is not int or type(rate) is not int or type(channels) is not int:
        return "frames, rate or channels not an integer"
    if peak is not None and type(peak) is not float and type(peak) is not int:
        return "peak not a number"
    if type(problems) is not list or (problems and not all(
            type(p) is list and len(p) == 2 and type(p[0]) is str and type(p[1]) is str
            for p in problems)):
        return "problems not a list of [kind, message] pairs"
    return None


def _reusable(path: str, entry: Any, stat: Stat | None) -> list | None:
    """The cached facts row of ``path`` if its entry's size, mtime and inode are the file's
    ``stat``, else None; a malformed entry raises ``ValueError`` naming ``path``."""
    if stat is None or entry is None:
        return None
    if (type(entry) is not list or len(entry) != 4 or type(entry[0]) is not int
            or type(entry[1]) is not int or type(entry[2]) is not int):
        problem = "not a list of size, mtime, inode and facts"
    else:
        problem = _facts_row_error(entry[3])
    if problem:
        raise ValueError(f"malformed entry for {path}: {problem}")
    return entry[3] if tuple(entry[:3]) == stat else None


def read_cache(path: Path, settings: dict[str, Any]) -> tuple[dict[str, list], str | None]:
    """The entries of a cache file (``{audio: [size, mtime_ns, inode, facts]}``) and the
    manifest digest it recorded; empty, with a warning, if it is damaged or stale. Files
    that ``distrust`` marked are left out. Entries are checked where they are used
    (``_reusable``): a rank reads only its share of them."""
    try:
        with open_regular(path) as handle:
            header, body = handle.readline(), handle.read()
        meta = json.loads(header)
        if meta.get("format") != FORMAT or meta.get("version") != FORMAT_VERSION:
            raise ValueError(f"format {meta.get('format')!r} version {meta.get('version')!r}, "
                             f"expected {FORMAT!r} version {FORMAT_VERSION}")
        if hashlib.sha256(body).hexdigest() != meta.get("sha256"):
            raise ValueError("checksum mismatch (truncated or corrupt)")
        content = json.loads(body)
        if not isinstance(content, dict):
            raise ValueError("the body is not a JSON object")
        if content.get("settings") != settings:
            raise ValueError("written with other probe settings")
        entries, manifest_sha = content.get("entries"), content.get("manifest_sha256")
        if not isinstance(entries, dict) or not isinstance(manifest_sha, str):
            raise ValueError("entries not an object or the manifest digest not a string")
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        log.warning("probe cache %s unreadable (%s): probing again", path, exc)
        return {}, None
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        log.warning("probe cache %s ignored: %s; probing again", path, exc)
        return {}, None
    for audio in _distrusted(path.parent / DISTRUSTED):
        entries.pop(audio, None)
    return entries, manifest_sha


def distrust(path: str, error: AudioError) -> AudioError:
    """Keep every probe cache from vouching for ``path``, whose decoding just failed with
    ``error``, while the file stays as it is now; returns the error to raise: ``error``,
    or where the cache folder cannot be written, ``error`` with how to check anyway."""
    stat = _stat(path)
    if stat is None:  # missing or empty: never cached
        return error
    key = hashlib.sha256(json.dumps([path, stat]).encode()).hexdigest()
    marker = cache_dir() / DISTRUSTED / f"{key[:32]}.json"
    try:
        if not marker.is_file():  # a file skipped every epoch is marked once
            with atomic_write(marker, "w", encoding="utf-8") as handle:
                json.dump({"audio": path, "stat": stat}, handle)
    except OSError as exc:
        log.warning("probe cache folder %s not told that %s fails to decode (%s)",
                    cache_dir(), path, exc)
        return AudioError(f"{error} (the probe cache in {cache_dir()} could not be told and "
                          "still calls this file sound: give `deepspeech data check` "
                          "--no-cache)")
    return error


def _distrusted(folder: Path) -> list[str]:
    """The files ``distrust`` marked that are still as they were then; the markers of
    files changed or gone since are deleted (size, mtime or inode now tell)."""
    try:
        markers = [m for m in os.scandir(folder)
                   if m.name.endswith(".json") and not m.name.startswith(".")]  # not temps
    except OSError:  # none yet, most often
        return []
    found = []
    for marker in markers:
        try:
            with open_regular(Path(marker.path)) as handle:
                record = json.loads(handle.read(1 << 16))
            audio, stat = record["audio"], tuple(record["stat"])
            if not isinstance(audio, str):
                raise TypeError("audio not a string")
        except (OSError, ValueError, TypeError, KeyError) as exc:
            log.warning("probe cache marker %s ignored: %s", marker.path, exc)
            continue
        if _stat(audio) == stat:
            found.append(audio)
        else:
            Path(marker.path).unlink(missing_ok=True)
    return found


def write_cache(path: Path, settings: dict[str, Any], manifest_sha256: str,
                entries: dict[str, list]) -> None:
    """Write a cache file atomically; a failure (read-only disk, full disk) only warns."""
    body = json.dumps({"settings": settings, "manifest_sha256": manifest_sha256,
                       "entries": entries}, separators=(",", ":")).encode()
    header = json.dumps({"format": FORMAT, "version": FORMAT_VERSION,
                         "sha256": hashlib.sha256(body).hexdigest()}).encode()
    try:
        with atomic_write(path) as handle:
            handle.write(header + b"\n")
            handle.write(body)  # not joined first: a body is about 110 MB at 1M files
    except OSError as exc:
        log.warning("probe cache not saved to %s (%s): the next run probes again; set %s "
                    "to a writable folder", path, exc, CACHE_DIR_VARIABLE)


def file_sha256(path: str) -> str:
    """SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _own_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _probe_in_parallel(paths: list[str], decode: bool, silence_db: float,
                       workers: int, progress: bool = False) -> dict[str, AudioFacts]:
    """``probe_files``, split over one process per core this process may run on (a rank
    that mpirun bound to one core probes alone); a progress bar only in one process."""
    cores = _own_cores()
    if len(paths) < PROCESS_THRESHOLD or cores < 2:
        return probe_files(paths, decode=decode, silence_db=silence_db, workers=workers,
                           progress=progress)
    # Forked like the data loader's workers, unless this process has used CUDA.
    method = "forkserver" if torch.cuda.is_initialized() else "fork"
    # Many parts, not one per core: a stop request waits for the parts begun, not for all.
    parts = [paths[i:i + PROCESS_PART] for i in range(0, len(paths), PROCESS_PART)]
    pool = ProcessPoolExecutor(cores, mp_context=multiprocessing.get_context(method))
    try:
        found = list(pool.map(probe_files, parts, repeat(decode), repeat(silence_db),
                              repeat(2)))
    finally:
        pool.shutdown(cancel_futures=True)
    facts = {}
    for part in found:
        facts.update(part)
    return facts


def _entries(unique: list[str], shares: list[tuple], size: int) -> dict[str, list]:
    """The cache's entries, ``{audio: [size, mtime_ns, inode, facts]}``: every file that
    could be stat-ed (a missing one is probed again next time)."""
    entries = {}
    for i, path in enumerate(unique):
        stats, rows, _ = shares[i % size]
        stat = stats[i // size]
        if stat is not None:
            entries[path] = [*stat, rows[i // size]]
    return entries


def shared_probe(paths: Sequence[str], manifest: str, decode: bool = False,
                 sync: Ranks | None = None, workers: int = 8,
                 silence_db: float = -60.0, use_cache: bool = True,
                 progress: bool = False) -> dict[str, AudioFacts]:
    """``probe_files(paths)``, the same on every rank, each rank probing only its share of
    the files that the cache of ``manifest`` does not hold. Collective under ``sync``."""
    sync = sync or _OneProcess()
    start = time.monotonic()
    unique = list(dict.fromkeys(paths))
    settings = probe_settings(decode, silence_db)
    target = cache_path(manifest, settings)
    cached, recorded_sha = read_cache(target, settings) if use_cache else ({}, None)

    mine = unique[sync.rank::sync.size]
    stats = [_stat(p) for p in mine]
    try:
        rows = [_reusable(path, cached.get(path), stat)
                for path, stat in zip(mine, stats, strict=True)]
    except ValueError as exc:
        log.warning("probe cache %s ignored: %s; probing again", target, exc)
        rows = [None] * len(mine)
    to_probe = [i for i, row in enumerate(rows) if row is None]
    probed = _probe_in_parallel([mine[i] for i in to_probe], decode, silence_db, workers,
                                progress)
    for i in to_probe:
        rows[i] = _facts_to_json(probed[mine[i]])
    log.debug("rank %d: %d of %d audio files probed, %d from the cache", sync.rank,
              len(to_probe), len(mine), len(mine) - len(to_probe))

    shares = sync.gather_objects((stats, rows, len(to_probe)))
    cached_count = len(cached)
    del cached  # about half a kilobyte a file: gone before the facts are built
    # Rank r probed unique[r::size], so file i is entry i // size of rank i % size's share.
    facts = {path: _facts_from_json(shares[i % sync.size][1][i // sync.size])
             for i, path in enumerate(unique)}
    probed_total = sum(share[2] for share in shares)
    if sync.rank == 0:
        manifest_sha = file_sha256(manifest) if use_cache else ""
        changed = recorded_sha is not None and recorded_sha != manifest_sha
        log.info("%s: %d audio file(s) checked in %.1f s: %d probed on %d rank(s), %d from "
                 "the cache%s", manifest, len(unique), time.monotonic() - start, probed_total,
                 sync.size, len(unique) - probed_total,
                 " (manifest changed since it was cached)" if changed else "")
        statted = sum(stat is not None for share in shares for stat in share[0])
        if use_cache and (probed_total or recorded_sha != manifest_sha
                          or statted != cached_count):
            write_cache(target, settings, manifest_sha, _entries(unique, shares, sync.size))
    return facts
