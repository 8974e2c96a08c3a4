"""Batches sized by audio (``train.batch_seconds``) in training: a schedule that follows
epochs of different lengths, epochs as long as their plans, and a run stopped mid-epoch
that resumes to the bits of one never stopped."""

from __future__ import annotations

import itertools
import json
import random

import pytest
import torch

from deepspeech.config import OptimConfig, load_config
from deepspeech.data.sampler import SecondsBatchSampler, build_sampler
from deepspeech.training.checkpoint import load_checkpoint
from deepspeech.training.determinism import state_dict_digest
from deepspeech.training.optim import build_optimizer, build_scheduler
from deepspeech.training.trainer import train
from tests.conftest import StopAtStep

# The tiny corpus's utterances last 0.6-0.9 s: batches of 2-5 of them, 13 per epoch.
BY_AUDIO = ["train.batch_seconds=3.0", "train.batch_size=8", "optim.schedule=cosine",
            "optim.final_lr_fraction=0.1"]


def test_the_anneal_schedule_divides_the_rate_where_each_epoch_ends():
    rng = random.Random(3)
    sampler = SecondsBatchSampler([rng.uniform(0.5, 26) for _ in range(300)], 20.0, 12, seed=4)
    counts = [sampler.steps_per_epoch(epoch) for epoch in range(3)]
    assert len(set(counts)) > 1
    config = OptimConfig(lr=1.0, schedule="anneal", anneal=2.0)
    expected = [2.0 ** -epoch for epoch, count in enumerate(counts) for _ in range(count)]
    for start in (0, counts[0] + 5):  # from the start, and resumed mid-epoch
        optimizer = build_optimizer(torch.nn.Linear(1, 1).parameters(), config)
        scheduler = build_scheduler(optimizer, config, sampler.epoch_of_step, sum(counts), start)
        rates = []
        for _ in range(start, sum(counts)):
            rates.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            scheduler.step()
        assert rates == expected[start:]
    ends = list(itertools.accumulate(counts))
    assert [sampler.epoch_of_step(step) for step in (0, ends[0] - 1, ends[0], ends[1])] == [
        0, 0, 1, 2]


@pytest.mark.slow
def test_a_run_by_audio_trains_its_plans_and_resumes_exactly(tiny_corpus, tiny_overrides,
                                                             tmp_path):
    config = load_config(None, [*tiny_overrides(tiny_corpus, tmp_path / "whole"), *BY_AUDIO])
    with open(tiny_corpus["train"], encoding="utf-8") as manifest:
        durations = [json.loads(line)["duration"] for line in manifest]
    plan = build_sampler(config.train, durations)
    steps = [plan.steps_per_epoch(epoch) for epoch in range(2)]
    whole = train(config)
    assert whole.steps == sum(steps) and whole.epochs == 2
    metrics = (tmp_path / "whole" / "metrics.jsonl").read_text().splitlines()
    validated = [json.loads(line)["step"] for line in metrics if "val/wer" in line]
    assert validated == [steps[0], sum(steps)]  # each epoch ends where its plan does
    reference = state_dict_digest(load_checkpoint(tmp_path / "whole" / "last.pt").model)

    cut = tmp_path / "cut"
    stopped = train(load_config(None, [*tiny_overrides(tiny_corpus, cut), *BY_AUDIO]),
                    stop=StopAtStep(steps[0] + 3))
    assert (stopped.steps, stopped.stopped_by) == (steps[0] + 3, "SIGINT")
    resumed = train(load_config(None, [*tiny_overrides(tiny_corpus, cut), *BY_AUDIO,
                                       f"train.resume={cut / 'last.pt'}"]))
    assert resumed.steps == whole.steps
    assert state_dict_digest(load_checkpoint(cut / "last.pt").model) == reference
