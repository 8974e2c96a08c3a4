"""What one training run composes: data, vocabulary, features, model, optimizer, sampler.

``build_run`` makes them before the first step, with the initial weights of a new
run; where the run starts from (a checkpoint, another run's weights) is decided after,
in ``deepspeech.training.start``. ``Run`` is what every phase of the loop is handed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from deepspeech.config import Config
from deepspeech.data.sampler import BucketBatchSampler
from deepspeech.data.text import Vocabulary
from deepspeech.execution import ExecutionPlan
from deepspeech.features import FeatureExtractor
from deepspeech.model import DeepSpeech2, count_parameters
from deepspeech.model.frames import output_frames_counter
from deepspeech.training.checkpoint import Checkpoint, RunState
from deepspeech.training.data import (
    DeviceFeatureLoader,
    TrainingData,
    choose_vocabulary,
    global_feature_stats,
    load_training_data,
    read_training_manifests,
    training_sampler,
)
from deepspeech.training.ema import WeightAverage
from deepspeech.training.metrics import MetricsLogger
from deepspeech.training.micro_batch import MicroBatchRunner, build_runner
from deepspeech.training.optim import build_optimizer
from deepspeech.training.sync import GradientSync

log = logging.getLogger(__name__)

@dataclass
class Run:
    """The parts one training run composes, built before its first step."""

    config: Config
    sync: GradientSync
    plan: ExecutionPlan
    vocabulary: Vocabulary
    extractor: FeatureExtractor
    data: TrainingData
    model: DeepSpeech2
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    sampler: BucketBatchSampler
    parameters: int
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None
    """Built once the optimizer holds its restored state: it sets the rate for the step."""
    average: WeightAverage | None = None
    metrics: MetricsLogger | None = None
    loader: DataLoader | DeviceFeatureLoader | None = None
    runner: MicroBatchRunner | None = None
    """Each micro-batch's loss and gradient, eager or CUDA graphs, as the plan says."""

    @property
    def device(self) -> torch.device:
        return self.plan.torch_device

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        return self.plan.autocast_dtype

    @property
    def is_main(self) -> bool:
        return self.sync.rank == 0

    @property
    def evaluated(self) -> DeepSpeech2:
        """What validation scores, best.pt keeps and evaluate/transcribe load."""
        return self.average.model if self.average is not None else self.model

    @property
    def output_dir(self) -> Path:
        return Path(self.config.train.output_dir)

    def finished(self, state: RunState) -> bool:
        return self.max_steps_reached(state) or state.epoch >= self.config.train.epochs

    def max_steps_reached(self, state: RunState) -> bool:
        return bool(self.config.train.max_steps) and state.step >= self.config.train.max_steps


def build_run(config: Config, sync: GradientSync, plan: ExecutionPlan,
              resume: Checkpoint | None) -> Run:
    """Prepare the data and build the model, optimizer and sampler (no weights restored)."""
    manifests = read_training_manifests(config)
    vocabulary = choose_vocabulary(config, manifests, resume)
    extractor = FeatureExtractor(config.features, config.data.sample_rate)
    # Built before anything else draws from the seeded generator: its initial weights.
    model = DeepSpeech2(config.model, extractor.num_bins, len(vocabulary), plan.model_mode)
    data = load_training_data(config, manifests, vocabulary,
                              output_frames_counter(model, extractor), resume, sync)
    if config.features.normalize == "global":
        extractor.stats = global_feature_stats(config, extractor, data.train, resume, sync)
    sampler = training_sampler(config, data.train, sync, resume)
    model.to(plan.torch_device)
    # fp16 gradients underflow without loss scaling (the resolver allows fp16 on CUDA only)
    scaler = torch.amp.GradScaler(plan.torch_device.type, enabled=plan.precision == "fp16")
    return Run(config, sync, plan, vocabulary, extractor, data, model,
               build_optimizer(model.parameters(), config.optim), scaler, sampler,
               count_parameters(model), runner=build_runner(plan, model, scaler))


def total_steps(config: Config, sampler: BucketBatchSampler) -> int:
    """The steps this run trains in all: ``train.epochs``, capped by ``train.max_steps``
    (batches sized by audio make epochs of different lengths: each is counted)."""
    steps = sum(sampler.steps_per_epoch(epoch) for epoch in range(config.train.epochs))
    return min(steps, config.train.max_steps) if config.train.max_steps else steps
