"""Optimizers and learning-rate schedules.

SGD with Nesterov momentum is Deep Speech 2's choice; AdamW converges faster on
small CPU budgets. Schedules are a pure function of the step so that a resumed
run continues on exactly the same rate.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

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


def lr_factor(step: int, config: OptimConfig, steps_per_epoch: int, total_steps: int) -> float:
    """Multiplier of ``optim.lr`` at optimizer step ``step`` (0-based)."""
    warmup = config.warmup_steps
    if step < warmup:
        return (step + 1) / warmup
    if config.schedule == "anneal":
        return config.anneal ** -(step // max(1, steps_per_epoch))
    if config.schedule == "cosine":
        span = max(1, total_steps - warmup)
        progress = min(1.0, (step - warmup) / span)
        floor = config.final_lr_fraction
        return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
    return 1.0


def build_scheduler(optimizer: torch.optim.Optimizer, config: OptimConfig,
                    steps_per_epoch: int, total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """A LambdaLR over ``lr_factor``; its state is just the step count."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, config, steps_per_epoch, total_steps)
    )
