"""The sequential order of a sharded corpus (``data.shards.order: sequential``): whole
shards per stream and rank, a bounded shuffle buffer, equal steps by truncation, a plan
that is a function of seed, epoch and streams, exact resume, and its config refusals."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import numpy as np
import pytest

from deepspeech.config import TrainConfig, load_config
from deepspeech.data.manifest import read_manifest
from deepspeech.data.sampler import ShardStreamSampler, build_sampler, split_micro_batches
from deepspeech.data.shard_stream import ShardStream, shuffled
from deepspeech.data.shard_writer import shard_manifest
from deepspeech.data.shards import member_ref
from deepspeech.data.synth.tones import write_tone_corpus
from deepspeech.data.table import UtteranceTable
from deepspeech.errors import CheckpointError, ConfigError
from deepspeech.training.data import require_sharded, training_sampler
from deepspeech.training.sync import LocalSync

SIZES = [9, 12, 7, 15, 10, 8, 11, 13, 6, 10]  # utterances per shard: 101 in all


def sharded_paths(sizes: list[int] = SIZES) -> list[str]:
    """Member paths of shards of ``sizes``, listed out of their byte order."""
    paths = [f"/corpus/{shard:06d}.tar#{member:08d}.flac@{512 + 4096 * member}+3000"
             for shard, size in enumerate(sizes) for member in range(size)]
    random.Random(0).shuffle(paths)
    return paths


PATHS = sharded_paths()
DURATIONS = [random.Random(index).uniform(1, 15) for index in range(len(PATHS))]


def place(index: int) -> tuple[str, int]:
    """(shard, byte offset) of utterance ``index``."""
    ref = member_ref(PATHS[index])
    return ref.shard, ref.offset


def sampler(buffer: int = 16, batch_size: int = 8, micro: int = 0, rank: int = 0,
            world: int = 1, seed: int = 3) -> ShardStreamSampler:
    train = TrainConfig(batch_size=batch_size, micro_batch_size=micro, seed=seed,
                        sortagrad=False)
    return build_sampler(train, DURATIONS, rank, world, ShardStream.of(PATHS, buffer))


def rank_order(plan: ShardStreamSampler, epoch: int) -> list[int]:
    """Every utterance the rank reads in ``epoch``, in order."""
    plan.set_position(epoch)
    return [index for items in plan for index, _ in items]


def runs(order: list[int], paths: list[str] = PATHS) -> list[str]:
    """The shards of ``order`` with repeats in a row collapsed."""
    shards = [member_ref(paths[index]).shard for index in order]
    return [shard for i, shard in enumerate(shards) if i == 0 or shards[i - 1] != shard]


def test_shards_group_their_members_in_byte_order():
    stream = ShardStream.of(PATHS, 1)
    assert sorted(len(members) for members in stream.members) == sorted(SIZES)
    for members in stream.members:
        assert len({place(i)[0] for i in members}) == 1
        assert [place(i)[1] for i in members] == sorted(place(i)[1] for i in members)
    with pytest.raises(ValueError, match="clips/a.flac: not a shard member"):
        ShardStream.of([*PATHS, "clips/a.flac"], 1)


def test_a_real_shard_folder_streams_shard_by_shard(tmp_path):
    corpus = write_tone_corpus(tmp_path / "loose", 10, seed=0)
    summary = shard_manifest(corpus, tmp_path / "s", 0.06)
    paths = [u.audio_filepath for u in read_manifest(summary.manifest)]
    stream = ShardStream.of(paths, 1)
    assert len(stream.members) == summary.shards
    # One stream, no buffer: the shards in the epoch's order, each read start to end.
    plan = build_sampler(TrainConfig(batch_size=1, sortagrad=False), [1.0] * 10, 0, 1,
                         stream)
    read = [index for batch in plan.global_batches(0) for index in batch]
    assert sorted(read) == list(range(10))
    assert len(set(runs(read, paths))) == len(runs(read, paths)) == summary.shards


@pytest.mark.parametrize(("world", "micro"), [(1, 0), (2, 0), (3, 0), (1, 2), (2, 2)])
def test_an_epoch_reads_each_utterance_at_most_once_and_truncates_only_stream_ends(world,
                                                                                   micro):
    plan = sampler(world=world, micro=micro)
    for epoch in range(3):
        batches = plan.global_batches(epoch)
        read = [index for batch in batches for index in batch]
        assert len(read) == len(set(read)) and set(read) <= set(range(len(PATHS)))
        assert all(len(batch) == 8 for batch in batches)
        streams = len(plan.chunks)
        # Streams are dealt whole shards to about the same length: what falls off their
        # ends is less than a shard and a micro-batch per stream.
        assert len(PATHS) - len(read) < streams * (max(SIZES) + plan.micro_batch_size)
    assert len(PATHS) - len(rank_order(sampler(), 0)) < 8  # one stream: the last batch


def test_each_rank_reads_its_own_shards_whole_one_after_another():
    plans = [sampler(buffer=1, rank=rank, world=2) for rank in range(2)]
    orders = [rank_order(plan, 1) for plan in plans]
    shards = [set(runs(order)) for order in orders]
    assert not shards[0] & shards[1]
    for order in orders:
        assert len(runs(order)) == len(set(runs(order)))  # each shard in one run
        for shard in set(runs(order)):
            offsets = [place(i)[1] for i in order if place(i)[0] == shard]
            assert offsets == sorted(offsets)
        # Whole shards: only the last one read can be cut short by the truncation.
        for shard in runs(order)[:-1]:
            assert sum(place(i)[0] == shard for i in order) == SIZES[int(shard[-10:-4])]


@pytest.mark.parametrize("buffer", [4, 16])
def test_the_buffer_mixes_but_never_sends_an_utterance_out_more_than_its_size_early(buffer):
    for rank in range(2):
        # The buffer draws after the deal: the same shards in the same reading order.
        read = rank_order(sampler(buffer=1, rank=rank, world=2), 0)
        out = rank_order(sampler(buffer=buffer, rank=rank, world=2), 0)
        assert out != read and set(runs(out)) == set(runs(read))
        position = {index: p for p, index in enumerate(read)}
        assert all(p > position[index] - buffer for p, index in enumerate(out)
                   if index in position)


def test_shuffled_keeps_every_item_and_a_buffer_of_one_keeps_the_order():
    items = list(range(50))
    draws = [random.Random(1).random() for _ in items]
    assert shuffled(items, 1, draws) == items
    assert sorted(shuffled(items, 7, draws)) == items != shuffled(items, 7, draws)
    assert sorted(shuffled(items, 500, draws)) == items


def test_the_order_is_a_function_of_seed_and_epoch():
    assert sampler().global_batches(2) == sampler().global_batches(2)
    assert sampler().global_batches(2) != sampler().global_batches(3)
    assert sampler().global_batches(2) != sampler(seed=4).global_batches(2)
    assert runs(rank_order(sampler(buffer=1), 0)) != runs(rank_order(sampler(buffer=1), 1))


def test_world_size_sets_the_streams_unless_the_micro_batch_size_is_fixed():
    # Unset micro-batch size: one stream per process, so another order for 1 and 2.
    assert (len(sampler(world=1).chunks), len(sampler(world=2).chunks)) == (1, 2)
    assert sampler(world=1).global_batches(0) != sampler(world=2).global_batches(0)
    # Fixed: the same global batches for 1 and 2 processes, each rank its micro-batches.
    single = sampler(micro=2)
    pair = [sampler(micro=2, rank=rank, world=2) for rank in range(2)]
    assert pair[0].global_batches(0) == single.global_batches(0)
    for steps in zip(list(single), *(list(plan) for plan in pair), strict=True):
        micro = split_micro_batches(steps[0], 2)
        assert [split_micro_batches(items, 2) for items in steps[1:]] == [micro[0::2],
                                                                          micro[1::2]]


def test_a_resumed_position_gives_the_remaining_batches_exactly():
    for world in (1, 2):
        plan = sampler(rank=world - 1, world=world)
        plan.set_position(1)
        whole = list(plan)
        assert len(whole) == plan.steps_per_epoch(1)
        fresh = sampler(rank=world - 1, world=world)  # a new process, as after a restart
        fresh.set_position(1, 3)
        assert list(fresh) == whole[3:] and len(fresh) == len(whole) - 3
    plan = sampler()
    ends = [plan.steps_per_epoch(0), plan.steps_per_epoch(0) + plan.steps_per_epoch(1)]
    assert [plan.epoch_of_step(s) for s in (0, ends[0] - 1, ends[0], ends[1])] == [0, 0, 1, 2]


def test_too_few_shards_for_the_streams_is_refused_by_key():
    with pytest.raises(ConfigError, match="data.shards.order: sequential reads each of the "
                                          "4 micro-batches.*has 3 shard"):
        build_sampler(TrainConfig(batch_size=8, micro_batch_size=2), [1.0] * 9, 0, 1,
                      ShardStream.of(sharded_paths([3, 3, 3]), 1))
    with pytest.raises(ConfigError, match="data.shards.order: sequential: in epoch 1 one of "
                                          "the 2 streams"):
        build_sampler(TrainConfig(batch_size=8), [1.0] * 11, 0, 2,
                      ShardStream.of(sharded_paths([10, 1]), 1)).steps_per_epoch(0)


def test_config_validates_the_shards_section_by_key():
    sequential = ["data.shards.order=sequential", "train.sortagrad=false"]
    config = load_config(None, [*sequential, "data.shards.shuffle_buffer=50"])
    assert (config.data.shards.order, config.data.shards.shuffle_buffer) == ("sequential", 50)
    assert load_config(None).data.shards.order == "offset"
    with pytest.raises(ConfigError, match="data.shards.shuffle_buffer: must be at least 1"):
        load_config(None, [*sequential, "data.shards.shuffle_buffer=0"])
    with pytest.raises(ConfigError, match="data.shards.order: must be one of offset, "
                                          "sequential; got 'random'"):
        load_config(None, ["data.shards.order=random"])
    with pytest.raises(ConfigError, match="data.shards.order: sequential.*set "
                                          "train.sortagrad: false"):
        load_config(None, ["data.shards.order=sequential"])
    with pytest.raises(ConfigError, match="data.shards.order: sequential.*set "
                                          "train.batch_seconds: 0"):
        load_config(None, [*sequential, "train.batch_seconds=30"])


def test_a_manifest_that_is_not_sharded_is_refused_by_name(tmp_path):
    loose = write_tone_corpus(tmp_path / "loose", 2, seed=0)
    sharded = shard_manifest(loose, tmp_path / "s", 0.06).manifest
    config = load_config(None, ["data.shards.order=sequential", "train.sortagrad=false"])
    tables = {str(m): UtteranceTable.read(str(m)) for m in (sharded, loose)}
    with pytest.raises(ConfigError, match=f"data.shards.order: sequential reads whole "
                                          f"shards, but {loose} is not sharded"):
        require_sharded(config, tables)
    require_sharded(config, {str(sharded): tables[str(sharded)]})
    require_sharded(load_config(None), tables)  # offset takes any manifest


def test_a_resume_by_another_number_of_processes_is_refused_where_it_sets_the_order():
    corpus = SimpleNamespace(utterances=SimpleNamespace(paths=PATHS,
                                                        durations=np.array(DURATIONS)))
    written_by_two = SimpleNamespace(rng=[{}, {}])
    overrides = ["data.shards.order=sequential", "train.sortagrad=false",
                 "train.resume=runs/x/last.pt"]
    with pytest.raises(CheckpointError, match="written by 2 process.*resume with 2"):
        training_sampler(load_config(None, overrides, check_files=False), corpus,
                         LocalSync(), written_by_two)
    fixed = load_config(None, [*overrides, "train.micro_batch_size=4"], check_files=False)
    assert isinstance(training_sampler(fixed, corpus, LocalSync(), written_by_two),
                      ShardStreamSampler)


@pytest.mark.slow
def test_training_in_sequential_order_gives_the_same_bits_and_resumes_to_them(
        tiny_corpus, tiny_overrides, tmp_path):
    from deepspeech.training.checkpoint import load_checkpoint
    from deepspeech.training.determinism import state_dict_digest
    from deepspeech.training.trainer import train
    from tests.conftest import StopAtStep

    sharded = {name: shard_manifest(path, tmp_path / f"shards-{name}", 0.1).manifest
               for name, path in tiny_corpus.items()}
    sequential = ["data.shards.order=sequential", "data.shards.shuffle_buffer=10",
                  "train.sortagrad=false", "train.micro_batch_size=4"]

    def trained(name: str, *extra: str, stop: StopAtStep | None = None):
        result = train(load_config(None, [*tiny_overrides(sharded, tmp_path / name),
                                          *sequential, *extra]), stop=stop)
        return result, state_dict_digest(load_checkpoint(tmp_path / name / "last.pt").model)

    whole, reference = trained("a")
    metrics = (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()
    first_epoch = next(json.loads(line)["step"] for line in metrics if "val/wer" in line)
    assert trained("b", "data.num_workers=2")[1] == reference
    stopped, _ = trained("cut", stop=StopAtStep(first_epoch + 2))
    assert (stopped.steps, stopped.epochs) == (first_epoch + 2, 1)  # mid-way through epoch 2
    resumed, digest = trained("cut", f"train.resume={tmp_path / 'cut' / 'last.pt'}")
    assert (resumed.steps, digest) == (whole.steps, reference)
    # Another order than offset's, so other weights from the same seed.
    offset = train(load_config(None, [*tiny_overrides(sharded, tmp_path / "offset"),
                                      "train.sortagrad=false", "train.micro_batch_size=4"]))
    assert offset.steps != whole.steps or state_dict_digest(
        load_checkpoint(tmp_path / "offset" / "last.pt").model) != reference
