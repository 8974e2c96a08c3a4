"""Audio packed into tar shards, read back by byte range: fewer, larger files for shared
file systems, where every open of a small file is a metadata round trip.

Layout of a shard folder (``deepspeech data shard MANIFEST -o DIR``,
``deepspeech.data.shard_writer``)::

    DIR/000000.tar          POSIX (ustar) tar: per utterance NNNNNNNN.<ext>, the original
                            audio file's bytes unchanged, and NNNNNNNN.json, its manifest
                            line as given (WebDataset's pairing: same stem)
    DIR/000000.index.json   the shard's size, SHA-256, and each member's data offset and
                            size, so that a reader seeks and reads without parsing the tar
    DIR/SHA256SUMS          every shard's SHA-256 (``sha256sum -c SHA256SUMS`` checks them)
    DIR/manifest.jsonl      the input manifest, line for line in its order, each line's
                            ``audio_filepath`` naming a shard member's byte range

A member's path is the shard's path, then ``#``, the member's name, ``@``, the offset of
its data in the tar and ``+`` its size: ``000003.tar#00000042.flac@1536+32044``. The
whole location is in the one field that every reader of a manifest already passes around
(training, evaluation, ``data check``, the probe cache, the noise sets), so each one takes
a sharded manifest as it is; relative to the manifest's folder like any other path; and
unique per utterance, so duplicate detection and the probe cache keep working. An
utterance that uses the same file as an earlier one in its shard (segments of one long
recording, each with its ``offset``) points at that one's member: the file is stored once
per shard.

Reading. Each process keeps the shards it reads open (up to ``OPEN_SHARDS``, least
recently used first out) and reads a member with one ``pread``: no seek shared between the
threads of a probe, or with forked workers that inherit a handle. So the files a loader
opens per epoch are at most shards x workers, where a worker can hold every shard.

Order. Training reads members in the order its sampler asks for (``data.shards.order``):
``offset`` draws each batch from across the corpus, as for loose files, and trains to the
loose manifest's bits; ``sequential`` has each process read whole shards, one after
another, through a shuffle buffer (``deepspeech.data.shard_stream``), for stores where
only large sequential reads are cheap; it is another order, so other weights.

Integrity, the policy: the first open of a shard in a process costs one ``fstat``, and a
member past its end is refused, naming the shard and the member ("cut short"). Checksums
cost a read of the whole shard, so they are verified where whole shards are read anyway:
``deepspeech data check`` (against ``SHA256SUMS`` beside the shards; ``--quick`` skips
it) and ``data shard`` when it resumes (``shard_writer``). Training trusts a shard that
``data check`` passed: hashing every shard in every worker would read the corpus once per
worker.
"""

from __future__ import annotations

import collections
import hashlib
import io
import os
import re
import resource
import stat
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deepspeech.errors import AudioError, ManifestError
from deepspeech.files import open_regular

OPEN_SHARDS = 256
"""Most shards a process keeps open (``open_shard_limit``). In the ``offset`` order the
sampler draws each batch from across the corpus, so only a worker that holds every shard
it reads opens each once an epoch; at the default shard size 256 shards are 64 GB of
audio. A larger corpus wants larger shards, or it reopens the least recently used ones."""
WHOLE_MEMBER_BYTES = 1 << 20
"""Largest member that ``member_file`` reads whole: every utterance-length clip."""
CHECKSUMS = "SHA256SUMS"
HASH_CHUNK = 1 << 20
_MEMBER = re.compile(r"^(?P<shard>.+\.tar)#(?P<member>[^/#@]+)@(?P<offset>\d+)\+(?P<size>\d+)$")


@dataclass(frozen=True)
class MemberRef:
    """Where one utterance's audio lies: ``size`` bytes from ``offset`` in ``shard``."""

    shard: str
    member: str
    offset: int
    size: int

    @property
    def path(self) -> str:
        return f"{self.shard}#{self.member}@{self.offset}+{self.size}"


def member_ref(path: str | os.PathLike) -> MemberRef | None:
    """The shard member that ``path`` names, or None for a plain file."""
    match = _MEMBER.match(str(path))
    if match is None:
        return None
    return MemberRef(match["shard"], match["member"], int(match["offset"]), int(match["size"]))


def stored_file(path: str | os.PathLike) -> str:
    """The file on disk that holds ``path``'s bytes: its shard, or the file itself."""
    ref = member_ref(path)
    return ref.shard if ref else str(path)


class _Shard:
    """One open shard: its descriptor, its size at open, and how many reads use it."""

    def __init__(self, descriptor: int, size: int) -> None:
        self.descriptor, self.size, self.users, self.evicted = descriptor, size, 0, False


class _OpenShards:
    """The shards this process holds open, least recently used first out. A handle that a
    thread still reads from is closed by its last user, not by the eviction."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.shards: collections.OrderedDict[str, _Shard] = collections.OrderedDict()
        self.lock = threading.Lock()

    def acquire(self, ref: MemberRef) -> _Shard:
        with self.lock:
            shard = self.shards.get(ref.shard)
            if shard is not None:
                self.shards.move_to_end(ref.shard)
                shard.users += 1
                return shard
        opened = _open_shard(ref)
        with self.lock:
            shard = self.shards.setdefault(ref.shard, opened)
            if shard is not opened:  # another thread opened it meanwhile
                os.close(opened.descriptor)
            self.shards.move_to_end(ref.shard)
            shard.users += 1
            while len(self.shards) > self.capacity:
                _, old = self.shards.popitem(last=False)
                old.evicted = True
                if not old.users:
                    os.close(old.descriptor)
        return shard

    def release(self, shard: _Shard) -> None:
        with self.lock:
            shard.users -= 1
            if shard.evicted and not shard.users:
                os.close(shard.descriptor)

    def close_all(self) -> None:
        """Forget every open shard (tests, and a rewritten shard folder)."""
        with self.lock:
            for shard in self.shards.values():
                shard.evicted = True
                if not shard.users:
                    os.close(shard.descriptor)
            self.shards.clear()


def open_shard_limit() -> int:
    """``OPEN_SHARDS``, or a quarter of this process's open-file limit if that is lower
    (the rest stays for the loader's pipes, the probes and the checkpoints)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return OPEN_SHARDS
    return max(1, min(OPEN_SHARDS, soft // 4))


_OPEN = _OpenShards(open_shard_limit())
# A worker forked while a probe thread held the lock would wait on it for ever; the
# descriptors it inherits stay usable (pread moves no shared offset).
os.register_at_fork(after_in_child=lambda: setattr(_OPEN, "lock", threading.Lock()))
close_shards = _OPEN.close_all


def _open_shard(ref: MemberRef) -> _Shard:
    # O_NONBLOCK: a FIFO in a shard's place would otherwise wait for a writer for ever.
    try:
        descriptor = os.open(ref.shard, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise AudioError(f"{ref.path}: shard file missing") from None
    except OSError as exc:
        raise AudioError(f"{ref.path}: shard unreadable ({exc.strerror})") from None
    status = os.fstat(descriptor)
    if not stat.S_ISREG(status.st_mode):
        os.close(descriptor)
        raise AudioError(f"{ref.path}: shard is not a regular file")
    return _Shard(descriptor, status.st_size)


def cut_short(ref: MemberRef, shard_size: int) -> str | None:
    """Why ``ref`` cannot be read from a shard of ``shard_size`` bytes, or None."""
    end = ref.offset + ref.size
    if end <= shard_size:
        return None
    return (f"shard cut short: the member ends at byte {end} but the shard holds "
            f"{shard_size} bytes (an interrupted copy? `deepspeech data check` verifies "
            "every shard)")


def read_member(ref: MemberRef, start: int = 0, length: int | None = None) -> bytes:
    """Bytes ``start`` to ``start + length`` (default: to the end) of the member, with one
    ``pread``; a shard missing or too short for the member raises ``AudioError``."""
    shard = _OPEN.acquire(ref)
    try:
        problem = cut_short(ref, shard.size)
        if problem:
            raise AudioError(f"{ref.path}: {problem}")
        start = min(max(start, 0), ref.size)
        wanted = ref.size - start if length is None else min(length, ref.size - start)
        try:
            data = os.pread(shard.descriptor, wanted, ref.offset + start)
        except OSError as exc:
            raise AudioError(f"{ref.path}: shard unreadable ({exc.strerror})") from None
    finally:
        _OPEN.release(shard)
    if len(data) < wanted:  # shrunk since it was opened
        raise AudioError(f"{ref.path}: {cut_short(ref, ref.offset + start + len(data))}")
    return data


def member_file(ref: MemberRef) -> io.BytesIO | MemberFile:
    """The member as a file for soundfile's header and tail reads (the probes): an
    utterance-sized one from a single ``pread``, a longer one read on demand. libsndfile
    reads a header in many small reads, each a call back into Python under the GIL; from
    memory they cost a quarter less than as ``pread`` calls (20,000 FLAC members probed on
    8 threads, 2-vCPU host: 17-19 s against 24 s; the same files loose: 15 s)."""
    if ref.size <= WHOLE_MEMBER_BYTES:
        return io.BytesIO(read_member(ref))
    return MemberFile(ref)


class MemberFile(io.RawIOBase):
    """A member as a read-only, seekable file, read on demand: for soundfile, where only
    the header and the end of a long recording are wanted."""

    def __init__(self, ref: MemberRef) -> None:
        super().__init__()
        self.ref, self.position = ref, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.ref.size}[whence]
        self.position = max(0, base + offset)
        return self.position

    def tell(self) -> int:
        return self.position

    def readinto(self, buffer: Any) -> int:
        data = read_member(self.ref, self.position, len(buffer))
        buffer[:len(data)] = data
        self.position += len(data)
        return len(data)


def file_sha256(path: str | os.PathLike) -> str:
    """SHA-256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with open_regular(path) as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def listed_checksums(folder: Path) -> dict[str, str] | None:
    """``SHA256SUMS`` of a shard folder as ``{shard name: hex digest}``, None if absent."""
    try:
        text = (folder / CHECKSUMS).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    sums = {}
    for number, line in enumerate(text.splitlines(), start=1):
        digest, _, name = line.partition("  ")
        if len(digest) != 64 or not name:
            raise ManifestError(f"{folder / CHECKSUMS} line {number}: not "
                                "'<sha256>  <file>'")
        sums[name.lstrip("*")] = digest
    return sums


def checksum_problems(paths: Iterable[str]) -> tuple[dict[str, str], list[str]]:
    """Every shard that the member ``paths`` name, hashed once and compared with the
    ``SHA256SUMS`` beside it: ``{shard: why it fails}`` and notes (shards with no listed
    checksum). Missing shards are left to the probes, which name them per utterance."""
    shards = sorted({ref.shard for ref in map(member_ref, paths) if ref is not None})
    failures, unlisted = {}, []
    listings: dict[Path, dict[str, str] | None] = {}
    for shard in shards:
        path = Path(shard)
        if not path.is_file():
            continue
        if path.parent not in listings:
            listings[path.parent] = listed_checksums(path.parent)
        expected = (listings[path.parent] or {}).get(path.name)
        if expected is None:
            unlisted.append(shard)
            continue
        found = file_sha256(path)
        if found != expected:
            failures[shard] = (f"shard fails its checksum: {CHECKSUMS} says "
                               f"{expected[:12]}..., the file hashes to {found[:12]}... "
                               "(copied with errors? copy it again, or run `deepspeech data "
                               "shard` again)")
    notes = [f"{len(unlisted)} shard(s) not listed in a {CHECKSUMS} beside them, not verified "
             f"(first: {unlisted[0]})"] if unlisted else []
    return failures, notes
