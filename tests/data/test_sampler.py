"""Batches: SortaGrad, buckets, determinism, resumption and rank sharding, of a fixed size
or sized by audio (``train.batch_seconds``)."""

from __future__ import annotations

import hashlib
import itertools
import json
import random

import pytest

from deepspeech.config import TrainConfig
from deepspeech.data.sampler import (
    BucketBatchSampler,
    SecondsBatchSampler,
    build_sampler,
    cut_by_seconds,
    split_micro_batches,
)


def durations(count: int = 103) -> list[float]:
    rng = random.Random(0)
    return [rng.uniform(1, 15) for _ in range(count)]


def test_first_epoch_is_shortest_first_then_shuffled_buckets():
    lengths = durations()
    sampler = BucketBatchSampler(lengths, batch_size=10, seed=1)
    first = sampler.global_batches(0)
    flat = [i for batch in first for i in batch]
    assert [lengths[i] for i in flat] == sorted(lengths)
    second = sampler.global_batches(1)
    assert sorted(i for b in second for i in b) == list(range(len(lengths)))
    assert second != first
    assert all(len(b) == 10 for b in second[:-1]) and len(second[-1]) == 3
    assert [sampler.global_batch_size(s) for s in (0, 9, 10)] == [10, 10, 3]
    # Buckets keep similar lengths together: less padding than random batches.
    spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in second)
    assert spread < 0.5 * len(second) * 14


def test_plan_is_a_function_of_seed_and_epoch():
    a = BucketBatchSampler(durations(), 10, seed=5)
    b = BucketBatchSampler(durations(), 10, seed=5)
    c = BucketBatchSampler(durations(), 10, seed=6)
    assert a.global_batches(3) == b.global_batches(3)
    assert a.global_batches(3) != c.global_batches(3)


def test_resume_position_continues_the_same_stream():
    sampler = BucketBatchSampler(durations(), 10, seed=2)
    sampler.set_position(2, 0)
    whole = list(sampler)
    sampler.set_position(2, 4)
    assert list(sampler) == whole[4:]
    assert len(sampler) == len(whole) - 4


def test_ranks_get_disjoint_micro_batches_that_cover_the_batch():
    plans = [BucketBatchSampler(durations(), 12, seed=0, micro_batch_size=3, rank=r,
                                world_size=4) for r in range(4)]
    single = BucketBatchSampler(durations(), 12, seed=0, micro_batch_size=3)
    for step, per_rank in enumerate(zip(*(list(p) for p in plans), strict=True)):
        indices = [i for items in per_rank for i, _ in items]
        assert len(indices) == len(set(indices))
        assert sorted(indices) == sorted(single.global_batches(0)[step])
    # The micro-batches a single process computes are exactly those dealt to ranks,
    # with the same per-sample seeds.
    micro = split_micro_batches(list(single)[0], 3)
    for rank, plan in enumerate(plans):
        assert split_micro_batches(list(plan)[0], 3) == micro[rank::4]


def test_without_a_micro_batch_size_every_rank_gets_an_even_share():
    plans = [BucketBatchSampler(durations(), 16, seed=0, rank=r, world_size=2) for r in range(2)]
    first = [list(plan)[0] for plan in plans]
    assert [len(items) for items in first] == [8, 8]
    assert BucketBatchSampler(durations(), 16, seed=0).micro_batch_size == 16
    assert BucketBatchSampler(durations(), 10, seed=0, world_size=4).micro_batch_size == 3


# -- batches sized by audio (train.batch_seconds) ------------------------------------------


def mixed_durations(count: int = 211) -> list[float]:
    """Mostly short utterances, some long, a few longer than the batches' 20 s."""
    rng = random.Random(3)
    return [rng.choice((rng.uniform(0.5, 3), rng.uniform(3, 12), rng.uniform(20, 26)))
            for _ in range(count)]


def seconds_sampler(**kwargs) -> SecondsBatchSampler:
    return SecondsBatchSampler(mixed_durations(), **{"batch_seconds": 20.0, "batch_size": 12,
                                                      "seed": 4, **kwargs})


def test_cut_by_seconds_fills_runs_up_to_the_limit_and_isolates_longer_items():
    seconds = [3.0, 3.0, 3.0, 10.0, 1.0, 1.0, 1.0]
    assert cut_by_seconds(list(range(7)), seconds, 6.0) == [[0, 1], [2], [3], [4, 5, 6]]
    assert cut_by_seconds(list(range(7)), seconds, 6.0, most=2) == [[0, 1], [2], [3], [4, 5],
                                                                     [6]]
    assert cut_by_seconds([], seconds, 6.0) == []


def test_a_batch_holds_at_most_batch_seconds_unless_one_utterance_alone_is_longer():
    lengths = mixed_durations()
    sampler = seconds_sampler()
    for epoch in range(4):
        batches = sampler.global_batches(epoch)
        assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
        for batch in batches:
            assert len(batch) <= 12
            assert sum(lengths[i] for i in batch) <= 20.0 or len(batch) == 1
        assert any(len(batch) == 1 and lengths[batch[0]] > 20.0 for batch in batches)
        assert any(len(batch) == 12 for batch in batches)  # short ones fill up to the cap


def test_the_first_epoch_goes_shortest_first_and_each_batch_is_as_full_as_it_can_be():
    lengths = mixed_durations()
    batches = seconds_sampler(batch_size=1000).global_batches(0)
    assert [lengths[i] for batch in batches for i in batch] == sorted(lengths)
    for batch, following in itertools.pairwise(batches):
        assert sum(lengths[i] for i in batch) + lengths[following[0]] > 20.0


def test_later_epochs_keep_similar_lengths_together_in_shuffled_order():
    lengths = mixed_durations(2000)
    sampler = SecondsBatchSampler(lengths, batch_seconds=20.0, batch_size=12, seed=4)
    batches = sampler.global_batches(1)
    firsts = [lengths[batch[0]] for batch in batches]
    assert firsts != sorted(firsts)  # the batch order is shuffled
    unsorted = list(range(len(lengths)))
    random.Random(0).shuffle(unsorted)
    # Cut without sorting, the batches waste 16% of their frames on padding; sorted, 2%.
    assert padding(batches, lengths) < 0.2 * padding(cut_by_seconds(unsorted, lengths, 20.0, 12),
                                                     lengths)


def padding(batches: list[list[int]], lengths: list[float]) -> float:
    """The share of the padded batches that is padding."""
    frames = [[lengths[i] for i in batch] for batch in batches]
    return sum(len(f) * max(f) - sum(f) for f in frames) / sum(len(f) * max(f) for f in frames)


def test_the_seconds_plan_is_a_function_of_seed_and_epoch():
    a, b, c = seconds_sampler(), seconds_sampler(), seconds_sampler(seed=5)
    assert a.global_batches(2) == b.global_batches(2)
    assert a.global_batches(1) != a.global_batches(2)
    assert a.global_batches(2) != c.global_batches(2)
    assert seconds_sampler(sortagrad=False).global_batches(0) != a.global_batches(0)


def test_steps_and_global_batch_sizes_follow_each_epochs_plan():
    sampler = seconds_sampler()
    counts = set()
    for epoch in range(6):
        plan = sampler.global_batches(epoch)
        sampler.set_position(epoch, 0)
        assert sampler.steps_per_epoch() == sampler.steps_per_epoch(epoch) == len(plan)
        assert [sampler.global_batch_size(s) for s in range(len(plan))] == [len(b) for b in plan]
        assert len(sampler) == len(plan)
        counts.add(len(plan))
    assert len(counts) > 1  # epochs differ in length: nothing may assume they do not


def test_a_seconds_plan_resumed_mid_epoch_continues_the_same_stream():
    sampler = seconds_sampler(micro_batch_size=3)
    sampler.set_position(3, 0)
    whole = list(sampler)
    fresh = seconds_sampler(micro_batch_size=3)  # a resumed process recomputes the plan
    fresh.set_position(3, 7)
    assert list(fresh) == whole[7:]
    assert len(fresh) == len(whole) - 7
    assert fresh.global_batch_size(7) == len(whole[7])


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_ranks_get_exactly_the_micro_batches_of_a_single_process(world_size):
    single = seconds_sampler(micro_batch_size=2)
    ranks = [seconds_sampler(micro_batch_size=2, rank=r, world_size=world_size)
             for r in range(world_size)]
    for epoch in (0, 1):
        for sampler in (single, *ranks):
            sampler.set_position(epoch, 0)
        steps = list(zip(list(single), *(list(r) for r in ranks), strict=True))
        idle = 0
        for whole, *per_rank in steps:
            micro = split_micro_batches(whole, 2)
            assert all(len(part) == 2 for part in micro[:-1])  # only the last can be short
            for rank, items in enumerate(per_rank):
                assert split_micro_batches(items, 2) == micro[rank::world_size]
            idle += sum(not items for items in per_rank)
        # Batches of fewer micro-batches than ranks leave a rank idle: it must still sync.
        assert (idle > 0) == (world_size > 1)


def test_batch_seconds_zero_builds_the_fixed_size_sampler_with_the_same_plan():
    fixed = build_sampler(TrainConfig(batch_size=10, seed=1, micro_batch_size=5), durations(),
                          rank=1, world_size=2)
    assert type(fixed) is BucketBatchSampler
    reference = BucketBatchSampler(durations(), 10, 1, micro_batch_size=5, rank=1, world_size=2)
    assert [fixed.global_batches(e) for e in range(3)] == [
        reference.global_batches(e) for e in range(3)]
    by_audio = build_sampler(TrainConfig(batch_size=10, batch_seconds=30.0, seed=1),
                             durations())
    assert isinstance(by_audio, SecondsBatchSampler) and by_audio.batch_seconds == 30.0


def test_the_fixed_size_plan_is_bit_for_bit_what_it_was_before_batch_seconds():
    """Digest of plans, rank shares and batch sizes made with the sampler of c400bcc."""
    plans = []
    for sortagrad in (True, False):
        for rank in range(3):
            sampler = BucketBatchSampler(durations(), 12, seed=7, sortagrad=sortagrad,
                                         micro_batch_size=4, rank=rank, world_size=3)
            for epoch in range(3):
                sampler.set_position(epoch, 0)
                steps = sampler.steps_per_epoch()
                plans.append([sampler.global_batches(epoch), list(sampler), steps,
                              [sampler.global_batch_size(s) for s in range(steps)]])
    digest = hashlib.sha256(json.dumps(plans).encode()).hexdigest()[:16]
    assert digest == "17b83f1fcf34f8ff"
