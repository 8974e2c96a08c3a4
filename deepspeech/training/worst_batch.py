"""Worst batch first: the costliest micro-batch once, forward and backward, before step one.

A batch too large for memory should stop a run in its first minute, not hours into an
epoch when the sampler at last reaches the longest utterances (icefall runs its
"pessimistic batches" before training for the same reason). The batch tried is the
micro-batch of the run's first epoch with the most padded audio, utterances times the
longest one's seconds: features are padded to the longest, so that is what one forward
and backward hold in memory at once (a micro-batch where the run cuts its batches into
micro-batches, else a rank's share of the batch). On memory that does not hold it, the
run stops with the batch's length and size and what to change.

It runs as training runs it (train mode, autocast, augmentation, through the run's
micro-batch runner: padded and captured as a CUDA graph where graphs run, beside the graphs
already held) and then leaves no trace: batch-norm running statistics and counters are put
back, the gradients dropped and every RNG restored; the optimizer and the sampler are not
used, and the grad scaler's scale is read, never updated. A run with the check has the
weights of a run without it, bit for bit. Every rank tries the same micro-batch and all
ranks agree on the outcome, so that where it does not fit every rank stops, with the same
message.
"""

from __future__ import annotations

import logging
import time

from deepspeech.data.dataset import Batch
from deepspeech.data.sampler import BucketBatchSampler, sample_seed, split_micro_batches
from deepspeech.errors import ResourceError, allocation_failure, out_of_memory
from deepspeech.training.checkpoint import RunState
from deepspeech.training.data import (
    collate_readable,
    feature_strategy,
    step_batch,
    training_dataset,
)
from deepspeech.training.determinism import no_trace
from deepspeech.training.run import Run

log = logging.getLogger(__name__)


def try_worst_batch(run: Run, state: RunState) -> None:
    """Run the costliest micro-batch of the coming epoch once where
    ``train.worst_batch_first`` asks for it, without a trace; stop every rank with a
    ``ResourceError`` if it does not fit in memory."""
    setting = run.config.train.worst_batch_first
    if not (setting is True or (setting == "auto" and run.device.type == "cuda")):
        return
    began = time.perf_counter()
    with no_trace(run.model):
        batch = _load(run, costliest_micro_batch(run.sampler, state.epoch), state.epoch)
        failure = forward_backward(run, batch) if batch is not None else None
    if batch is None:  # data.bad_input: skip, and every file of it failed to decode
        return
    failures = run.sync.gather_objects(failure)
    failed = [rank for rank, told in enumerate(failures) if told is not None]
    if failed:
        raise ResourceError(_does_not_fit(run, batch, state.epoch, failed, failures[failed[0]]))
    if run.is_main:
        log.info("worst batch first: the costliest micro-batch (%s) ran forward and backward "
                 "in %.1f s; train.worst_batch_first=false skips this", _described(run, batch),
                 time.perf_counter() - began)


def costliest_micro_batch(sampler: BucketBatchSampler, epoch: int) -> list[int]:
    """The utterances of ``epoch``'s micro-batch with the most padded audio (its size times
    its longest utterance's seconds); the first of equals."""
    seconds = sampler.durations.tolist()
    parts = [part for batch in sampler.global_batches(epoch)
             for part in split_micro_batches(batch, sampler.micro_batch_size)]
    return max(parts, key=lambda part: len(part) * max(seconds[index] for index in part))


def forward_backward(run: Run, batch: Batch) -> str | None:
    """The loss and gradients of ``batch`` through the run's micro-batch runner, as a
    training step computes them (padded to its CUDA graph's shape where graphs run); what
    ran out of memory if it did, else None."""
    try:
        run.runner.loss_and_backward(batch, batch.size)
    except (MemoryError, RuntimeError) as error:
        if not out_of_memory(error):
            raise
        return allocation_failure(error)
    return None


def _load(run: Run, indices: list[int], epoch: int) -> Batch | None:
    """The utterances as training loads them in ``epoch`` (augmented with their seeds)."""
    strategy = feature_strategy(run.plan)
    dataset = training_dataset(run.config, run.data.train, run.extractor, strategy)
    seed = run.config.train.seed
    batch = collate_readable([dataset[(index, sample_seed(seed, epoch, index))]
                              for index in indices])
    return step_batch(batch, run.extractor.to(run.device))


def _described(run: Run, batch: Batch) -> str:
    seconds = run.extractor.audio_seconds(batch.feature_lengths.max())
    return f"{batch.size} utterances of up to {seconds:.1f} s, {batch.features.shape[-1]} frames"


def _does_not_fit(run: Run, batch: Batch, epoch: int, failed: list[int], failure: str) -> str:
    ranks = f"rank{'s' if len(failed) > 1 else ''} {', '.join(map(str, failed))}"
    where = f"{ranks} ({run.device})" if run.sync.size > 1 else str(run.device)
    longest = run.sampler.durations.max().item()
    return (f"train.worst_batch_first: the costliest micro-batch of epoch {epoch + 1} "
            f"({_described(run, batch)}) does not fit in memory on {where} "
            f"({failure}); make it smaller: train.micro_batch_size (now "
            f"{run.sampler.micro_batch_size}: the same batch, accumulated from smaller "
            f"micro-batches), train.batch_seconds or train.batch_size (smaller batches), or "
            f"data.max_duration (the longest utterance is {longest:.1f} s); "
            f"train.worst_batch_first=false skips this check")
