"""Optimizers and learning-rate schedules.

SGD with Nesterov momentum is Deep Speech 2's choice; AdamW converges faster on
small CPU budgets. Schedules are a pure function of the step so that a resumed
run continues on exactly the same rate.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch

from deepspeech.config import OptimConfig


def build_optimizer(parameters: Iterable[torch.nn.Parameter],
                    config: OptimConfig) -> torch.optim.Optimizer:
    """The optimizer named in ``optim.name``."""
    if config.name == "sgd":
        return torch.optim.SGD(parameters, lr=config.lr, momentum=config.momentum,
                               nesterov=config.nesterov, weight_decay=config.weight_decay)
    return torch.optim.AdamW(parameters, lr=config.lr, betas=tuple(config.betas),
                             weight_decay=config.weight_decay)


def lr_factor(step: int, config: OptimConfig, epoch: int, total_steps: int) -> float:
    """Multiplier of ``optim.lr`` at optimizer step ``step`` (0-based), which falls in
    ``epoch`` (0-based; the anneal schedule divides the rate once per epoch done)."""
    warmup = config.warmup_steps
    if step < warmup:
        return (step + 1) / warmup
    if config.schedule == "anneal":
        return config.anneal ** -epoch
    if config.schedule == "cosine":
        span = max(1, total_steps - warmup)
        progress = min(1.0, (step - warmup) / span)
        floor = config.final_lr_fraction
        return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
    return 1.0


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict) -> None:
    """A checkpoint's moments under this run's hyperparameters.

    torch's ``load_state_dict`` restores the parameter groups' settings too, which would
    silently undo an ``optim.*`` change made on a resume (the checkpoint's weight decay,
    betas or momentum would stay in force).
    """
    settings = [{key: value for key, value in group.items() if key != "params"}
                for group in optimizer.param_groups]
    optimizer.load_state_dict(state)
    for group, own in zip(optimizer.param_groups, settings, strict=True):
        group.update(own)


def build_scheduler(optimizer: torch.optim.Optimizer, config: OptimConfig,
                    epoch_of_step: Callable[[int], int], total_steps: int,
                    start_step: int = 0) -> torch.optim.lr_scheduler.LambdaLR:
    """A LambdaLR over ``lr_factor``, positioned at ``start_step``; ``epoch_of_step`` is the
    sampler's (epochs of batches sized by audio differ in length).

    Its rate is this run's config at the step, never a checkpoint's stored one, so a
    resumed run follows its own ``optim.lr`` and schedule.
    """
    for group in optimizer.param_groups:
        group["initial_lr"] = config.lr
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, config, epoch_of_step(step), total_steps),
        last_epoch=start_step - 1,
    )
