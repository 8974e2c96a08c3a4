"""lhotse Shar folders: ``cuts.NNNNNN.jsonl.gz`` with ``recording.NNNNNN.tar`` beside it.

Each tar holds, for each cut of its shard and in the same order, a data member
(``CUT_ID.flac``, or ``CUT_ID.nodata`` when the cut has no audio) followed by a metadata
member (``CUT_ID.json``). The project reads audio from files, so the members of the cuts
that are imported are written out under the output folder, as
``OUTPUT/shar/FOLDER/recording.NNNNNN/CUT_ID.flac`` (FOLDER: the Shar folder's name); the
cut's times are relative to that file (lhotse cuts a cut's audio out when writing Shar).
Other fields (features, custom arrays) are not read.
"""

from __future__ import annotations

import re
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from deepspeech.data.audio import AUDIO_SUFFIXES
from deepspeech.data.lhotse.cuts import Unrepresentable
from deepspeech.errors import DeepSpeechError
from deepspeech.files import atomic_write

_CUTS = re.compile(r"cuts\.(\d+)\.jsonl(\.gz)?")


@dataclass(frozen=True)
class Shard:
    """One shard: its cuts and, when the audio was written into the Shar, its tar."""

    cuts: Path
    recording: Path | None


def find_shards(folder: Path) -> list[Shard]:
    """The shards of a Shar folder in index order; empty when it is not one."""
    shards = []
    for path in sorted(folder.iterdir()):
        match = _CUTS.fullmatch(path.name)
        if match:
            tars = [folder / f"recording.{match[1]}.tar{end}" for end in ("", ".gz")]
            shards.append(Shard(path, next((tar for tar in tars if tar.is_file()), None)))
    return shards


def audio_members(tar_path: Path) -> list[str | None]:
    """The data member of each cut, in order (None where the cut has no audio)."""
    try:
        with tarfile.open(tar_path, "r:*") as tar:
            names = [member.name for member in tar.getmembers()]
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise DeepSpeechError(f"{tar_path}: not a readable tar file ({exc})") from None
    if len(names) % 2:
        raise DeepSpeechError(f"{tar_path}: {len(names)} members, not pairs of audio and "
                              "metadata as lhotse writes them")
    return [None if data.endswith(".nodata") else data for data in names[0::2]]


def member_target(tar_path: Path, member: str | None, cut_id: str, audio_dir: Path) -> Path:
    """Where under ``audio_dir`` the cut's audio member is written; raises
    ``Unrepresentable`` for a member the project cannot read or place."""
    if member is None:
        raise Unrepresentable(f"no audio in {tar_path.name} (a .nodata member)")
    name = PurePosixPath(member)
    if str(name.parent / name.stem) != cut_id:
        raise DeepSpeechError(f"{tar_path}: member {member!r} is not the audio of cut "
                              f"{cut_id}; the tar and {tar_path.name.replace('recording', 'cuts')}"
                              " do not belong together")
    if name.is_absolute() or ".." in name.parts:
        raise Unrepresentable(f"audio member {member!r} would be written outside the output "
                              "folder")
    if name.suffix.lower() not in AUDIO_SUFFIXES:
        raise Unrepresentable(f"audio stored as {name.suffix!r} in {tar_path.name}, not a "
                              "format the project reads; write the Shar with "
                              "fields={'recording': 'flac'}")
    shard = tar_path.name.removesuffix(".gz").removesuffix(".tar")
    return audio_dir / shard / name


def extract_members(tar_path: Path, targets: dict[str, Path]) -> None:
    """Write the members named in ``targets`` (member -> file), atomically each."""
    with tarfile.open(tar_path, "r:*") as tar:
        for member in tar:
            target = targets.get(member.name)
            if target is None:
                continue
            source = tar.extractfile(member) if member.isfile() else None
            if source is None:
                raise DeepSpeechError(f"{tar_path}: member {member.name!r} is not a file")
            with source, atomic_write(target, "wb") as handle:
                shutil.copyfileobj(source, handle, length=1 << 20)
