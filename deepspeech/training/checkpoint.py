"""Checkpoints: one file, written atomically, loadable with ``weights_only=True``.

A checkpoint holds everything needed to continue bitwise-identically (weights,
optimizer, schedule, grad scaler, sampler position, every RNG state) and
everything needed to evaluate and transcribe alone (resolved config,
vocabulary, feature statistics). Only tensors, numbers, strings, lists and
dicts go in, so that loading a checkpoint can never run code.

``Checkpoint`` names its parts; on disk it is the plain dict that every version
of this code wrote (format version 1), so older checkpoints resume, evaluate and
fine-tune. Writes are atomic (``deepspeech.files``): a kill while saving leaves
the previous checkpoint intact.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import math
import os
import pickle
import re
from dataclasses import dataclass, field
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


@dataclass
class RunState:
    """Where a run stands: what the loop advances and a resume continues from."""

    step: int = 0
    epoch: int = 0
    step_in_epoch: int = 0
    """The sampler's position within ``epoch``."""
    skipped_steps: int = 0
    """Steps whose loss was not finite, so that the optimizer left them out."""
    best_wer: float = math.inf
    validation: dict[str, Any] | None = None
    """The last validation: manifest, utterances, step, wer, cer."""


@dataclass
class Checkpoint:
    """What a run saves: ``model`` and its description are enough to evaluate and
    transcribe; the training state (``None`` in a checkpoint of weights only) resumes."""

    config: dict[str, Any]
    """The resolved config, as ``Config.to_dict`` writes it."""
    vocabulary: list[str]
    model: dict[str, torch.Tensor]
    """The weights that validation scored: with ``optim.ema_decay``, their average."""
    feature_stats: dict[str, Any] | None = None
    training_model: dict[str, torch.Tensor] | None = None
    """With weight averaging, the weights the optimizer updates (``model`` is the average)."""
    optimizer: dict[str, Any] | None = None
    scheduler: dict[str, Any] | None = None
    scaler: dict[str, Any] | None = None
    state: RunState = field(default_factory=RunState)
    rng: list[dict[str, Any]] = field(default_factory=list)
    """Every rank's RNG states, in rank order."""
    parameters: int | None = None
    train_data: dict[str, Any] | None = None
    """The training manifests, utterance count, hours and the data plan's digest."""
    execution: dict[str, Any] | None = None
    """The execution plan the run settled on (``ExecutionPlan.to_dict``)."""

    def to_dict(self) -> dict[str, Any]:
        """The plain dict that goes to disk, in the layout of format version 1."""
        payload = {"format": FORMAT, "version": VERSION, "config": self.config,
                   "vocabulary": self.vocabulary, "feature_stats": self.feature_stats,
                   "model": self.model}
        if self.training_model is not None:
            payload["training_model"] = self.training_model
        state = dataclasses.asdict(self.state)
        validation = state.pop("validation")
        payload.update({"optimizer": self.optimizer, "scheduler": self.scheduler,
                        "scaler": self.scaler, **state, "rng": self.rng,
                        "parameters": self.parameters, "train_data": self.train_data,
                        "validation": validation})
        if self.execution is not None:
            payload["execution"] = self.execution
        return payload

    @classmethod
    def from_dict(cls, payload: dict[str, Any]) -> Checkpoint:
        """A loaded dict; keys that a checkpoint of weights only lacks stay ``None``."""
        state = RunState(**{name.name: payload[name.name]
                            for name in dataclasses.fields(RunState) if name.name in payload})
        return cls(**{name.name: payload[name.name] for name in dataclasses.fields(cls)
                      if name.name in payload and name.name != "state"}, state=state)

    def require_training_state(self, path: str | os.PathLike) -> None:
        """Refuse to resume from a checkpoint that holds weights only."""
        missing = [name for name in ("optimizer", "scaler") if getattr(self, name) is None]
        if missing or not self.rng:
            raise CheckpointError(
                f"{path}: holds weights only (no {', '.join(missing or ['RNG state'])}), so "
                "it cannot resume a run; start a new run from it with train.init_from")


def save_checkpoint(checkpoint: Checkpoint, path: str | os.PathLike) -> None:
    """Serialize ``checkpoint`` to ``path`` atomically (temp file + fsync + rename)."""
    buffer = io.BytesIO()
    torch.save(checkpoint.to_dict(), buffer)
    with atomic_write(path, "wb") as handle:
        handle.write(buffer.getbuffer())


def load_checkpoint(path: str | os.PathLike) -> Checkpoint:
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
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for truncated or foreign files
        raise _unreadable(path, exc) from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a deepspeech checkpoint")
    if payload.get("version") != VERSION:
        raise CheckpointError(
            f"{path}: checkpoint format version {payload.get('version')} is not supported "
            f"(this deepspeech reads version {VERSION})"
        )
    missing = [key for key in REQUIRED_KEYS if key not in payload]
    if missing:
        raise CheckpointError(f"{path}: checkpoint lacks {', '.join(missing)}")
    checkpoint = Checkpoint.from_dict(payload)
    for weights in (checkpoint.model, checkpoint.training_model):
        if weights is not None:
            refuse_non_finite(weights, path)
    return checkpoint


def refuse_non_finite(weights: dict[str, torch.Tensor], path: str | os.PathLike) -> None:
    """Refuse weights that are not tensors of finite numbers, naming the first one: NaN
    weights transcribe everything to nothing and make every score NaN."""
    if not isinstance(weights, dict) or not all(
            isinstance(tensor, torch.Tensor) for tensor in weights.values()):
        raise CheckpointError(f"{path}: the weights are not a mapping of names to tensors")
    for name, tensor in weights.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            bad = int((~torch.isfinite(tensor)).sum())
            raise CheckpointError(
                f"{path}: weight {name} holds {bad} of {tensor.numel()} values that are not "
                "finite (NaN or infinity): a diverged run or a damaged file; use an earlier "
                "checkpoint")


def _unreadable(path: Path, exc: Exception) -> CheckpointError:
    """Why ``torch.load(weights_only=True)`` refused ``path``, without torch's advice to load
    it with ``weights_only=False``: that would run whatever code the file holds."""
    # torch wraps the weights-only unpickler's own error (kept as __context__) in the advice.
    context = exc.__context__
    own = str(context if isinstance(context, pickle.UnpicklingError) else exc)
    named = re.search(r"GLOBAL (\S+)", own) if isinstance(exc, pickle.UnpicklingError) else None
    if named:
        return CheckpointError(
            f"{path}: holds code (objects other than tensors and plain data, such as "
            f"{named.group(1)}) and will not be loaded: a checkpoint is never a way to run code")
    first = own.splitlines()[0] if own else ""
    reason = "" if "weights_only" in first or "add_safe_globals" in first else f": {first}"
    return CheckpointError(f"{path}: not a readable checkpoint (truncated or corrupt?): "
                           f"{type(exc).__name__}{reason}")


def model_card(checkpoint: Checkpoint) -> dict[str, Any]:
    """What a checkpoint is, for the person about to use it: written beside ``best.pt``
    as ``model_card.json`` and printed by ``transcribe``/``evaluate --info``."""
    config = checkpoint.config
    rnn = config["model"]["rnn"]
    return {
        "config_digest": config_digest(config),
        "parameters": checkpoint.parameters,
        "step": checkpoint.state.step, "epoch": checkpoint.state.epoch,
        "train_data": checkpoint.train_data,
        "validation": checkpoint.state.validation,
        "sample_rate": config["data"]["sample_rate"],
        # What a user needs to feed the model (the training-only masks left out).
        "features": {key: value for key, value in config["features"].items()
                     if key != "spec_augment"},
        "model": (f"{len(config['model']['conv']['channels'])} conv, {rnn['layers']} x "
                  f"{rnn['hidden']} {'bidirectional ' if rnn['bidirectional'] else ''}"
                  f"{rnn['kind'].upper()}"),
        "vocabulary": "".join(checkpoint.vocabulary),
        "decode": config["decode"],
    }


def write_model_card(checkpoint: Checkpoint, path: str | os.PathLike) -> None:
    _write_card(model_card(checkpoint), path)


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
