"""Where a run starts: fresh, from another run's weights, or where a checkpoint left off.

All of a start happens in ``start``, in this order: the checkpoint's weights, optimizer,
grad scaler, position and RNG (``train.resume``); the learning-rate schedule at that
step; the check that anything is left to train; what the resume keeps and changes, or
else another run's weights (``train.init_from``); the same weights on every rank; the
moving average of the weights. The checkpoint was read and checked before the run was
built (``deepspeech.training.resume.load_resumable``): the data and the vocabulary
depend on it.
"""

from __future__ import annotations

import dataclasses
import logging

from deepspeech.training.checkpoint import Checkpoint, RunState
from deepspeech.training.data import validated_part
from deepspeech.training.determinism import set_rng_state
from deepspeech.training.ema import WeightAverage
from deepspeech.training.init_from import init_from_checkpoint
from deepspeech.training.optim import build_scheduler, load_optimizer_state
from deepspeech.training.resume import (
    best_wer_to_keep,
    rng_state_for_rank,
    warn_if_execution_changed,
    warn_if_not_exact,
    warn_if_optimization_changed,
)
from deepspeech.training.run import Run, total_steps

log = logging.getLogger(__name__)


def start(run: Run, resume: Checkpoint | None) -> RunState:
    """Set ``run`` up to take its first step and return where it stands; a resumed run
    with nothing left to train (``run.finished``) is returned as it is, untouched."""
    config = run.config
    state = restore(run, resume) if resume is not None else RunState()
    run.scheduler = build_scheduler(run.optimizer, config.optim, run.sampler.epoch_of_step,
                                    total_steps(config, run.sampler), state.step)
    if resume is not None and run.finished(state):
        _say_nothing_left(run, state)  # a job queue that resumes until done exits cleanly
        return state
    if resume is not None:
        continue_from(run, resume, state)
    elif config.train.init_from:
        init_from_checkpoint(run.model, config.train.init_from, run.vocabulary, config)
    run.sync.prepare(run.model, run.plan)
    run.average = (WeightAverage(run.model, config.optim.ema_decay)
                   if config.optim.ema_decay else None)
    if run.average is not None and resume is not None:
        run.average.model.load_state_dict(resume.model)
    return state


def restore(run: Run, resume: Checkpoint) -> RunState:
    """Weights, optimizer, grad scaler, position and this rank's RNG from ``resume``."""
    # With weight averaging "model" holds the average; the optimizer's weights are apart.
    run.model.load_state_dict(resume.training_model if resume.training_model is not None
                              else resume.model)
    load_optimizer_state(run.optimizer, resume.optimizer)
    run.scaler.load_state_dict(resume.scaler)
    set_rng_state(rng_state_for_rank(resume, run.sync.rank))
    return dataclasses.replace(resume.state)


def _say_nothing_left(run: Run, state: RunState) -> None:
    config = run.config
    if run.is_main:
        limit = "max_steps" if run.max_steps_reached(state) else "epochs"
        log.warning("%s has trained %d steps (%d epochs), all that this run's "
                    "train.%s=%d allows: nothing is left to train; raise train.%s to "
                    "train on", config.train.resume, state.step, state.epoch, limit,
                    getattr(config.train, limit), limit)


def continue_from(run: Run, resume: Checkpoint, state: RunState) -> None:
    """Keep the best WER where it compares, and say what the resume changes."""
    config = run.config
    validation = run.data.validation
    validated = 0 if validation is None else len(validated_part(validation, config)[0])
    # best.pt is the best model on one validation set: on another it is chosen afresh.
    state.best_wer = best_wer_to_keep(resume, config.data.val_manifest, validated,
                                      config.train.resume)
    if run.is_main:
        warn_if_not_exact(resume, config, run.sync.size)
        warn_if_execution_changed(resume, config, run.plan)
        warn_if_optimization_changed(resume, config, run.optimizer.param_groups[0]["lr"])
        log.info("resumed from %s at step %d (epoch %d)", config.train.resume, state.step,
                 state.epoch + 1)
