"""Length-bucketed, rank-sharded, resumable batches.

An epoch's global batches are a pure function of ``(seed, epoch)``: SortaGrad's
first epoch goes shortest first (Deep Speech 2: short utterances stabilize the
start of CTC training); later epochs shuffle, sort within pools of a few dozen
batches so that each batch holds similar lengths (little padding), and shuffle
the batch order. Because the plan is recomputed, resuming needs only the
position ``(epoch, step)``, not a saved iterator.

``train.batch_seconds`` sizes global batches by audio instead of by count
(``SecondsBatchSampler``): the same plan, with pools and batches cut where their
seconds run out, so a batch of long utterances holds few of them (memory) and one of
short utterances many (throughput). Its number of steps then differs by epoch.

``data.shards.order: sequential`` (``ShardStreamSampler``) makes another plan of a
sharded corpus: each stream of micro-batches reads whole shards through a shuffle buffer
(``deepspeech.data.shard_stream``). No SortaGrad there, and a different order, so
different weights; the step-based position and the micro-batches dealt to ranks work as
here.

A global batch is cut into micro-batches of a fixed size that do not depend on
the number of processes; micro-batches are dealt round robin to the ranks. Each
rank therefore computes exactly the micro-batches that a single process would
have, which is what makes deterministic data-parallel training possible.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch.utils.data import Sampler

from deepspeech.config import TrainConfig
from deepspeech.data.shard_stream import ShardStream
from deepspeech.errors import ConfigError

POOL_BATCHES = 50


def sample_seed(seed: int, epoch: int, index: int) -> int:
    """A per-sample seed for augmentation: independent of worker, rank and resume."""
    mixed = (seed * 0x9E3779B97F4A7C15 + epoch * 0xBF58476D1CE4E5B9 + index) % (1 << 63)
    return mixed ^ (mixed >> 31)


class BucketBatchSampler(Sampler[list[tuple[int, int]]]):
    """Yields, per global step, this rank's micro-batches as one flat list of items.

    Each item is ``(index, sample_seed)``. The flat list holds the rank's
    micro-batches back to back; only the last micro-batch of an epoch can be short,
    so ``split_micro_batches`` recovers them.
    """

    def __init__(
        self,
        durations: Sequence[float],
        batch_size: int,
        seed: int,
        sortagrad: bool = True,
        micro_batch_size: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        if not durations:
            raise ValueError("no utterances to sample from")
        self.durations = torch.tensor(list(durations), dtype=torch.float64)
        self.batch_size = batch_size
        # Unset: the global batch is shared out evenly, one micro-batch per rank.
        self.micro_batch_size = micro_batch_size or -(-batch_size // world_size)
        self.seed = seed
        self.sortagrad = sortagrad
        self.rank = rank
        self.world_size = world_size
        self.epoch = 0
        self.start_step = 0

    def set_position(self, epoch: int, step: int = 0) -> None:
        """Where the next iteration starts: ``step`` global batches into ``epoch``."""
        self.epoch = epoch
        self.start_step = step

    def steps_per_epoch(self, epoch: int | None = None) -> int:
        """Global batches in ``epoch`` (default: the current one); here the same in all."""
        return -(-len(self.durations) // self.batch_size)

    def epoch_of_step(self, step: int) -> int:
        """The epoch (0-based) that the run's ``step``-th step (0-based) falls in."""
        return step // self.steps_per_epoch()

    def global_batch_size(self, step_in_epoch: int) -> int:
        """Utterances in the global batch at ``step_in_epoch``: only the last can be short."""
        if step_in_epoch < self.steps_per_epoch() - 1:
            return self.batch_size
        return len(self.durations) - self.batch_size * (self.steps_per_epoch() - 1)

    def global_batches(self, epoch: int) -> list[list[int]]:
        """The epoch's global batches as lists of utterance indices."""
        count = len(self.durations)
        if self._sorted_epoch(epoch):
            order = _stable_sort(self.durations, torch.arange(count))
            return [order[i:i + self.batch_size] for i in range(0, count, self.batch_size)]
        generator, shuffled = self._shuffle(epoch)
        pool = self.batch_size * POOL_BATCHES
        batches: list[list[int]] = []
        for start in range(0, count, pool):
            members = _stable_sort(self.durations, shuffled[start:start + pool])
            batches.extend(members[i:i + self.batch_size]
                           for i in range(0, len(members), self.batch_size))
        # Keep the one short batch last so that micro-batches stay full elsewhere.
        tail = [b for b in batches if len(b) < self.batch_size]
        full = [b for b in batches if len(b) == self.batch_size]
        permutation = torch.randperm(len(full), generator=generator).tolist()
        return [full[i] for i in permutation] + tail

    def _sorted_epoch(self, epoch: int) -> bool:
        """SortaGrad: the first epoch goes shortest first instead of shuffled."""
        return epoch == 0 and self.sortagrad

    def _generator(self, epoch: int) -> torch.Generator:
        """The epoch's one source of randomness, seeded by ``(seed, epoch)``."""
        return torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)

    def _shuffle(self, epoch: int) -> tuple[torch.Generator, torch.Tensor]:
        """The epoch's generator and its shuffle of all utterances; the generator goes on to
        shuffle the batch order, so both come from one seed per ``(seed, epoch)``."""
        generator = self._generator(epoch)
        return generator, torch.randperm(len(self.durations), generator=generator)

    def local_items(self, batch: list[int], epoch: int) -> list[tuple[int, int]]:
        """This rank's micro-batches of one global batch, flattened."""
        micro = [batch[i:i + self.micro_batch_size]
                 for i in range(0, len(batch), self.micro_batch_size)]
        mine = micro[self.rank::self.world_size]
        return [(index, sample_seed(self.seed, epoch, index)) for part in mine for index in part]

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        epoch, start = self.epoch, self.start_step
        for batch in self.global_batches(epoch)[start:]:
            yield self.local_items(batch, epoch)

    def __len__(self) -> int:
        return max(0, self.steps_per_epoch() - self.start_step)


class PlannedBatchSampler(BucketBatchSampler):
    """A sampler whose epochs differ in length: each epoch's plan (``_compute_plan``) is
    computed once and ``steps_per_epoch``, ``epoch_of_step`` and ``global_batch_size``
    read it."""

    def __init__(
        self,
        durations: Sequence[float],
        batch_size: int,
        seed: int,
        sortagrad: bool = True,
        micro_batch_size: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        super().__init__(durations, batch_size, seed, sortagrad, micro_batch_size, rank,
                         world_size)
        self._steps: dict[int, int] = {}
        self._plan: tuple[int, list[list[int]]] | None = None

    def steps_per_epoch(self, epoch: int | None = None) -> int:
        """Global batches in ``epoch`` (default: the current one)."""
        epoch = self.epoch if epoch is None else epoch
        if epoch not in self._steps:
            self._steps[epoch] = len(self.global_batches(epoch))
        return self._steps[epoch]

    def epoch_of_step(self, step: int) -> int:
        """The epoch (0-based) that the run's ``step``-th step (0-based) falls in."""
        epoch = 0
        while step >= self.steps_per_epoch(epoch):
            step -= self.steps_per_epoch(epoch)
            epoch += 1
        return epoch

    def global_batch_size(self, step_in_epoch: int) -> int:
        """Utterances in the current epoch's global batch at ``step_in_epoch``."""
        return len(self.global_batches(self.epoch)[step_in_epoch])

    def global_batches(self, epoch: int) -> list[list[int]]:
        """The epoch's global batches as lists of utterance indices (kept for the epoch:
        every step asks for its batch's size)."""
        if self._plan is None or self._plan[0] != epoch:
            self._plan = (epoch, self._compute_plan(epoch))
        return self._plan[1]

    def _compute_plan(self, epoch: int) -> list[list[int]]:
        raise NotImplementedError


class SecondsBatchSampler(PlannedBatchSampler):
    """Global batches of up to ``batch_seconds`` of audio and at most ``batch_size``
    utterances; an utterance longer than ``batch_seconds`` is a batch of its own.

    Later epochs shuffle, cut the order into pools of ``POOL_BATCHES`` batches' worth of
    seconds, sort each pool by duration, cut it into batches by seconds and shuffle the
    batch order. Batch sizes, and so the number of steps, differ by epoch.
    Micro-batches keep a fixed utterance count; only a batch's last one can be short.
    """

    def __init__(
        self,
        durations: Sequence[float],
        batch_seconds: float,
        batch_size: int,
        seed: int,
        sortagrad: bool = True,
        micro_batch_size: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        if not batch_seconds > 0:
            raise ValueError(f"batch_seconds must be positive, got {batch_seconds}")
        super().__init__(durations, batch_size, seed, sortagrad, micro_batch_size, rank,
                         world_size)
        self.batch_seconds = batch_seconds
        self.seconds = self.durations.tolist()

    def _compute_plan(self, epoch: int) -> list[list[int]]:
        if self._sorted_epoch(epoch):
            return self._cut(_stable_sort(self.durations, torch.arange(len(self.seconds))))
        generator, shuffled = self._shuffle(epoch)
        batches: list[list[int]] = []
        for pool in cut_by_seconds(shuffled.tolist(), self.seconds,
                                   self.batch_seconds * POOL_BATCHES):
            batches.extend(self._cut(_stable_sort(self.durations, torch.tensor(pool))))
        permutation = torch.randperm(len(batches), generator=generator).tolist()
        return [batches[i] for i in permutation]

    def _cut(self, order: list[int]) -> list[list[int]]:
        return cut_by_seconds(order, self.seconds, self.batch_seconds, self.batch_size)


class ShardStreamSampler(PlannedBatchSampler):
    """``data.shards.order: sequential``: global batches of ``batch_size`` utterances whose
    micro-batch ``j`` comes from stream ``j``, a run of whole shards through a shuffle
    buffer (``deepspeech.data.shard_stream``). Every batch is full; the steps of an epoch
    are as many as its shortest stream fills, so they differ a little by epoch."""

    def __init__(
        self,
        durations: Sequence[float],
        stream: ShardStream,
        batch_size: int,
        seed: int,
        micro_batch_size: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        super().__init__(durations, batch_size, seed, False, micro_batch_size, rank,
                         world_size)
        self.stream = stream
        self.chunks = [len(part) for part in
                       split_micro_batches(list(range(batch_size)), self.micro_batch_size)]
        if len(stream.members) < len(self.chunks):
            raise ConfigError(
                f"data.shards.order: sequential reads each of the {len(self.chunks)} "
                f"micro-batches of a step ({self._streams_from()}) from shards of its own, "
                f"and the corpus has {len(stream.members)} shard(s): write smaller shards "
                "(deepspeech data shard --shard-mb) or use data.shards.order: offset")

    def _compute_plan(self, epoch: int) -> list[list[int]]:
        batches = self.stream.epoch_batches(self.chunks, self._generator(epoch))
        if not batches:
            raise ConfigError(
                f"data.shards.order: sequential: in epoch {epoch + 1} one of the "
                f"{len(self.chunks)} streams ({self._streams_from()}) holds less than one "
                "micro-batch of utterances; write smaller shards (deepspeech data shard "
                "--shard-mb) or use data.shards.order: offset")
        return batches

    def _streams_from(self) -> str:
        return (f"train.batch_size {self.batch_size} in micro-batches of "
                f"{self.micro_batch_size}, for {self.world_size} process(es)")


def build_sampler(train: TrainConfig, durations: Sequence[float], rank: int = 0,
                  world_size: int = 1, stream: ShardStream | None = None
                  ) -> BucketBatchSampler:
    """The sampler ``train`` asks for: batches of ``train.batch_size`` utterances, or with
    ``train.batch_seconds`` of up to that much audio (``batch_size`` then caps the count);
    given a ``stream``, the sequential order of a sharded corpus."""
    shared = {"seed": train.seed, "micro_batch_size": train.micro_batch_size, "rank": rank,
              "world_size": world_size}
    if stream is not None:
        return ShardStreamSampler(durations, stream, train.batch_size, **shared)
    if train.batch_seconds:
        return SecondsBatchSampler(durations, train.batch_seconds, train.batch_size,
                                   sortagrad=train.sortagrad, **shared)
    return BucketBatchSampler(durations, train.batch_size, sortagrad=train.sortagrad,
                              **shared)


def cut_by_seconds(order: list[int], seconds: Sequence[float], limit: float,
                   most: int | None = None) -> list[list[int]]:
    """``order`` cut into consecutive runs of at most ``limit`` seconds and ``most`` items;
    an item longer than ``limit`` is a run of its own."""
    runs: list[list[int]] = []
    run: list[int] = []
    total = 0.0
    for index in order:
        if run and (total + seconds[index] > limit or len(run) == most):
            runs.append(run)
            run, total = [], 0.0
        run.append(index)
        total += seconds[index]
    if run:
        runs.append(run)
    return runs


def split_micro_batches(items: list, micro_batch_size: int) -> list[list]:
    """Undo the flattening of ``BucketBatchSampler``: consecutive groups of the micro size."""
    return [items[i:i + micro_batch_size] for i in range(0, len(items), micro_batch_size)]


def _stable_sort(durations: torch.Tensor, indices: torch.Tensor) -> list[int]:
    keys = durations[indices]
    order = torch.sort(keys, stable=True).indices
    return indices[order].tolist()
