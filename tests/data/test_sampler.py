"""Batches: SortaGrad, buckets, determinism, resumption and rank sharding."""

from __future__ import annotations

import random

from deepspeech.data.sampler import BucketBatchSampler, split_micro_batches


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
