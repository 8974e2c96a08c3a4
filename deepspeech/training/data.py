"""Preparing a run's data: every problem surfaces here, before step one.

The vocabulary, the training corpus (mixed from several manifests where
``data.mix`` asks) and the validation corpus with every bad file named or, under
``data.bad_input: skip``, left out; the data plan's fingerprint that a resume must
match; the global feature statistics; and the loader that hands each step this
rank's micro-batches, in the order of its sampler (``training_sampler``: length buckets,
or whole shards under ``data.shards.order: sequential``), their features computed where
the run's feature strategy says (``feature_strategy``): in the workers, or on the training
device from waveforms that the workers only read and decode, as each micro-batch is handed
over.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from deepspeech.config import Config
from deepspeech.data.audio import load_audio
from deepspeech.data.corpus import (
    Corpus,
    ProblemReport,
    encode_corpus,
    mix_corpora,
    settle,
    warn_if_held_out_in_training,
)
from deepspeech.data.dataset import Batch, SpeechDataset, WaveformBatch, collate, collate_decoded
from deepspeech.data.probe import find_unreadable
from deepspeech.data.probe_cache import distrust, shared_probe
from deepspeech.data.sampler import BucketBatchSampler, build_sampler, split_micro_batches
from deepspeech.data.shard_stream import ShardStream
from deepspeech.data.shards import member_ref
from deepspeech.data.table import LabelTable, UtteranceTable
from deepspeech.data.text import Vocabulary, build_normalizer, build_vocabulary
from deepspeech.data.workers import init_data_worker, worker_start_method
from deepspeech.errors import AudioError, CheckpointError, ConfigError
from deepspeech.execution import ExecutionPlan
from deepspeech.features import (
    Decoded,
    FeatureExtractor,
    FeatureStats,
    FeatureStrategy,
    InWorkers,
    OnDevice,
    frame_sums,
)
from deepspeech.training.checkpoint import Checkpoint
from deepspeech.training.init_from import pretrained_feature_stats
from deepspeech.training.resume import check_same_data, training_data_digest
from deepspeech.training.sync import GradientSync, LocalSync

log = logging.getLogger(__name__)
STATS_UTTERANCES = 500
PROBLEMS_FILE = "unusable_utterances.txt"
"""In ``train.output_dir``: every utterance the pre-flight found unusable, one per line."""


@dataclass
class TrainingData:
    """The corpora a run trains and validates on, and what its checkpoints record of them."""

    train: Corpus
    validation: Corpus | None
    summary: dict[str, Any]
    """Manifests, utterances, hours and the data plan's digest (``train_data``)."""


def training_manifests(config: Config) -> list[tuple[str, float]]:
    """``data.train_manifest`` and the ``data.mix`` manifests, with their weights."""
    return [(config.data.train_manifest, 1.0),
            *((m.manifest, m.weight) for m in config.data.mix)]


def read_training_manifests(config: Config) -> dict[str, UtteranceTable]:
    """Each training manifest parsed once: the vocabulary and the corpus both read it."""
    return {manifest: UtteranceTable.read(manifest) for manifest, _ in training_manifests(config)}


def choose_vocabulary(config: Config, manifests: dict[str, UtteranceTable],
                      resume: Checkpoint | None) -> Vocabulary:
    """A resumed run's own vocabulary, else ``data.vocabulary`` over the training text."""
    if resume is not None:
        return Vocabulary(resume.vocabulary)
    normalizer = build_normalizer(config.data)
    return build_vocabulary(config.data.vocabulary, [
        normalizer(text) for table in manifests.values() for text in table.texts])


def load_training_data(config: Config, manifests: dict[str, UtteranceTable],
                       vocabulary: Vocabulary, output_frames: Callable[[float], int],
                       resume: Checkpoint | None,
                       sync: GradientSync | None = None) -> TrainingData:
    """Both corpora, checked; a resume on other utterances is refused here.

    Every unusable utterance of a manifest, its transcript or its audio, is named in one
    report (the first few in the message, all of them in ``PROBLEMS_FILE`` in
    ``train.output_dir``). Collective under ``sync``: each rank opens its share of the
    audio files, or none where the probe cache (``deepspeech.data.probe_cache``) holds
    them, and every rank reaches the same verdict.
    """
    sync = sync or LocalSync()
    require_sharded(config, manifests)
    normalizer = build_normalizer(config.data)
    report = (ProblemReport(Path(config.train.output_dir) / PROBLEMS_FILE)
              if sync.rank == 0 else None)
    # Speed perturbation shortens audio by up to its fastest factor.
    fastest = max(config.data.augment.speed)

    def checked(manifest: str, table: UtteranceTable, training: bool) -> Corpus:
        corpus, problems = encode_corpus(
            manifest, table, vocabulary, normalizer, config.data,
            (lambda seconds: output_frames(seconds / fastest)) if training else None)
        # Under data.bad_input: skip the validation set is decoded once, here, so that
        # every validation scores the same utterances; training skips what fails as it
        # meets it.
        decode = not training and config.data.bad_input == "skip"
        facts = shared_probe(list(corpus.utterances.paths), manifest, decode=decode, sync=sync)
        problems += find_unreadable(corpus.utterances, decode=decode, manifest=manifest,
                                    facts=facts)
        return settle(corpus, problems, config.data.bad_input, report)

    weights = training_manifests(config)
    train = (mix_corpora([(checked(m, manifests[m], True), w) for m, w in weights],
                         config.train.seed)
             if config.data.mix else checked(config.data.train_manifest,
                                             manifests[config.data.train_manifest], True))
    validation = (checked(config.data.val_manifest,
                          UtteranceTable.read(config.data.val_manifest), False)
                  if config.data.val_manifest else None)
    if validation is not None:
        warn_if_held_out_in_training(train, validation)
    summary = {"manifests": [f"{m} (weight {w:g})" if config.data.mix else m
                             for m, w in weights],
               "utterances": len(train.utterances),
               "hours": round(train.hours, 3),
               "digest": training_data_digest(train)}
    if resume is not None:
        check_same_data(resume, summary, config.train.resume)
    return TrainingData(train, validation, summary)


def require_sharded(config: Config, manifests: dict[str, UtteranceTable]) -> None:
    """Refuse ``data.shards.order: sequential`` on a training manifest that is not
    sharded, before any audio is opened: it has no shards to stream."""
    if config.data.shards.order != "sequential":
        return
    for manifest, table in manifests.items():
        plain = next((path for path in table.paths if member_ref(path) is None), None)
        if plain is not None:
            raise ConfigError(
                f"data.shards.order: sequential reads whole shards, but {manifest} is not "
                f"sharded ({plain} is a plain file): pack it with `deepspeech data shard "
                f"{manifest} -o DIR` and train on DIR/manifest.jsonl, or set "
                "data.shards.order: offset")


def training_sampler(config: Config, corpus: Corpus, sync: GradientSync,
                     resume: Checkpoint | None) -> BucketBatchSampler:
    """This rank's sampler over ``corpus``: ``train``'s batches, or with
    ``data.shards.order: sequential`` its shards streamed. Without a micro-batch size that
    order follows the number of processes, so a resume must keep it."""
    stream = None
    if config.data.shards.order == "sequential":
        stream = ShardStream.of(corpus.utterances.paths, config.data.shards.shuffle_buffer)
        written_by = len(resume.rng) if resume is not None else sync.size
        if not config.train.micro_batch_size and written_by != sync.size:
            raise CheckpointError(
                f"{config.train.resume}: written by {written_by} process(es), resumed by "
                f"{sync.size}; under data.shards.order: sequential without "
                "train.micro_batch_size each process reads its own shards, so the order "
                f"depends on their number: resume with {written_by}")
    return build_sampler(config.train, corpus.utterances.durations.tolist(), sync.rank,
                         sync.size, stream)


def validated_part(corpus: Corpus, config: Config) -> tuple[UtteranceTable, LabelTable]:
    """The utterances and labels that validation scores: the first ``train.val_limit``."""
    limit = config.train.val_limit or None
    return corpus.utterances[:limit], corpus.labels[:limit]


def global_feature_stats(config: Config, extractor: FeatureExtractor, corpus: Corpus,
                         resume: Checkpoint | None, sync: GradientSync) -> FeatureStats:
    """The statistics a resumed run was trained with; else those its ``train.init_from``
    weights were trained with (same input); else computed on the training set."""
    if resume is not None:
        return FeatureStats.from_dict(resume.feature_stats)
    pretrained = (pretrained_feature_stats(config.train.init_from, config)
                  if config.train.init_from else None)
    return pretrained or _computed_stats(extractor, corpus, sync,
                                         config.data.bad_input == "skip")


def _computed_stats(extractor: FeatureExtractor, corpus: Corpus, sync: GradientSync,
                    skip_unreadable: bool) -> FeatureStats:
    """Feature statistics over an evenly spread subset of the training set, computed once:
    each process reads its share of the subset and the sums are added across processes."""
    every = max(1, len(corpus.utterances) // STATS_UTTERANCES)
    chosen = corpus.utterances[::every]
    if sync.rank == 0:
        log.info("computing global feature statistics on %d utterances", len(chosen))

    def waveforms() -> Iterator[torch.Tensor]:
        for u in chosen[sync.rank::sync.size]:
            try:
                yield load_audio(u.audio_filepath, extractor.sample_rate, u.offset,
                                 u.duration if u.offset is not None else None)
            except AudioError as exc:
                error = distrust(u.audio_filepath, exc)  # as a loader does: see SpeechDataset
                if not skip_unreadable:
                    raise error from None
                log.warning("feature statistics without %s", error)

    sums = frame_sums(map(extractor.log_spectrogram, waveforms()), extractor.num_bins)
    return FeatureStats.from_sums(torch.tensor(sync.sum_counts(sums.tolist()),
                                               dtype=torch.float64))


def feature_strategy(plan: ExecutionPlan) -> FeatureStrategy:
    """Where this run computes its features, as its execution plan says."""
    return OnDevice(plan.torch_device) if plan.features_on == "device" else InWorkers()


def step_batch(batch: Batch | WaveformBatch | None, extractor: FeatureExtractor
               ) -> Batch | None:
    """A collated micro-batch as the step takes it: with its features, computed now by
    ``extractor`` (on the training device) where the workers left them to it."""
    return batch.featurized(extractor) if isinstance(batch, WaveformBatch) else batch


def training_dataset(config: Config, corpus: Corpus, extractor: FeatureExtractor,
                     features: FeatureStrategy | None = None) -> SpeechDataset:
    """The training utterances as the model sees them: augmented as ``data.augment`` and
    ``features.spec_augment`` say, each with the seed its sampler item carries, handed
    over as ``features`` says (by default as features)."""
    return SpeechDataset(corpus.utterances, corpus.labels, extractor,
                         config.features.spec_augment, augment=config.data.augment,
                         skip_unreadable=config.data.bad_input == "skip", features=features)


def training_loader(config: Config, corpus: Corpus, extractor: FeatureExtractor,
                    sampler: BucketBatchSampler, plan: ExecutionPlan
                    ) -> DataLoader | DeviceFeatureLoader:
    """Each step's micro-batches for this rank, augmented as ``data.augment`` says, their
    features computed where the plan says."""
    strategy = feature_strategy(plan)
    dataset = training_dataset(config, corpus, extractor, strategy)
    # The loader draws its worker seeds from its own generator, not the global one,
    # so that starting an epoch's iterator (again, after a resume) leaves dropout's
    # random stream untouched. Samples are seeded per item by the sampler.
    loader = DataLoader(
        dataset, batch_sampler=sampler, num_workers=config.data.num_workers,
        collate_fn=functools.partial(_collate_micro_batches, micro_size=sampler.micro_batch_size),
        worker_init_fn=init_data_worker, generator=torch.Generator(),
        multiprocessing_context=worker_start_method(config.data.num_workers),
        pin_memory=strategy.pin_memory)
    if isinstance(strategy, OnDevice):
        return DeviceFeatureLoader(loader, extractor.to(strategy.device))
    return loader


class DeviceFeatureLoader:
    """A DataLoader of ``WaveformBatch`` micro-batches (``OnDevice``) handed over as
    ``Batch``es whose features ``extractor`` has computed on its device: the step takes
    them as it takes the workers' (``features.to(device)`` is then a no-op)."""

    def __init__(self, loader: DataLoader, extractor: FeatureExtractor) -> None:
        self.loader = loader
        self.extractor = extractor

    @property
    def num_workers(self) -> int:
        return self.loader.num_workers

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[list[Batch | None]]:
        # The loader's iterator starts now, not at the first batch: its workers (and the
        # signal handler that ``loader_batches`` then takes out) exist once iter() returns.
        return self._featurized(iter(self.loader))

    def _featurized(self, batches: Iterable[list[WaveformBatch | None]]
                    ) -> Iterator[list[Batch | None]]:
        for micro_batches in batches:
            yield [step_batch(batch, self.extractor) for batch in micro_batches]


def _collate_micro_batches(items: list, micro_size: int) -> list[Batch | WaveformBatch | None]:
    """The rank's micro-batches, less the utterances whose audio failed to decode
    (``data.bad_input: skip``); a micro-batch with none left is None. Cut before the
    failures are taken out, so the other micro-batches are the same for any world size."""
    return [collate_readable(part) for part in split_micro_batches(items, micro_size)]


def collate_readable(items: list) -> Batch | WaveformBatch | None:
    """``items`` as one micro-batch, less those whose audio failed to decode; None if none
    is left. Features are padded into a ``Batch``, ``Decoded`` waveforms into a
    ``WaveformBatch``."""
    readable = [item for item in items if item[1] is not None]
    if not readable:
        return None
    return collate_decoded(readable) if isinstance(readable[0][1], Decoded) else collate(readable)
