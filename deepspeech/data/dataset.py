"""Utterances -> padded batches: of features that the DataLoader workers compute, or of
decoded waveforms whose features the training device computes, as the dataset's feature
strategy says (``deepspeech.features.strategy``).

Each item the sampler hands out is ``(index, sample_seed)``: the seed drives every
random choice for that sample (waveform augmentation, the VTLP warp, SpecAugment
masks), so a sample is the same whichever worker computes it and whether or not the
run was resumed. A waveform batch carries each utterance's choices, drawn from its seed
in the worker, so its features do not depend on the batch either. Transcripts arrive
already encoded (``deepspeech.data.corpus``).
"""

from __future__ import annotations

import copy
import dataclasses
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
from deepspeech.features import (
    Decoded,
    FeatureExtractor,
    FeatureStrategy,
    InWorkers,
    spec_augment_spans,
)

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


@dataclass
class WaveformBatch:
    """A padded batch of ``Decoded`` utterances and their CTC targets: ``samples``
    ``[B, S]``, zero after each utterance; the rest per utterance as ``Decoded`` has it."""

    samples: torch.Tensor
    num_samples: torch.Tensor
    warps: torch.Tensor
    freq_spans: torch.Tensor
    time_spans: torch.Tensor
    targets: torch.Tensor
    target_lengths: torch.Tensor
    indices: list[int]

    def pin_memory(self) -> WaveformBatch:
        """The batch in page-locked memory, which the DataLoader's pinning thread asks for,
        so that ``featurized`` copies it to the GPU without blocking."""
        return dataclasses.replace(self, samples=self.samples.pin_memory(),
                                   num_samples=self.num_samples.pin_memory(),
                                   freq_spans=self.freq_spans.pin_memory(),
                                   time_spans=self.time_spans.pin_memory())

    def featurized(self, extractor: FeatureExtractor) -> Batch:
        """The ``Batch`` that the workers would have collated, its features computed on
        ``extractor``'s device (lengths and targets stay on the CPU, as there)."""
        device = extractor.device
        features = extractor.batch(self.samples.to(device, non_blocking=True),
                                   self.num_samples, self.warps.tolist(),
                                   self.freq_spans.to(device, non_blocking=True),
                                   self.time_spans.to(device, non_blocking=True))
        return Batch(features, extractor.num_frames(self.num_samples),
                     self.targets, self.target_lengths, self.indices)


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
        features: FeatureStrategy | None = None,
    ) -> None:
        """``skip_unreadable``: an utterance whose audio fails to decode (a cut-off body,
        NaN samples: what a header check cannot see) comes back with ``None`` features
        and a warning naming the file, instead of raising (``data.bad_input: skip``).
        ``features``: what each item carries, by default its features (``InWorkers``)."""
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
        self.feature_strategy = features or InWorkers()

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
                    ) -> tuple[int, torch.Tensor | Decoded | None, torch.Tensor]:
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

    def _features(self, utterance: Utterance, seed: int) -> torch.Tensor | Decoded:
        waveform = load_audio(
            utterance.audio_filepath, self.extractor.sample_rate, utterance.offset,
            utterance.duration if utterance.offset is not None else None,
        )
        warp = self.warp
        if self.augmenter is not None:
            waveform = self.augmenter(waveform, seed)
            warp *= self.augmenter.warp_factor(seed)
        spans = spec_augment_spans(self.extractor.num_bins,
                                   self.extractor.num_frames(waveform.numel()),
                                   self.spec_augment_config or SpecAugmentConfig(),
                                   torch.Generator().manual_seed(seed))
        with naming_audio_file(utterance.audio_filepath):
            return self.feature_strategy.utterance(self.extractor, waveform, warp, *spans)


def ctc_targets(labels: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Transcripts concatenated as CTC takes them, and each one's length."""
    return (torch.cat(list(labels)),
            torch.tensor([len(label) for label in labels], dtype=torch.int64))


def longest_transcript(target_lengths: torch.Tensor) -> int:
    """The longest transcript's label count (0 for an empty batch): the CTC label width."""
    return int(target_lengths.max()) if target_lengths.numel() else 0


def collate(items: Sequence[tuple[int, torch.Tensor, torch.Tensor]]) -> Batch:
    """Pad features to the longest in the batch; targets are concatenated as CTC expects."""
    if not items:
        raise DeepSpeechError("empty batch")
    indices = [index for index, _, _ in items]
    padded, lengths = _padded([features for _, features, _ in items])
    targets, target_lengths = ctc_targets([label for _, _, label in items])
    return Batch(padded, lengths, targets, target_lengths, indices)


def collate_decoded(items: Sequence[tuple[int, Decoded, torch.Tensor]]) -> WaveformBatch:
    """``collate`` for ``Decoded`` utterances: samples padded with zeros to the longest."""
    if not items:
        raise DeepSpeechError("empty batch")
    decoded = [utterance for _, utterance, _ in items]
    samples, _ = _padded([utterance.samples for utterance in decoded])
    targets, target_lengths = ctc_targets([label for _, _, label in items])
    return WaveformBatch(
        samples, torch.tensor([u.num_samples for u in decoded], dtype=torch.int64),
        torch.tensor([u.warp for u in decoded], dtype=torch.float64),
        torch.stack([u.freq_spans for u in decoded]), torch.stack([u.time_spans for u in decoded]),
        targets, target_lengths, [index for index, _, _ in items])


def _padded(tensors: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """``tensors`` stacked, zero-padded along their last axis, and each one's length there."""
    lengths = torch.tensor([tensor.shape[-1] for tensor in tensors], dtype=torch.int64)
    padded = torch.zeros(len(tensors), *tensors[0].shape[:-1], int(lengths.max()))
    for row, tensor in enumerate(tensors):
        padded[row, ..., : tensor.shape[-1]] = tensor
    return padded, lengths
