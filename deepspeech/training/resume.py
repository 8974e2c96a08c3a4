"""What a resumed run must share with the run that wrote its checkpoint.

A resume is exact (the determinism contract) only on the same model, features, text
rules, seed and data plan. A change there used to crash later with a tensor-shape
error far from its cause (``data.sample_rate``), or to be ignored (``data.vocabulary``:
the checkpoint's was used) or to train on another plan without a word (a manifest
edited between the runs). Such changes are refused here, before any work, naming the
key; a change of the thread or process count is allowed with a warning that says what
it costs, since moving a run to another machine is a reason to resume.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import logging
import math
import struct
import typing
from typing import Any

from deepspeech.config import KEPT_ON_RESUME, Config, moved_keys
from deepspeech.data.corpus import Corpus
from deepspeech.errors import CheckpointError
from deepspeech.execution import ARITHMETIC_KEYS, ExecutionPlan
from deepspeech.training.checkpoint import Checkpoint, load_checkpoint

log = logging.getLogger(__name__)

# What else shapes the updates: allowed to change on a resume, and named when it does.
SCHEDULE_KEYS = (("train", "epochs"), ("train", "max_steps"))


def kept_on_resume(cls: type = Config, prefix: tuple[str, ...] = ()
                   ) -> list[tuple[tuple[str, ...], bool]]:
    """The config's keys and sections marked ``KEPT_ON_RESUME``, each as its path and
    whether it is a whole section, in the config's order."""
    hints = typing.get_type_hints(cls)
    kept = []
    for spec in dataclasses.fields(cls):
        path, hint = (*prefix, spec.name), hints[spec.name]
        if spec.metadata.get("resume") == KEPT_ON_RESUME["resume"]:
            kept.append((path, dataclasses.is_dataclass(hint)))
        elif dataclasses.is_dataclass(hint):
            kept += kept_on_resume(hint, path)
    return kept


def load_resumable(config: Config) -> Checkpoint | None:
    """``train.resume``'s checkpoint, refused before any work if it cannot resume this
    run exactly; None for a new run."""
    if not config.train.resume:
        return None
    checkpoint = load_checkpoint(config.train.resume)
    check_resumable(checkpoint, config)
    return checkpoint


def check_resumable(checkpoint: Checkpoint, config: Config) -> None:
    """Refuse a resume into another model, input or data plan: it could not be exact."""
    checkpoint.require_training_state(config.train.resume)
    stored, current = checkpoint.config, config.to_dict()
    kept = kept_on_resume()
    for path in [path for path, section in kept if section]:
        name = ".".join(path)
        changed = changed_keys(_as_run(stored, *path), _at(current, path), name)
        if changed:
            raise CheckpointError(
                f"{config.train.resume}: the checkpoint's {name} config differs from this "
                f"run's ({', '.join(changed)}); resume with the same {name} settings or "
                "start a new run with train.init_from")
    for path in [path for path, section in kept if not section]:
        was, now = _as_run(stored, *path), _at(current, path)
        if was != now:
            raise CheckpointError(
                f"{config.train.resume}: {'.'.join(path)} was {was!r} in the checkpoint and "
                f"is {now!r} now; a resumed run must keep it (start a new run from its "
                "weights with train.init_from)")


def _as_run(stored: dict, *path: str) -> Any:
    """The value at ``path`` of a checkpoint's config as its run used it: a key that has
    moved since is read at its new place, and a key that the checkpoint predates, at any
    depth, ran with that key's default."""
    stored = copy.deepcopy(stored)
    moved_keys(stored, "the checkpoint's config")
    return _at(_with_defaults(stored, Config().to_dict()), path)


def _with_defaults(stored: Any, defaults: Any) -> Any:
    if not isinstance(stored, dict) or not isinstance(defaults, dict):
        return stored
    return {**defaults, **{key: _with_defaults(value, defaults.get(key))
                           for key, value in stored.items()}}


def _at(config: dict, path: tuple[str, ...]) -> Any:
    for key in path:
        config = config[key]
    return config


def changed_keys(stored: dict, current: dict, prefix: str) -> list[str]:
    """Dotted names of the keys whose values differ, down to the leaves."""
    changed = []
    for key in sorted(stored.keys() | current.keys()):
        was, now = stored.get(key), current.get(key)
        if isinstance(was, dict) and isinstance(now, dict):
            changed += changed_keys(was, now, f"{prefix}.{key}")
        elif was != now:
            changed.append(f"{prefix}.{key}")
    return changed


def training_data_digest(corpus: Corpus) -> str:
    """The data plan's fingerprint: each utterance's duration, offset and labels in order.

    Paths are left out, so that a corpus copied to another disk still resumes.
    """
    digest = hashlib.sha256()
    table = corpus.utterances
    offsets = [-1.0 if offset != offset else offset for offset in table.offsets.tolist()]
    for duration, offset, labels in zip(table.durations.tolist(), offsets, corpus.labels,
                                        strict=True):
        digest.update(struct.pack("<dd", duration, offset))
        digest.update(struct.pack(f"<{len(labels) + 1}q", len(labels), *labels))
    return digest.hexdigest()[:16]  # 64 bits: a guard against mistakes, not attacks


def check_same_data(checkpoint: Checkpoint, train_data: dict[str, Any], path: str) -> None:
    """Refuse a resume on other training utterances (checkpoints with a digest only)."""
    stored = checkpoint.train_data or {}
    if "digest" in stored and stored["digest"] != train_data["digest"]:
        raise CheckpointError(
            f"{path}: the training data differ from the checkpoint's ({train_data['utterances']} "
            f"utterances, {train_data['hours']} h now; {stored['utterances']}, {stored['hours']} h "
            "then); a resumed run must train on the same utterances (data.train_manifest, "
            "data.mix, data.min_duration, data.max_duration, data.bad_input and the manifests' "
            "contents); start a new run from its weights with train.init_from")


def best_wer_to_keep(checkpoint: Checkpoint, manifest: str, utterances: int,
                     path: str) -> float:
    """The checkpoint's best validation WER, if this run validates on the same set.

    ``best.pt`` is the model with the lowest WER seen so far; WERs on two dev sets do not
    compare, so a resume onto another set (``data.val_manifest``, ``train.val_limit``)
    chooses ``best.pt`` afresh.
    """
    before = checkpoint.state.validation
    if not manifest or before is None or (before["manifest"], before["utterances"]) == (
            manifest, utterances):
        return checkpoint.state.best_wer
    log.warning("%s was validated on %s (%d utterances), this run validates on %s (%d): "
                "best.pt is chosen afresh on this run's set", path, before["manifest"],
                before["utterances"], manifest, utterances)
    return math.inf


def rng_state_for_rank(checkpoint: Checkpoint, rank: int) -> dict:
    """This rank's saved RNG state, or with another process count one of the others.

    Dropout and augmentation draw from streams seeded per micro-batch and per sample,
    so a state saved by another rank is as good as this rank's own.
    """
    states = checkpoint.rng
    return states[rank % len(states)]


def warn_if_not_exact(checkpoint: Checkpoint, config: Config, world: int) -> None:
    """Say where the resumed run will not be bit for bit the uninterrupted one.

    What changes the bits is the thread count (oneDNN) and the order of the gradient
    sum, which depends on the process count unless ``distributed.deterministic``.
    """
    written_by = len(checkpoint.rng)
    stored_threads = checkpoint.config["train"]["num_threads"]
    if stored_threads != config.train.num_threads:
        _not_exact(config, f"it was trained with train.num_threads={stored_threads}, this run "
                           f"uses {config.train.num_threads} (the thread count is part of the "
                           "determinism contract)")
    was_deterministic = checkpoint.config.get("distributed", {}).get("deterministic", False)
    if was_deterministic != config.distributed.deterministic:
        _not_exact(config, f"distributed.deterministic was {was_deterministic}, it is "
                           f"{config.distributed.deterministic} now")
    elif written_by != world and not was_deterministic:
        _not_exact(config, f"it was written by {written_by} process(es), this run has {world} "
                           "(distributed.deterministic=true makes the bits independent of the "
                           "process count)")
    elif written_by != world:
        log.info("%s was written by %d process(es), this run has %d; distributed.deterministic "
                 "keeps the bits", config.train.resume, written_by, world)


def warn_if_execution_changed(checkpoint: Checkpoint, config: Config,
                              plan: ExecutionPlan) -> None:
    """Name what the resumed run computes differently from the run before: allowed (a run
    moves to another machine, a kernel gets faster), but where it changes the arithmetic
    the results will differ from what the run would have given.

    Compared as settled (``auto`` may settle otherwise on another machine) where the
    checkpoint holds its plan; as configured for checkpoints written before plans were."""
    now = plan.to_dict()
    if checkpoint.execution is not None:
        before, what = checkpoint.execution, "settled"
    else:
        before, what = _as_run(checkpoint.config, "execution"), "configured"
        now = config.to_dict()["execution"]
    before, now = _device_kind(before), _device_kind(now)
    changed = [key for key in now if key in before and before[key] != now[key]]
    arithmetic = [key for key in changed if key in (*ARITHMETIC_KEYS, "device")]
    said = ", ".join(f"execution.{key} {before[key]!r} -> {now[key]!r}" for key in changed)
    if arithmetic:
        _not_exact(config, f"it computes differently ({said}, as {what}); the results will "
                           "differ from the run before")
    elif changed:
        log.info("resuming %s: %s (as %s); the arithmetic is the same", config.train.resume,
                 said, what)


def _device_kind(plan: dict[str, Any]) -> dict[str, Any]:
    """``plan`` with its device's kind only: which GPU of a machine changes no arithmetic."""
    if "device" not in plan:
        return plan
    return {**plan, "device": str(plan["device"]).split(":")[0]}


def warn_if_optimization_changed(checkpoint: Checkpoint, config: Config, lr: float) -> None:
    """Name the ``optim`` and schedule settings changed on a resume, and the rate they give.

    They take effect from the resumed step on; a longer ``train.epochs`` stretches the
    cosine schedule, so the rate jumps up there rather than continuing down.
    """
    stored, current = checkpoint.config, config.to_dict()
    changed = changed_keys(_as_run(stored, "optim"), current["optim"], "optim")
    changed += [f"{section}.{key}" for section, key in SCHEDULE_KEYS
                if _as_run(stored, section, key) != current[section][key]]
    if changed:
        was = checkpoint.optimizer["param_groups"][0]["lr"]
        _not_exact(config, f"{', '.join(changed)} changed; this run's settings apply from step "
                           f"{checkpoint.state.step} on, where the learning rate is {lr:.3g} (the "
                           f"checkpoint's run was at {was:.3g})")


def _not_exact(config: Config, why: str) -> None:
    log.warning("resuming %s: %s; the run continues, but not bit for bit as the uninterrupted "
                "run would", config.train.resume, why)
