"""Length-bucketed, rank-sharded, resumable batches.

An epoch's global batches are a pure function of ``(seed, epoch)``: SortaGrad's
first epoch goes shortest first (Deep Speech 2: short utterances stabilize the
start of CTC training); later epochs shuffle, sort within pools of a few dozen
batches so that each batch holds similar lengths (little padding), and shuffle
the batch order. Because the plan is recomputed, resuming needs only the
position ``(epoch, step)``, not a saved iterator.

A global batch is cut into micro-batches of a fixed size that do not depend on
the number of processes; micro-batches are dealt round robin to the ranks. Each
rank therefore computes exactly the micro-batches that a single process would
have, which is what makes deterministic data-parallel training possible.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch.utils.data import Sampler

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

    def steps_per_epoch(self) -> int:
        return -(-len(self.durations) // self.batch_size)

    def global_batch_size(self, step_in_epoch: int) -> int:
        """Utterances in the global batch at ``step_in_epoch``: only the last can be short."""
        if step_in_epoch < self.steps_per_epoch() - 1:
            return self.batch_size
        return len(self.durations) - self.batch_size * (self.steps_per_epoch() - 1)

    def global_batches(self, epoch: int) -> list[list[int]]:
        """The epoch's global batches as lists of utterance indices."""
        count = len(self.durations)
        if epoch == 0 and self.sortagrad:
            order = _stable_sort(self.durations, torch.arange(count))
            return [order[i:i + self.batch_size] for i in range(0, count, self.batch_size)]
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        shuffled = torch.randperm(count, generator=generator)
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


def split_micro_batches(items: list, micro_batch_size: int) -> list[list]:
    """Undo the flattening of ``BucketBatchSampler``: consecutive groups of the micro size."""
    return [items[i:i + micro_batch_size] for i in range(0, len(items), micro_batch_size)]


def _stable_sort(durations: torch.Tensor, indices: torch.Tensor) -> list[int]:
    keys = durations[indices]
    order = torch.sort(keys, stable=True).indices
    return indices[order].tolist()
