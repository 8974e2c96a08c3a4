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
and inode are those recorded (``stat`` follows links: a rewritten target counts).
Entries are per file, not per manifest, because a file's facts do not depend on the
manifest: a line added to a 280,000-line manifest re-probes one file, not all. The
manifest's SHA-256 is recorded to tell, in the log, an unchanged manifest from an
edited one. A file that cannot be stat-ed (missing) is probed every time (cheap).

Where: ``$DEEPSPEECH_CACHE_DIR``, else ``$XDG_CACHE_HOME/deepspeech/probes``, else
``~/.cache/deepspeech/probes``; deleting the folder clears it. Format: JSON, two
lines: a header (format name, version, the body's SHA-256) and the body. A file that
fails the checksum, the format or the settings is ignored with a warning; writes are
atomic (``files.atomic_write``); a folder that cannot be written only warns.
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
from pathlib import Path
from typing import Any, Protocol

import soundfile as sf
import torch

from deepspeech.data.probe import AudioFacts, probe_files
from deepspeech.files import atomic_write

log = logging.getLogger(__name__)

FORMAT = "deepspeech-probe-cache"
FORMAT_VERSION = 1
# Raise when probe_audio's findings or messages change: every cached entry is then stale.
PROBE_VERSION = 1
ENV_DIR = "DEEPSPEECH_CACHE_DIR"
# Probing is bound by the GIL (threads gain nothing past one): from this many files on, a
# rank with several cores of its own probes in that many processes.
PROCESS_THRESHOLD = 10_000

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


def cache_dir() -> Path:
    """``$DEEPSPEECH_CACHE_DIR``, else ``$XDG_CACHE_HOME/deepspeech/probes``, else
    ``~/.cache/deepspeech/probes``."""
    if os.environ.get(ENV_DIR):
        return Path(os.environ[ENV_DIR])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "deepspeech" / "probes"


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
    try:
        status = os.stat(path)
    except OSError:
        return None
    return (status.st_size, status.st_mtime_ns, status.st_ino) if status.st_size else None


def _facts_to_json(facts: AudioFacts) -> list:
    return [facts.frames, facts.sample_rate, facts.channels, facts.peak,
            [list(p) for p in facts.problems]]


def _facts_from_json(row: list) -> AudioFacts:
    frames, rate, channels, peak, problems = row
    return AudioFacts(frames, rate, channels, peak, [(k, m) for k, m in problems])


def read_cache(path: Path, settings: dict[str, Any]) -> tuple[dict[str, list], str | None]:
    """The entries of a cache file (``{audio: [size, mtime_ns, inode, facts]}``) and the
    manifest digest it recorded; empty, with a warning, if it is damaged or stale."""
    try:
        with path.open("rb") as handle:
            header, body = handle.readline(), handle.read()
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        log.warning("probe cache %s unreadable (%s): probing again", path, exc)
        return {}, None
    try:
        meta = json.loads(header)
        if meta.get("format") != FORMAT or meta.get("version") != FORMAT_VERSION:
            raise ValueError(f"format {meta.get('format')!r} version {meta.get('version')!r}, "
                             f"expected {FORMAT!r} version {FORMAT_VERSION}")
        if hashlib.sha256(body).hexdigest() != meta.get("sha256"):
            raise ValueError("checksum mismatch (truncated or corrupt)")
        content = json.loads(body)
        if content.get("settings") != settings:
            raise ValueError("written with other probe settings")
        return content["entries"], content.get("manifest_sha256")
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        log.warning("probe cache %s ignored: %s; probing again", path, exc)
        return {}, None


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
                    "to a writable folder", path, exc, ENV_DIR)


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
    parts = [paths[i::cores] for i in range(cores)]
    with ProcessPoolExecutor(cores, mp_context=multiprocessing.get_context(method)) as pool:
        found = list(pool.map(probe_files, parts, [decode] * cores, [silence_db] * cores,
                              [2] * cores))
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
    rows: list[list | None] = [None] * len(mine)
    to_probe = []
    for i, (path, stat) in enumerate(zip(mine, stats, strict=True)):
        entry = cached.get(path)
        if stat is not None and entry is not None and tuple(entry[:3]) == stat:
            rows[i] = entry[3]
        else:
            to_probe.append(i)
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
