"""What every corpus preparer shares: fetch an archive, split by speaker, write, summarize.

A preparer turns a corpus in its own layout into JSON Lines manifests, one per
split, in an output folder. The corpus itself stays where it is: the output
folder gets a ``source`` link to it, so that manifest paths are relative
(``source/wav/an4_clstk/fash/an251-fash-b.sph``) and re-pointing one link moves
the whole corpus. Audio a preparer makes itself (converted or concatenated
files) lives under the output folder. Durations come from file headers.

Each preparer module describes itself with one ``Preparer`` record (its name, its
``prepare_x``/``download_x`` and the command-line options they take), from which
``deepspeech data prepare NAME`` is built; the records are listed in ``__init__.py``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tarfile
import urllib.request
import zipfile
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deepspeech.data.audio import audio_info
from deepspeech.data.manifest import Utterance, write_manifest
from deepspeech.errors import AudioError, DeepSpeechError

log = logging.getLogger(__name__)
BAD_INPUT = ("error", "skip")
"""What a preparer or importer does with damaged input: name every case in one error and
write nothing, or leave them out with one warning naming them (as ``data.bad_input`` does
in training)."""
SHOWN_PROBLEMS = 10


def speaker_count(value: float, total: int) -> int:
    """``value`` speakers if it is a whole number >= 1, else that fraction of ``total``."""
    if value < 0:
        raise DeepSpeechError(f"speaker count must not be negative, got {value}")
    if value >= 1:
        if value != int(value):
            raise DeepSpeechError(f"expected a speaker count or a fraction below 1, got {value}")
        return int(value)
    return max(1, round(value * total)) if value > 0 else 0


def stable_rank(key: str, seed: int) -> str:
    """An order that depends only on the key and seed (not on Python's hash or listing order)."""
    return hashlib.sha256(f"{seed}:{key}".encode()).hexdigest()


def split_speakers(
    speakers: Iterable[str], dev: float, test: float = 0, seed: int = 0
) -> dict[str, list[str]]:
    """Deterministic speaker-disjoint ``{"train", "dev", "test"}`` lists.

    ``dev`` and ``test`` are speaker counts (>= 1) or fractions of the speakers.
    Each speaker's place depends on its name and the seed only, so adding a
    speaker to the corpus moves no other speaker between splits.
    """
    ranked = sorted(set(speakers), key=lambda speaker: stable_rank(speaker, seed))
    n_test = speaker_count(test, len(ranked))
    n_dev = speaker_count(dev, len(ranked))
    if n_dev + n_test >= len(ranked):
        raise DeepSpeechError(
            f"{len(ranked)} speakers cannot give {n_dev} dev and {n_test} test speakers "
            "and still leave some for training"
        )
    return {"train": sorted(ranked[n_dev + n_test:]), "dev": sorted(ranked[n_test:n_test + n_dev]),
            "test": sorted(ranked[:n_test])}


def link_source(root: str | os.PathLike, output: str | os.PathLike, name: str = "source") -> Path:
    """The corpus root as seen from ``output``: itself if inside, else a ``name`` symlink to it."""
    Path(output).mkdir(parents=True, exist_ok=True)
    # Absolute (resolved) paths: write_manifest makes those under the output relative.
    root, output = Path(root).resolve(), Path(output).resolve()
    if root.is_relative_to(output):
        return root
    link = output / name
    if link.is_symlink() or link.exists():
        if link.is_symlink() and link.resolve() == root:
            return link
        if not link.is_symlink():
            raise DeepSpeechError(f"{link} exists and is not a link; choose another output folder")
        link.unlink()
    try:
        link.symlink_to(root, target_is_directory=True)
    except OSError as exc:  # no symlinks (some file systems): absolute paths instead
        log.warning("cannot link %s -> %s (%s); manifests will hold absolute paths", link, root,
                    exc)
        return root
    return link


def durations(paths: Sequence[str | os.PathLike], workers: int = 8
              ) -> list[float | AudioError]:
    """Seconds per file from its header (threads: libsndfile releases the GIL); errors kept."""
    def one(path: str | os.PathLike) -> float | AudioError:
        try:
            frames, rate = audio_info(path)
        except AudioError as exc:
            return exc
        return frames / rate if frames else AudioError(f"{path}: no audio samples")

    with ThreadPoolExecutor(max(1, workers)) as pool:
        return list(pool.map(one, paths, chunksize=64))


def with_durations(
    entries: Sequence[tuple[str, str, str | None]], problems: list[str], workers: int = 8
) -> list[Utterance]:
    """``(audio, text, speaker)`` -> utterances with header durations; bad files to ``problems``."""
    utterances = []
    for (audio, text, speaker), seconds in zip(
            entries, durations([entry[0] for entry in entries], workers), strict=True):
        if isinstance(seconds, AudioError):
            problems.append(str(seconds))
        else:
            utterances.append(Utterance(audio, text, seconds, speaker=speaker))
    return utterances


def _listed(problems: list[str]) -> str:
    """The first ``SHOWN_PROBLEMS`` problems, one per indented line, then how many more."""
    more = (f"\n  ... and {len(problems) - SHOWN_PROBLEMS} more"
            if len(problems) > SHOWN_PROBLEMS else "")
    return "\n  " + "\n  ".join(problems[:SHOWN_PROBLEMS]) + more


def report_problems(corpus: str, problems: list[str]) -> None:
    """One warning for everything a preparer had to leave out."""
    if problems:
        log.warning("%s: left out %d item(s):%s", corpus, len(problems), _listed(problems))


def raise_problems(where: str, problems: list[str], hint: str = "") -> None:
    """One error for everything wrong, for corpora whose problems are not left out: a
    corpus the user made (a Kaldi directory) is fixed, not silently thinned. ``hint``,
    when given, closes the message with what to do."""
    if problems:
        raise DeepSpeechError(f"{where}: {len(problems)} problem(s), nothing written:"
                              f"{_listed(problems)}" + (f"\n{hint}" if hint else ""))


@dataclass
class PreparedCorpus:
    """The manifests a preparer wrote and what they hold, for the closing summary."""

    name: str
    output_dir: Path
    manifests: dict[str, Path] = field(default_factory=dict)
    splits: dict[str, list[Utterance]] = field(default_factory=dict)
    left_out: int = 0

    def format(self) -> str:
        total = sum(len(u) for u in self.splits.values())
        hours = sum(u.duration for us in self.splits.values() for u in us) / 3600
        lines = [f"{self.name}: {total} utterances, {hours:.3f} h -> {self.output_dir}"]
        for split, utterances in self.splits.items():
            speakers = {u.speaker for u in utterances if u.speaker is not None}
            split_hours = sum(u.duration for u in utterances) / 3600
            lines.append(f"  {split:16s} {len(utterances):7d} utterances {split_hours:8.3f} h "
                         f"{len(speakers):5d} speakers  -> {self.manifests[split].name}")
        if self.left_out:
            lines.append(f"  left out {self.left_out} unusable item(s) (see the warning above)")
        return "\n".join(lines)


def comma_separated(text: str) -> list[str]:
    """``"train,dev"`` -> ``["train", "dev"]`` (empty names dropped): a list option's type."""
    return [name for name in text.split(",") if name]


@dataclass(frozen=True)
class Option:
    """A keyword argument of ``prepare_x`` that the command line sets as ``--flag VALUE``."""

    flag: str                        # "--dev-speakers" sets the keyword dev_speakers
    type: Callable[[str], Any]       # parses the command-line text (errors name the flag)
    default: Any
    help: str
    choices: tuple[Any, ...] | None = None
    download: bool = False           # also a keyword of download_x (LibriSpeech's subsets)

    @property
    def keyword(self) -> str:
        """The keyword argument (and argparse destination) the flag sets."""
        return self.flag.lstrip("-").replace("-", "_")


@dataclass(frozen=True)
class Preparer:
    """One corpus: ``prepare(root, output, workers=..., **options)`` and how to fetch it.

    Every ``prepare`` also takes ``workers`` (threads reading headers), which the command
    line sets for all corpora alike; ``options`` are the corpus's own.
    """

    name: str
    prepare: Callable[..., PreparedCorpus]
    download: Callable[..., Path] | None  # download(target_dir) -> root; None: root required
    help: str
    root_help: str
    options: tuple[Option, ...] = ()
    root_optional: bool = False  # prepare(None, ...) has a meaning (Kaldi: the working folder)

    @property
    def root_required(self) -> bool:
        """Whether the command line must be given ``--root``."""
        return self.download is None and not self.root_optional

    def run(self, root: str | os.PathLike | None, output: str | os.PathLike, workers: int = 8,
            **options: Any) -> PreparedCorpus:
        """Prepare from ``root``, or without one from a download into ``output/download``."""
        if root is None and not self.root_optional:
            if self.download is None:
                raise DeepSpeechError(f"{self.name}: nothing to download; give its folder "
                                      "(--root)")
            root = self.download(f"{output}/download", **{
                option.keyword: options[option.keyword] for option in self.options
                if option.download and option.keyword in options})
        return self.prepare(root, output, workers=workers, **options)


def write_splits(name: str, output: str | os.PathLike, splits: dict[str, list[Utterance]],
                 left_out: int = 0) -> PreparedCorpus:
    """Write ``<output>/<split>.jsonl`` for every non-empty split, sorted by audio path.

    An empty split's manifest from an earlier run into the same folder is removed: its
    paths go through the ``source`` link, which now points at this run's corpus.
    """
    output = Path(output)
    result = PreparedCorpus(name, output, left_out=left_out)
    for split, utterances in splits.items():
        if not utterances:
            stale = output / f"{split}.jsonl"
            if stale.is_file():
                log.warning("%s: removing %s, left by an earlier run; this one has no %s "
                            "split", name, stale, split)
                stale.unlink()
            continue
        ordered = sorted(utterances, key=lambda u: (u.audio_filepath, u.offset or 0.0))
        path = output / f"{split}.jsonl"
        write_manifest(path, ordered)
        result.manifests[split] = path
        result.splits[split] = ordered
    if not result.manifests:
        raise DeepSpeechError(f"{name}: no usable utterances found")
    return result


def download(url: str, target_dir: str | os.PathLike, md5: str | None = None,
             sha256: str | None = None) -> Path:
    """Fetch ``url`` into ``target_dir`` (kept if already complete), verifying its checksum."""
    target_dir = Path(target_dir)
    target_dir.mkdir(parents=True, exist_ok=True)
    path = target_dir / url.rstrip("/").split("/")[-1]
    if not path.is_file():
        partial = path.with_name(path.name + ".part")
        log.info("downloading %s -> %s", url, path)
        try:
            with urllib.request.urlopen(url, timeout=60) as response, partial.open("wb") as out:
                shutil.copyfileobj(response, out, length=1 << 20)
        except OSError as exc:
            partial.unlink(missing_ok=True)
            raise DeepSpeechError(f"cannot download {url}: {exc}; fetch it by hand and "
                                  f"pass the extracted folder with --root") from None
        partial.replace(path)
    for algorithm, expected in (("md5", md5), ("sha256", sha256)):
        if expected:
            digest = hashlib.new(algorithm)
            with path.open("rb") as handle:
                while block := handle.read(1 << 20):
                    digest.update(block)
            if digest.hexdigest() != expected:
                raise DeepSpeechError(f"{path}: {algorithm} {digest.hexdigest()} differs from the "
                                      f"published {expected}; delete it and download again")
    return path


def extract(archive: str | os.PathLike, target_dir: str | os.PathLike) -> Path:
    """Unpack a .tar.gz or .zip into ``target_dir`` (members may not escape it)."""
    archive, target_dir = Path(archive), Path(target_dir)
    target_dir.mkdir(parents=True, exist_ok=True)
    log.info("extracting %s -> %s", archive, target_dir)
    if archive.suffix == ".zip":
        with zipfile.ZipFile(archive) as handle:
            for member in handle.namelist():
                if not (target_dir / member).resolve().is_relative_to(target_dir.resolve()):
                    raise DeepSpeechError(f"{archive}: member {member!r} escapes the folder")
            handle.extractall(target_dir)
    else:
        with tarfile.open(archive) as handle:
            handle.extractall(target_dir, filter="data")
    return target_dir
