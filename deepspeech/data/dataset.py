"""Utterances -> padded feature batches, computed on the fly in DataLoader workers.

Each item the sampler hands out is ``(index, sample_seed)``: the seed drives every
random choice for that sample (waveform augmentation, the VTLP warp, SpecAugment
masks), so a sample is the same whichever worker computes it and whether or not the
run was resumed. Transcripts arrive already encoded (``deepspeech.data.corpus``).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch.utils.data import Dataset

from deepspeech.config import AugmentConfig, SpecAugmentConfig
from deepspeech.data.audio import load_audio
from deepspeech.data.augment import WaveformAugmenter
from deepspeech.data.manifest import Utterance
from deepspeech.data.probe_cache import distrust
from deepspeech.data.table import LabelTable, UtteranceTable
from deepspeech.errors import AudioError, DeepSpeechError, naming_audio_file
from deepspeech.features import FeatureExtractor, spec_augment

log = logging.getLogger(__name__)


@dataclass
class Batch:
    """A padded batch: features ``[B, bins, T]`` and concatenated CTC targets."""

    features: torch.Tensor
    feature_lengths: torch.Tensor
    targets: torch.Tensor
    target_lengths: torch.Tensor
    indices: list[int]

    @property
    def size(self) -> int:
        return len(self.indices)


class SpeechDataset(Dataset):
    """Loads, resamples and featurizes one utterance per item."""

    def __init__(
        self,
        utterances: Sequence[Utterance],
        labels: Sequence[Sequence[int]],
        extractor: FeatureExtractor,
        spec_augment_config: SpecAugmentConfig | None = None,
        augment: AugmentConfig | None = None,
        skip_unreadable: bool = False,
    ) -> None:
        """``skip_unreadable``: an utterance whose audio fails to decode (a cut-off body,
        NaN samples: what a header check cannot see) comes back with ``None`` features
        and a warning naming the file, instead of raising (``data.bad_input: skip``)."""
        if len(utterances) != len(labels):
            raise ValueError("one label sequence per utterance is required")
        # Columns, not objects: forked workers share them instead of copying
        # (deepspeech.data.table), and they pickle as a few arrays for spawned ones.
        self.utterances = (utterances if isinstance(utterances, UtteranceTable)
                           else UtteranceTable.of(utterances))
        self.labels = labels if isinstance(labels, LabelTable) else LabelTable.of(labels)
        self.extractor = extractor
        self.spec_augment_config = spec_augment_config
        self.augmenter = (WaveformAugmenter(augment, extractor.sample_rate)
                          if augment is not None and augment.enabled else None)
        self.warp = 1.0
        self.skip_unreadable = skip_unreadable

    def at_warp(self, warp: float) -> SpeechDataset:
        """The same utterances with the frequency axis warped by ``warp`` (inference VTLN)."""
        warped = copy.copy(self)
        warped.warp = warp
        return warped

    def __len__(self) -> int:
        return len(self.utterances)

    def durations(self) -> list[float]:
        return self.utterances.durations.tolist()

    def label(self, index: int) -> torch.Tensor:
        """The encoded transcript of utterance ``index`` (int32, as CTC takes it)."""
        return self.labels.tensor(index)

    def __getitem__(self, item: tuple[int, int] | int
                    ) -> tuple[int, torch.Tensor | None, torch.Tensor]:
        index, seed = item if isinstance(item, tuple) else (item, 0)
        utterance = self.utterances[index]
        try:
            features = self._features(utterance, seed)
        except AudioError as exc:
            # The pre-flight found this file sound, maybe from the probe cache: from now on
            # the cache no longer says so, and `deepspeech data check` decodes it again.
            error = distrust(utterance.audio_filepath, exc)
            if not self.skip_unreadable:
                raise error from None
            log.warning("skipping an utterance (data.bad_input: skip): %s", error)
            features = None
        return index, features, self.label(index)

    def _features(self, utterance: Utterance, seed: int) -> torch.Tensor:
        waveform = load_audio(
            utterance.audio_filepath, self.extractor.sample_rate, utterance.offset,
            utterance.duration if utterance.offset is not None else None,
        )
        warp = self.warp
        if self.augmenter is not None:
            waveform = self.augmenter(waveform, seed)
            warp *= self.augmenter.warp_factor(seed)
        with naming_audio_file(utterance.audio_filepath):
            features = self.extractor(waveform, warp)
        if self.spec_augment_config is not None:
            generator = torch.Generator().manual_seed(seed)
            features = spec_augment(features, self.spec_augment_config, generator)
        return features


def ctc_targets(labels: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Transcripts concatenated as CTC takes them, and each one's length."""
    return (torch.cat(list(labels)),
            torch.tensor([len(label) for label in labels], dtype=torch.int64))


def collate(items: Sequence[tuple[int, torch.Tensor, torch.Tensor]]) -> Batch:
    """Pad features to the longest in the batch; targets are concatenated as CTC expects."""
    if not items:
        raise DeepSpeechError("empty batch")
    indices = [index for index, _, _ in items]
    lengths = torch.tensor([features.shape[1] for _, features, _ in items], dtype=torch.int64)
    bins = items[0][1].shape[0]
    padded = torch.zeros(len(items), bins, int(lengths.max()))
    for row, (_, features, _) in enumerate(items):
        padded[row, :, : features.shape[1]] = features
    targets, target_lengths = ctc_targets([label for _, _, label in items])
    return Batch(padded, lengths, targets, target_lengths, indices)
