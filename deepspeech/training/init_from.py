"""``train.init_from``: start a new run from another run's weights.

The other run may have had another vocabulary (its output layer is re-initialized),
another width (mismatched tensors are), or other input features (allowed, and named).
With the same input and global feature normalization, its statistics come along.
"""

from __future__ import annotations

import logging

from deepspeech.config import Config
from deepspeech.data.text import Vocabulary
from deepspeech.errors import CheckpointError
from deepspeech.features import FeatureStats
from deepspeech.model import DeepSpeech2
from deepspeech.training.checkpoint import load_checkpoint
from deepspeech.training.resume import changed_keys

log = logging.getLogger(__name__)


def init_from_checkpoint(model: DeepSpeech2, path: str, vocabulary: Vocabulary,
                         config: Config) -> None:
    """Start from another run's weights; a different vocabulary re-initializes the output."""
    checkpoint = load_checkpoint(path)
    differences = _input_differences(checkpoint.config, config.to_dict())
    if differences:
        # Allowed (a new corpus may need another rate), but the weights' first layers
        # learned other inputs: worth a line when a fine-tuning goes worse than expected.
        log.warning("%s was trained on other input: %s", path, "; ".join(differences))
    weights = checkpoint.model
    own = model.state_dict()
    mismatched = [name for name, tensor in weights.items()
                  if name in own and own[name].shape != tensor.shape]
    if Vocabulary(checkpoint.vocabulary) != vocabulary:
        log.warning("%s: vocabulary differs from this run's; the output layer is "
                    "re-initialized", path)
        # Even at the same size: its rows stand for the other vocabulary's characters.
        mismatched += [name for name in weights
                       if name.startswith("output.") and name not in mismatched]
    if mismatched:
        # One line for all: a changed width would otherwise print one per tensor.
        shown = "; ".join(f"{name} {tuple(own[name].shape)} here, {tuple(weights[name].shape)} "
                          f"there" for name in mismatched[:4])
        more = f"; and {len(mismatched) - 4} more" if len(mismatched) > 4 else ""
        log.warning("%s: %d tensor(s) are left re-initialized: %s%s",
                    path, len(mismatched), shown, more)
    for name in mismatched:
        del weights[name]
    missing, unexpected = model.load_state_dict(weights, strict=False)
    missing = [name for name in missing if name not in mismatched]
    if missing or unexpected:
        raise CheckpointError(
            f"{path}: weights do not fit this model (missing: {missing[:5]}, "
            f"unexpected: {unexpected[:5]}); model configs differ")
    total = sum(tensor.numel() for tensor in own.values())
    kept = sum(own[name].numel() for name in weights if name in own)
    rest = "" if kept == total else "; the rest re-initialized"
    log.info("initialized from %s (%.1f%% of the weights%s)", path, 100 * kept / total, rest)


def pretrained_feature_stats(path: str, config: Config) -> FeatureStats | None:
    """The global feature statistics that the weights at ``path`` were trained with, when
    this run normalizes with global statistics and the same input; else None.

    Its first layers learned inputs scaled by them: fine-tuning AN4 from a pre-training on
    synthetic voices ended 3.8 points better with them than with statistics of the new
    data, the one time it was measured (docs/RECIPES.md, a65 against a59).
    """
    checkpoint = load_checkpoint(path)
    if checkpoint.feature_stats is None or _input_differences(checkpoint.config,
                                                              config.to_dict()):
        return None
    log.info("global feature statistics from %s, which its weights were trained with", path)
    return FeatureStats.from_dict(checkpoint.feature_stats)


def _input_differences(stored: dict, current: dict) -> list[str]:
    """What the model's input was there and is here (SpecAugment is training, not input)."""
    names = [name for name in changed_keys(stored["features"], current["features"], "features")
             if not name.startswith("features.spec_augment.")]
    if stored["data"]["sample_rate"] != current["data"]["sample_rate"]:
        names.append("data.sample_rate")

    def value(config: dict, name: str) -> object:
        for key in name.split("."):
            config = config.get(key) if isinstance(config, dict) else None
        return config

    return [f"{name} {value(stored, name)!r} there, {value(current, name)!r} here"
            for name in names]
