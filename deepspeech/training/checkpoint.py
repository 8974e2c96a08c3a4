"""Checkpoints: one file, written atomically, loadable with ``weights_only=True``.

A checkpoint holds everything needed to continue bitwise-identically (weights,
optimizer, schedule, grad scaler, sampler position, every RNG state) and
everything needed to evaluate and transcribe alone (resolved config,
vocabulary, feature statistics). Only tensors, numbers, strings, lists and
dicts go in, so that loading a checkpoint can never run code.

Writes are atomic (``deepspeech.files``): a kill while saving leaves the previous
checkpoint intact.
"""

from __future__ import annotations

import io
import json
import logging
import os
from pathlib import Path
from typing import Any

import torch

from deepspeech.config import config_digest
from deepspeech.errors import CheckpointError
from deepspeech.files import atomic_write

FORMAT = "deepspeech-checkpoint"
VERSION = 1
REQUIRED_KEYS = ("format", "version", "config", "vocabulary", "model")
MODEL_CARD = "model_card.json"
"""The model card's name, beside the checkpoint it describes."""
ZIP_MAGIC = b"PK\x03\x04"  # torch.save's format since PyTorch 1.6

log = logging.getLogger(__name__)


def save_checkpoint(state: dict[str, Any], path: str | os.PathLike) -> None:
    """Serialize ``state`` to ``path`` atomically (temp file + fsync + rename)."""
    payload = {"format": FORMAT, "version": VERSION, **state}
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    with atomic_write(path, "wb") as handle:
        handle.write(buffer.getbuffer())


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Load and check a checkpoint; every failure is a ``CheckpointError`` naming the file."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint not found")
    with path.open("rb") as handle:
        head = handle.read(4)
    if head != ZIP_MAGIC:  # else torch's advice on weights_only would mislead
        raise CheckpointError(f"{path}: not a readable checkpoint: torch.save writes a zip "
                              f"archive, this file starts with {head!r}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for truncated or foreign files
        raise CheckpointError(
            f"{path}: not a readable checkpoint (truncated or corrupt?): "
            f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        ) from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a deepspeech checkpoint")
    if state.get("version") != VERSION:
        raise CheckpointError(
            f"{path}: checkpoint format version {state.get('version')} is not supported "
            f"(this deepspeech reads version {VERSION})"
        )
    missing = [key for key in REQUIRED_KEYS if key not in state]
    if missing:
        raise CheckpointError(f"{path}: checkpoint lacks {', '.join(missing)}")
    return state


def model_card(state: dict[str, Any]) -> dict[str, Any]:
    """What a checkpoint is, for the person about to use it: written beside ``best.pt``
    as ``model_card.json`` and printed by ``transcribe``/``evaluate --info``."""
    config = state["config"]
    rnn = config["model"]["rnn"]
    return {
        "config_digest": config_digest(config),
        "parameters": state.get("parameters"),
        "step": state.get("step"), "epoch": state.get("epoch"),
        "train_data": state.get("train_data"),
        "validation": state.get("validation"),
        "sample_rate": config["data"]["sample_rate"],
        # What a user needs to feed the model (the training-only masks left out).
        "features": {key: value for key, value in config["features"].items()
                     if key != "spec_augment"},
        "model": (f"{len(config['model']['conv']['channels'])} conv, {rnn['layers']} x "
                  f"{rnn['hidden']} {'bidirectional ' if rnn['bidirectional'] else ''}"
                  f"{rnn['kind'].upper()}"),
        "vocabulary": "".join(state["vocabulary"]),
        "decode": config["decode"],
    }


def write_model_card(state: dict[str, Any], path: str | os.PathLike) -> None:
    _write_card(model_card(state), path)


def record_tuned_decoding(card: dict[str, Any], decode: dict[str, Any], tuned_on: dict[str, Any],
                          path: str | os.PathLike) -> bool:
    """Put tuned decode settings into the model card at ``path`` if it describes the model
    that ``card`` does (same config digest and step); returns whether it did.

    Training writes the card with the config's decode section (greedy); the settings
    worth handing on are the ones `deepspeech decode tune` finds later.
    """
    stored = _card_of_same_model(card, path)
    if stored is None:
        return False
    _write_card({**stored, "decode": decode, "decode_tuned_on": tuned_on}, path)
    return True


def tuned_decoding(card: dict[str, Any], path: str | os.PathLike) -> dict[str, Any]:
    """``decode_tuned`` and ``decode_tuned_on`` from the model card at ``path`` when
    `deepspeech decode tune` recorded them there for the model ``card`` describes."""
    stored = _card_of_same_model(card, path)
    if stored is None or "decode_tuned_on" not in stored:
        return {}
    return {"decode_tuned": stored["decode"], "decode_tuned_on": stored["decode_tuned_on"]}


def _card_of_same_model(card: dict[str, Any], path: str | os.PathLike) -> dict[str, Any] | None:
    path = Path(path)
    if not path.is_file():
        return None
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        log.warning("%s: not a readable model card (%s); left as it is", path, error)
        return None
    if not isinstance(stored, dict) or any(stored.get(key) != card.get(key)
                                           for key in ("config_digest", "step")):
        return None
    return stored


def _write_card(card: dict[str, Any], path: str | os.PathLike) -> None:
    with atomic_write(path, "w") as handle:
        handle.write(json.dumps(card, indent=2) + "\n")
