"""A model package: what a trained model is outside its run folder.

A folder of plain files, no pickle anywhere, so that opening one can never run code:

    model.safetensors    the evaluated weights (``Checkpoint.model``), nothing else
    config.yaml          the resolved config, exactly as the checkpoint holds it
    vocabulary.json      the output characters, in order
    feature_stats.json   the global normalization statistics (null when per utterance)
    decode.yaml          the decode settings the package is used with (the tuned ones)
    lm.arpa, lexicon     when decoding uses them, copied in
    model_card.json      the checkpoint's model card, machine-readable (``--info``)
    README.md            the same for people, in the Hugging Face model-card style
    checksums.sha256     SHA-256 of every other file (``sha256sum -c checksums.sha256``)

Every path inside is relative to the folder (decode.yaml's LM is resolved against it
by ``load_decode_file``), so a package moved or copied anywhere works the same.
``read_model`` opens a checkpoint or a package alike; for a package it checks every
checksum first and refuses a changed, missing or unknown file by name.

A package is untrusted input, like a download: only regular files inside its folder
belong to it (a FIFO or ``/dev/zero`` behind a name would hang the checksums), every
path it names must lead to one of them, each file is checked for what it must hold, and
non-finite weights are refused by name.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import socket
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import torch
import yaml

from deepspeech.config import Config, load_decode_file
from deepspeech.data.text import Vocabulary
from deepspeech.errors import CheckpointError, ConfigError, VocabularyError
from deepspeech.files import open_regular, ordinary_permissions
from deepspeech.inference.package_readme import readme
from deepspeech.training.checkpoint import (
    MODEL_CARD,
    Checkpoint,
    RunState,
    load_checkpoint,
    model_card,
    refuse_non_finite,
    tuned_decoding,
)

FORMAT = "deepspeech-package"
VERSION = 1
WEIGHTS = "model.safetensors"
CONFIG = "config.yaml"
VOCABULARY = "vocabulary.json"
FEATURE_STATS = "feature_stats.json"
DECODE = "decode.yaml"
CARD = "model_card.json"
README = "README.md"
CHECKSUMS = "checksums.sha256"
RESERVED = (WEIGHTS, CONFIG, VOCABULARY, FEATURE_STATS, DECODE, CARD, README, CHECKSUMS)
DECODE_FILES = ("lm", "lexicon")
"""Decode settings that name a file: copied into the package."""

log = logging.getLogger(__name__)


@dataclass
class StoredModel:
    """A checkpoint or package, opened: the weights and their description."""

    checkpoint: Checkpoint
    card: dict[str, Any]
    decode: dict[str, Any] | None = None
    """A package's decode settings (paths absolute); ``None`` for a checkpoint."""


@dataclass
class PackageResult:
    """What ``write_package`` wrote."""

    path: Path
    files: dict[str, int] = field(default_factory=dict)
    """Each file's size in bytes."""
    decode_from: str = ""

    @property
    def size(self) -> int:
        return sum(self.files.values())


def is_package(path: str | os.PathLike) -> bool:
    """Whether ``path`` names a package (a folder) rather than a checkpoint file."""
    return Path(path).is_dir()


def read_model(path: str | os.PathLike) -> StoredModel:
    """Open a checkpoint (``best.pt``) or a package folder; errors name the file."""
    if is_package(path):
        return load_package(path)
    checkpoint = load_checkpoint(path)
    card = model_card(checkpoint)
    card.update(tuned_decoding(card, Path(path).with_name(MODEL_CARD)))
    return StoredModel(checkpoint, card)


def load_package(path: str | os.PathLike) -> StoredModel:
    """Check every file and checksum, then read the package's plain files (no pickle on
    this path), each checked for what it must hold."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    folder = Path(path)
    members = verify_package(folder)
    card = _read_card(folder)
    try:
        weights = load_file(folder / WEIGHTS)
    except (SafetensorError, OSError) as error:
        raise CheckpointError(f"{folder / WEIGHTS}: unreadable package file: {error}") from None
    refuse_non_finite(weights, folder / WEIGHTS)
    checkpoint = Checkpoint(
        config=_read_config(folder), vocabulary=_read_vocabulary(folder), model=weights,
        feature_stats=_read_feature_stats(folder), parameters=card.get("parameters"),
        state=RunState(step=card.get("step", 0), epoch=card.get("epoch", 0),
                       validation=card.get("validation")),
        train_data=card.get("train_data"))
    return StoredModel(checkpoint, card, _read_decode(folder, set(members.values())))


def verify_package(folder: Path) -> dict[str, Path]:
    """Refuse a package whose files are not exactly those its checksums list, unchanged;
    returns each file's name and the regular file inside the folder it is."""
    listing = folder / CHECKSUMS
    if not os.path.lexists(listing):
        run = f"; for a run folder give its checkpoint, {folder / 'best.pt'}" \
            if (folder / "best.pt").is_file() else ""
        raise CheckpointError(f"{folder}: a folder, but not a model package (no {CHECKSUMS}; "
                              f"deepspeech export --format package writes one){run}")
    members = _members(folder)
    expected: dict[str, str] = {}
    for number, line in enumerate(members[CHECKSUMS].read_text(encoding="utf-8").splitlines(),
                                  start=1):
        digest, _, name = line.partition("  ")
        if len(digest) != 64 or not name:
            raise CheckpointError(f"{listing} line {number}: expected '<sha256>  <file>'")
        if PurePosixPath(name).is_absolute() or ".." in PurePosixPath(name).parts:
            raise CheckpointError(f"{listing} line {number}: {name} lies outside the package; "
                                  "a package lists only files inside its folder")
        expected[name] = digest
    present = set(members) - {CHECKSUMS}
    for name in sorted(present - set(expected)):
        raise CheckpointError(f"{folder / name}: not part of the package (not in {CHECKSUMS}); "
                              "remove it, or export the package again")
    for name in sorted(set(expected) - present):
        raise CheckpointError(f"{folder / name}: missing from the package (listed in "
                              f"{CHECKSUMS}); copy the whole folder")
    for name, digest in sorted(expected.items()):
        if _sha256(members[name]) != digest:
            raise CheckpointError(f"{folder / name}: changed since the package was written "
                                  f"(its SHA-256 differs from {CHECKSUMS}); restore the file "
                                  "or export the package again")
    return members


_KINDS = {stat.S_IFDIR: "a folder", stat.S_IFIFO: "a FIFO (named pipe)",
          stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFSOCK: "a socket"}


def _members(folder: Path) -> dict[str, Path]:
    """Every file under ``folder`` by name, with the regular file inside the folder it is.

    Anything else is refused by name, listed or not: reading a FIFO, or a device such as
    a link to ``/dev/zero``, never ends, and a link out of the folder would make another
    file part of the package.
    """
    root = folder.resolve()
    members = {}
    for top, folders, files in os.walk(root):  # links to folders are listed, not entered
        for entry in (*folders, *files):
            path = Path(top, entry)
            name = path.relative_to(root).as_posix()
            mode = path.lstat().st_mode
            if stat.S_ISDIR(mode):
                continue
            target = path
            if stat.S_ISLNK(mode):
                target = Path(os.path.realpath(path))
                if not target.is_relative_to(root):
                    raise CheckpointError(
                        f"{folder / name}: a link to {target}, outside the package; a package "
                        "holds only files inside its folder: copy the file in, or export the "
                        "package again")
                mode = target.stat().st_mode if target.exists() else 0
            if not stat.S_ISREG(mode):
                kind = _KINDS.get(stat.S_IFMT(mode), "a link to nothing")
                raise CheckpointError(f"{folder / name}: {kind}, not a regular file; a package "
                                      "holds only regular files: remove it, or export the "
                                      "package again")
            members[name] = target
    return members


def write_package(source: str | os.PathLike, output: str | os.PathLike, lm: str | None = None,
                  decode_file: str | None = None, license: str = "other") -> PackageResult:
    """Write the model at ``source`` (a checkpoint or a package) as a package folder.

    Decode settings: ``decode_file``'s, else those `deepspeech decode tune` recorded in the
    model card, else the config's; ``lm`` replaces their LM. Files they name are copied in.
    """
    output = Path(output)
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise ConfigError(f"{output}: already exists; give a new folder to -o (or remove it)")
    stored = read_model(source)
    checkpoint, card = stored.checkpoint, dict(stored.card)
    decode, decode_from = _decode_settings(stored, decode_file, lm)
    # The scores of decode tune go along with the settings it found, not with others.
    tuned = stored.decode if stored.decode is not None else card.get("decode_tuned")
    tuned_on = card.get("decode_tuned_on") if tuned and _same(tuned, decode) else None
    output.parent.mkdir(parents=True, exist_ok=True)
    _remove_dead_staging(output.parent)
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.", dir=output.parent,
                                    suffix=f".export-{socket.gethostname()}-{os.getpid()}"))
    try:
        relative = dict(decode)
        for key in DECODE_FILES:
            if decode[key]:
                relative[key] = _copy_in(Path(decode[key]), staging, key)
        _write_files(staging, checkpoint, card, relative, decode_from, tuned_on, output.name,
                     license)
        for path in (staging, *staging.iterdir()):  # a package is meant for others to read
            ordinary_permissions(path)
        if output.exists():
            output.rmdir()
        staging.rename(output)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    written = load_package(output).checkpoint.model  # checksums and weights read back
    if written.keys() != checkpoint.model.keys() or not all(
            torch.equal(written[name], tensor) for name, tensor in checkpoint.model.items()):
        raise CheckpointError(f"{output}: the weights read back differ from {source}'s")
    return PackageResult(output, {item.name: item.stat().st_size for item in
                                  sorted(output.iterdir())}, decode_from)


def _remove_dead_staging(folder: Path) -> None:
    """Remove the staging folders that exports killed on this host left in ``folder`` (a
    kill -9 runs no cleanup); a live export's, or another host's, is left alone."""
    staging = re.compile(r"\..+\.export-" + re.escape(socket.gethostname()) + r"-(\d+)")
    for item in folder.iterdir():
        found = staging.fullmatch(item.name)
        if found and not item.is_symlink() and item.is_dir() and not _alive(int(found[1])):
            log.info("removing %s, left by an export that was killed", item)
            shutil.rmtree(item, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _decode_settings(stored: StoredModel, decode_file: str | None,
                     lm: str | None) -> tuple[dict[str, Any], str]:
    decode = dict(stored.checkpoint.config["decode"])
    if decode_file:
        decode.update(load_decode_file(decode_file))
        decode_from = str(decode_file)
    elif stored.decode is not None:
        decode.update(stored.decode)
        decode_from = "the package it was exported from"
    elif "decode_tuned" in stored.card:
        decode.update(stored.card["decode_tuned"])
        decode_from = "the model card, where deepspeech decode tune recorded them"
    else:
        decode_from = "the training config"
    if lm:
        if decode["mode"] != "beam":
            raise ConfigError(f"--lm {lm}: the decode settings (from {decode_from}) are "
                              f"{decode['mode']}; give --decode-config with beam settings "
                              "(deepspeech decode tune -o decode.yaml tunes them)")
        decode["lm"] = lm
    for key in DECODE_FILES:
        decode[key] = str(Path(decode[key]).absolute()) if decode[key] else ""
    Config.from_dict({"decode": decode}, source=f"decode settings from {decode_from}",
                     check_files=True)
    return decode, decode_from


def _same(one: dict[str, Any], other: dict[str, Any]) -> bool:
    """Whether two decode sections agree, their files compared by where they lead."""
    def where(section: dict[str, Any]) -> dict[str, Any]:
        return {key: str(Path(value).resolve()) if key in DECODE_FILES and value else value
                for key, value in section.items()}

    return where(one) == where(other)


def _copy_in(path: Path, folder: Path, key: str) -> str:
    name = path.name if path.name not in RESERVED and not (folder / path.name).exists() \
        else f"{key}-{path.name}"
    shutil.copyfile(path, folder / name)
    return name


def _write_files(folder: Path, checkpoint: Checkpoint, card: dict[str, Any],
                 decode: dict[str, Any], decode_from: str, tuned_on: dict | None, name: str,
                 license: str) -> None:
    from safetensors.torch import save_file

    save_file({key: tensor.contiguous() for key, tensor in checkpoint.model.items()},
              str(folder / WEIGHTS), metadata={"format": "pt"})
    (folder / CONFIG).write_text(yaml.safe_dump(checkpoint.config, sort_keys=False),
                                 encoding="utf-8")
    stats = checkpoint.feature_stats
    _write_json(folder / VOCABULARY, checkpoint.vocabulary)
    _write_json(folder / FEATURE_STATS, None if stats is None else
                {key: value.float().tolist() for key, value in stats.items()})
    (folder / DECODE).write_text(
        f"# decode settings of this package, from {decode_from}; paths are relative to "
        "this folder\n" + yaml.safe_dump({"decode": decode}, sort_keys=False), encoding="utf-8")
    card = {"format": FORMAT, "version": VERSION,
            **{key: value for key, value in card.items()
               if key not in ("format", "version", "decode_tuned", "decode_tuned_on")},
            "decode": decode, "decode_from": decode_from}
    if tuned_on:
        card["decode_tuned_on"] = tuned_on
    _write_json(folder / CARD, card)
    (folder / README).write_text(readme(card, name, license), encoding="utf-8")
    files = sorted(item.relative_to(folder).as_posix() for item in folder.rglob("*")
                   if item.is_file())
    (folder / CHECKSUMS).write_text("".join(f"{_sha256(folder / item)}  {item}\n"
                                            for item in files), encoding="utf-8")


def _sha256(path: Path) -> str:
    # Not following a last link and not waiting for a FIFO's writer: the file read is the
    # regular file that was checked, or nothing.
    try:
        handle = open_regular(path, follow_links=False)
    except ValueError:
        raise CheckpointError(f"{path}: not a regular file; a package holds only regular "
                              "files: remove it, or export the package again") from None
    with handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _read_json(folder: Path, name: str) -> Any:
    def refuse(constant: str) -> None:
        raise ValueError(f"holds {constant}, which is not a number")

    try:
        return json.loads((folder / name).read_text(encoding="utf-8"), parse_constant=refuse)
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise CheckpointError(f"{folder / name}: unreadable package file: {error}") from None


def _read_card(folder: Path) -> dict[str, Any]:
    card = _read_json(folder, CARD)
    if not isinstance(card, dict) or card.get("format") != FORMAT:
        raise CheckpointError(f"{folder / CARD}: not a deepspeech package's model card")
    if card.get("version") != VERSION:
        raise CheckpointError(f"{folder}: package format version {card.get('version')} is not "
                              f"supported (this deepspeech reads version {VERSION})")
    for key, (kinds, what) in _CARD_FIELDS.items():
        if key in card and (not isinstance(card[key], kinds) or isinstance(card[key], bool)):
            raise CheckpointError(f"{folder / CARD}: {key} must be {what}, not "
                                  f"{json.dumps(card[key])[:80]}")
    for key in ("validation", "decode_tuned_on"):
        scores = card.get(key) or {}
        for score, (kinds, what) in _SCORES.items():
            if scores and not isinstance(scores.get(score), kinds):
                raise CheckpointError(f"{folder / CARD}: {key}.{score} must be {what}")
    return card


_CARD_FIELDS: dict[str, tuple[tuple[type, ...], str]] = {
    "step": ((int,), "a whole number"), "epoch": ((int,), "a whole number"),
    "parameters": ((int, type(None)), "a whole number or null"),
    "validation": ((dict, type(None)), "an object or null"),
    "train_data": ((dict, type(None)), "an object or null"),
    "decode_tuned_on": ((dict,), "an object"), "features": ((dict,), "an object"),
    "model": ((str,), "a string"), "vocabulary": ((str,), "a string"),
}
"""What the model card's fields that the loader and the README read must be."""
_SCORES: dict[str, tuple[tuple[type, ...], str]] = {
    "manifest": ((str,), "a string"), "utterances": ((int,), "a whole number"),
    "wer": ((int, float), "a number"), "cer": ((int, float), "a number")}


def _read_config(folder: Path) -> dict[str, Any]:
    """config.yaml, checked as a config (the key at fault named) before anything uses it."""
    try:
        config = yaml.load((folder / CONFIG).read_text(encoding="utf-8"),
                           Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (yaml.YAMLError, OSError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{folder / CONFIG}: unreadable package file: {error}") from None
    Config.from_dict(config, source=str(folder / CONFIG))
    return config


def _read_vocabulary(folder: Path) -> list[str]:
    vocabulary = _read_json(folder, VOCABULARY)
    if not isinstance(vocabulary, list) or not all(isinstance(ch, str) for ch in vocabulary):
        raise CheckpointError(f"{folder / VOCABULARY}: must be a list of the output "
                              "characters, in order")
    try:
        Vocabulary(vocabulary)
    except VocabularyError as error:
        raise CheckpointError(f"{folder / VOCABULARY}: {error}") from None
    return vocabulary


def _read_feature_stats(folder: Path) -> dict[str, torch.Tensor] | None:
    stats = _read_json(folder, FEATURE_STATS)
    if stats is None:
        return None
    if not isinstance(stats, dict) or set(stats) != {"mean", "std"} or not all(
            isinstance(values, list) and values and all(
                isinstance(x, (int, float)) and not isinstance(x, bool) for x in values)
            for values in stats.values()):
        raise CheckpointError(f"{folder / FEATURE_STATS}: must be null or "
                              '{"mean": [...], "std": [...]}, a number per feature bin in each')
    tensors = {key: torch.tensor(values, dtype=torch.float32) for key, values in stats.items()}
    if tensors["mean"].shape != tensors["std"].shape or not all(
            torch.isfinite(values).all() for values in tensors.values()) \
            or (tensors["std"] < 0).any():
        raise CheckpointError(f"{folder / FEATURE_STATS}: mean and std must hold as many "
                              "finite numbers, the std none below 0")
    return tensors


def _read_decode(folder: Path, members: set[Path]) -> dict[str, Any]:
    """decode.yaml's settings; the files they name must be the package's own (the training
    run's, which config.yaml names, never apply)."""
    decode = load_decode_file(folder / DECODE)
    Config.from_dict({"decode": decode}, source=str(folder / DECODE))
    for key in DECODE_FILES:
        value = decode.setdefault(key, "")
        if isinstance(value, str) and value and Path(value).resolve() not in members:
            raise CheckpointError(
                f"{folder / DECODE}: decode.{key} leads to {value}, not a file of the "
                "package; a package names only files inside its folder: export it again "
                "(deepspeech export --format package copies the decode files in)")
    return decode


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False, allow_nan=False) + "\n",
                    encoding="utf-8")
