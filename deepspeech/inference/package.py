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
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml

from deepspeech import DISTRIBUTION
from deepspeech.config import Config, load_decode_file
from deepspeech.errors import CheckpointError, ConfigError
from deepspeech.files import ordinary_permissions
from deepspeech.training.checkpoint import (
    MODEL_CARD,
    Checkpoint,
    RunState,
    load_checkpoint,
    model_card,
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
    """Check every checksum, then read the package's plain files (no pickle on this path)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    folder = Path(path)
    verify_package(folder)
    card = _read_json(folder, CARD)
    if not isinstance(card, dict) or card.get("format") != FORMAT:
        raise CheckpointError(f"{folder / CARD}: not a deepspeech package's model card")
    if card.get("version") != VERSION:
        raise CheckpointError(f"{folder}: package format version {card.get('version')} is not "
                              f"supported (this deepspeech reads version {VERSION})")
    try:
        config = yaml.load((folder / CONFIG).read_text(encoding="utf-8"),
                           Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        weights = load_file(folder / WEIGHTS)
    except (yaml.YAMLError, SafetensorError, OSError) as error:
        raise CheckpointError(f"{folder}: unreadable package file: {error}") from None
    stats = _read_json(folder, FEATURE_STATS)
    if stats is not None:
        stats = {key: torch.tensor(values, dtype=torch.float32) for key, values in stats.items()}
    checkpoint = Checkpoint(
        config=config, vocabulary=_read_json(folder, VOCABULARY), model=weights,
        feature_stats=stats, parameters=card.get("parameters"),
        state=RunState(step=card.get("step", 0), epoch=card.get("epoch", 0),
                       validation=card.get("validation")),
        train_data=card.get("train_data"))
    return StoredModel(checkpoint, card, load_decode_file(folder / DECODE))


def verify_package(folder: Path) -> None:
    """Refuse a package whose files are not exactly those its checksums list, unchanged."""
    listing = folder / CHECKSUMS
    if not listing.is_file():
        run = f"; for a run folder give its checkpoint, {folder / 'best.pt'}" \
            if (folder / "best.pt").is_file() else ""
        raise CheckpointError(f"{folder}: a folder, but not a model package (no {CHECKSUMS}; "
                              f"deepspeech export --format package writes one){run}")
    expected: dict[str, str] = {}
    for number, line in enumerate(listing.read_text(encoding="utf-8").splitlines(), start=1):
        digest, _, name = line.partition("  ")
        if len(digest) != 64 or not name:
            raise CheckpointError(f"{listing} line {number}: expected '<sha256>  <file>'")
        expected[name] = digest
    present = {item.relative_to(folder).as_posix() for item in folder.rglob("*")
               if not item.is_dir()} - {CHECKSUMS}
    for name in sorted(present - set(expected)):
        raise CheckpointError(f"{folder / name}: not part of the package (not in {CHECKSUMS}); "
                              "remove it, or export the package again")
    for name in sorted(set(expected) - present):
        raise CheckpointError(f"{folder / name}: missing from the package (listed in "
                              f"{CHECKSUMS}); copy the whole folder")
    for name, digest in sorted(expected.items()):
        if _sha256(folder / name) != digest:
            raise CheckpointError(f"{folder / name}: changed since the package was written "
                                  f"(its SHA-256 differs from {CHECKSUMS}); restore the file "
                                  "or export the package again")


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
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.", dir=output.parent))
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
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _read_json(folder: Path, name: str) -> Any:
    try:
        return json.loads((folder / name).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{folder / name}: unreadable package file: {error}") from None


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def readme(card: dict[str, Any], name: str, license: str = "other") -> str:
    """The package's ``README.md``: Hugging Face model-card front matter, then prose."""
    results = []
    validation, tuned_on = card.get("validation"), card.get("decode_tuned_on")
    if validation:
        results.append(_result(validation, "validation", "greedy"))
    if tuned_on:
        results.append(_result(tuned_on, "tuning", f"beam search, LM weight "
                               f"{card['decode']['lm_weight']:g}"))
    front = {"library_name": DISTRIBUTION, "license": license,
             "pipeline_tag": "automatic-speech-recognition",
             "tags": ["automatic-speech-recognition", "ctc", "deepspeech2", "safetensors"]}
    if results:
        front["model-index"] = [{"name": name, "results": results}]
    data, decode = card.get("train_data") or {}, card["decode"]
    lines = ["---", yaml.safe_dump(front, sort_keys=False).rstrip(), "---", "",
             f"# {name}", "",
             f"A Deep Speech 2 model ({card.get('model', '?')}, "
             f"{card.get('parameters') or 0:,} parameters) trained with CTC by "
             "deepspeech and exported as a model package: weights in "
             "safetensors, every other file plain text, no pickle.", "", "## Data", ""]
    if data:
        lines.append(f"Trained to step {card.get('step')} (epoch {card.get('epoch')}) on "
                     f"{data.get('utterances')} utterances, {data.get('hours')} h: "
                     + ", ".join(f"`{item}`" for item in data.get("manifests", [])) + ".")
    else:
        lines.append("The checkpoint recorded no training data.")
    if validation:
        lines.append(f"Validation at step {validation.get('step')} on `{validation['manifest']}` "
                     f"({validation['utterances']} utterances, greedy decoding): WER "
                     f"{100 * validation['wer']:.2f}%, CER {100 * validation['cer']:.2f}%.")
    features = card.get("features", {})
    lines += ["", "## Parameters", "",
              f"- input: {card.get('sample_rate')} Hz mono audio, "
              + ", ".join(f"{key} {value}" for key, value in features.items()),
              f"- output: CTC over {len(card.get('vocabulary', ''))} characters "
              f"`{card.get('vocabulary', '')!r}` plus blank",
              f"- config digest {card.get('config_digest')}; the full config: `config.yaml`",
              "", "## Decode settings", "",
              f"In `decode.yaml`, from {card.get('decode_from')}: mode {decode['mode']}"
              + (f", beam {decode['beam']}, LM `{decode['lm']}` with weight "
                 f"{decode['lm_weight']:g}, word bonus {decode['word_bonus']:g}"
                 if decode["mode"] == "beam" else "") + "."]
    if tuned_on:
        lines.append(f"Tuned on `{tuned_on['manifest']}` ({tuned_on['utterances']} "
                     f"utterances): WER {100 * tuned_on['wer']:.2f}% (greedy "
                     f"{100 * tuned_on['greedy_wer']:.2f}%), CER {100 * tuned_on['cer']:.2f}%.")
    lines += ["", "## How to use it", "",
              f"With the `{DISTRIBUTION}` distribution installed from its source "
              f"(`pip install ./{DISTRIBUTION}`; PyPI's `deepspeech` is Mozilla's DeepSpeech, "
              "another program with the same import name):", "", "```bash",
              "sha256sum -c checksums.sha256     # deepspeech checks them too, on every load",
              f"deepspeech transcribe --checkpoint {name} clip.wav --json",
              f"deepspeech evaluate --checkpoint {name} --manifest test.jsonl",
              f"deepspeech transcribe --checkpoint {name} --info   # this card, as JSON",
              "```", "", "```python",
              "from deepspeech.inference.recognizer import Recognizer",
              "from deepspeech.inference.transcribe import transcribe_file",
              "", f'recognizer = Recognizer.from_checkpoint("{name}")',
              'print(transcribe_file(recognizer, "clip.wav").text)', "```", "",
              "Any command that takes `--checkpoint` takes this folder, moved or copied "
              "anywhere; a changed, missing or added file is refused by name.", "",
              "## License", "",
              f"`{license}`" + (": the exporter did not know it; ask the model's owner."
                                if license == "other" else "."), ""]
    return "\n".join(lines)


def _result(scores: dict[str, Any], split: str, decoding: str) -> dict[str, Any]:
    return {"task": {"type": "automatic-speech-recognition", "name": "Speech Recognition"},
            "dataset": {"name": scores["manifest"], "type": Path(scores["manifest"]).stem,
                        "split": split, "args": {"utterances": scores["utterances"]}},
            "metrics": [{"type": "wer", "value": round(100 * scores["wer"], 2),
                         "name": f"WER % ({decoding})"},
                        {"type": "cer", "value": round(100 * scores["cer"], 2),
                         "name": f"CER % ({decoding})"}]}
