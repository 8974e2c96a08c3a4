"""The sequential shard order under real mpirun: with a fixed micro-batch size each rank
streams its own shards and the run has the bits of a single process."""

from __future__ import annotations

import pytest

from deepspeech.config import load_config
from deepspeech.data.manifest import read_manifest
from deepspeech.data.sampler import build_sampler
from deepspeech.data.shard_stream import ShardStream
from deepspeech.data.shard_writer import shard_manifest
from deepspeech.training.checkpoint import load_checkpoint
from deepspeech.training.determinism import state_dict_digest

pytestmark = [pytest.mark.mpi, pytest.mark.slow]


def test_sequential_order_gives_the_same_bits_for_1_and_2_processes(
        run_job, tiny_corpus, tiny_overrides, tmp_path):
    config = tmp_path / "empty.yaml"
    config.write_text("{}\n")
    sharded = {name: shard_manifest(path, tmp_path / f"shards-{name}", 0.1).manifest
               for name, path in tiny_corpus.items()}
    extra = ("data.shards.order=sequential", "data.shards.shuffle_buffer=10",
             "train.sortagrad=false", "distributed.deterministic=true",
             "train.micro_batch_size=2", "train.epochs=1", "distributed.timeout_s=60")
    utterances = read_manifest(sharded["train"])
    stream = ShardStream.of([u.audio_filepath for u in utterances], 10)
    plan = build_sampler(load_config(None, [*extra, "train.batch_size=8"]).train,
                         [u.duration for u in utterances], 0, 1, stream)
    digests = []
    for ranks in (1, 2):
        output_dir = tmp_path / f"n{ranks}"
        job = run_job("-m deepspeech", ranks, "train", "-c", str(config),
                      *tiny_overrides(sharded, output_dir), *extra, timeout=600)
        assert job.returncode == 0, job.output[-3000:]
        state = load_checkpoint(output_dir / "last.pt")
        assert state.state.step == plan.steps_per_epoch(0)
        digests.append(state_dict_digest(state.model))
    assert digests[0] == digests[1]
