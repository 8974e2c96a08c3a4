"""The training loop: read top to bottom, it is the whole algorithm.

Deep Speech 2 training on one process or many: SortaGrad, CTC loss summed over a
global batch cut into fixed micro-batches, gradients averaged across processes
(``deepspeech.distributed``), clipping, one optimizer step, validation CER/WER
every epoch (of the moving average of the weights where ``optim.ema_decay`` asks
for one), atomic checkpoints (``last.pt`` every N steps, ``best.pt`` by
validation WER). Everything that decides the bits of the weights is a function
of the config and the step, so that a resumed run continues bit for bit.

``train`` reads as its phases: read the checkpoint to resume from, build the run
(``deepspeech.training.run``), start it (``deepspeech.training.start``: fresh, from
another run's weights or where the checkpoint left off), try its costliest batch
(``deepspeech.training.worst_batch``), then epochs of optimizer steps, each followed
by logging, validation and checkpoints. The loop's phases are the functions below
``train``, in the order they run.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import pickle
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from deepspeech.config import Config, save_config
from deepspeech.data.dataset import SpeechDataset
from deepspeech.data.sampler import sample_seed
from deepspeech.data.workers import loader_batches
from deepspeech.device import select_device
from deepspeech.errors import ConfigError
from deepspeech.evaluation.evaluate import evaluate_dataset
from deepspeech.execution import log_plan, resolve_plan
from deepspeech.training.checkpoint import (
    MODEL_CARD,
    Checkpoint,
    RunState,
    save_checkpoint,
    write_model_card,
)
from deepspeech.training.data import training_loader, validated_part
from deepspeech.training.determinism import make_deterministic, rng_state
from deepspeech.training.launch import launched_local_rank
from deepspeech.training.metrics import MetricsLogger, Throughput
from deepspeech.training.output_dir import prepare_output_dir, previous_run
from deepspeech.training.resume import load_resumable
from deepspeech.training.run import Run, build_run
from deepspeech.training.start import start
from deepspeech.training.step import apply_gradients
from deepspeech.training.stop import StopRequests, nothing_to_save
from deepspeech.training.sync import GradientSync, LocalSync
from deepspeech.training.worst_batch import try_worst_batch

log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    """What a finished run reports."""

    steps: int
    epochs: int
    best_wer: float
    output_dir: Path
    skipped_steps: int
    stopped_by: str | None = None
    """The signal that stopped the run early (``last.pt`` holds its last step)."""


def train(config: Config, sync: GradientSync | None = None, *,
          overwrite: bool = False, stop: StopRequests | None = None) -> TrainResult:
    """Train as ``config`` says; ``sync`` averages gradients across processes.

    A new run refuses an ``output_dir`` that holds another run's checkpoints or logs
    unless ``overwrite`` says to replace them. With ``stop`` (given on every rank or
    none), a signal ends the run after the current step, with ``last.pt`` saved there.
    """
    if not config.data.train_manifest:
        raise ConfigError("data.train_manifest: training needs a manifest; set it in the "
                          "config or as data.train_manifest=PATH")
    sync = sync or LocalSync()
    sync.check_same(json.dumps(config.to_dict(), sort_keys=True), "resolved config")
    make_deterministic(config.train.seed, config.train.num_threads)
    plan = resolve_plan(config.execution, select_device(config.train.device,
                                                        launched_local_rank()),
                        gradient_hooks=sync.gradient_hooks)
    if sync.rank == 0:
        log_plan(plan)
    replaced = previous_run(config, sync.rank == 0, overwrite)

    with nothing_to_save():  # a stop before step one ends the run at once
        resume = load_resumable(config)
        run = build_run(config, sync, plan, resume)
        state = start(run, resume)
        if run.finished(state):  # only a resume starts finished: a job queue's last restart
            return TrainResult(state.step, state.epoch, state.best_wer,
                               Path(config.train.resume).parent, state.skipped_steps)
        try_worst_batch(run, state)
    start_output(run, state, replaced)
    run.loader = training_loader(config, run.data.train, run.extractor, run.sampler, run.plan)

    stopping = False
    try:
        while not run.finished(state) and not stopping:
            stopping = train_one_epoch(run, state, stop)
    except BaseException as error:
        _say_what_is_kept(run, state, error)
        raise
    run.metrics.close()
    stopped_by = ((stop.signal_name or "another rank's signal")
                  if stopping and not run.finished(state) else None)  # moot in the last step
    _say_how_it_ended(run, state, stopped_by)
    return TrainResult(state.step, state.epoch, state.best_wer, run.output_dir,
                       state.skipped_steps, stopped_by)


def start_output(run: Run, state: RunState, replaced: list[str]) -> None:
    """Write the run's folder: the earlier run there is replaced only now, since
    ``train.init_from`` may have read its weights from it."""
    if run.is_main:
        prepare_output_dir(run.output_dir, replaced)
        save_config(run.config, run.output_dir / "config.yaml")
        log.info("model: %s parameters; train: %d utterances (%.2f h), %d steps per epoch",
                 f"{run.parameters:,}", len(run.data.train.utterances), run.data.train.hours,
                 run.sampler.steps_per_epoch())
    run.metrics = MetricsLogger(run.output_dir, enabled=run.is_main, resume_step=state.step)


def train_one_epoch(run: Run, state: RunState, stop: StopRequests | None) -> bool:
    """Steps from the sampler's position to the end of the epoch, or to ``max_steps`` or a
    stop; returns whether a stop was asked for."""
    config = run.config
    run.sampler.set_position(state.epoch, state.step_in_epoch)
    run.model.train()
    with tqdm(total=run.sampler.steps_per_epoch(), initial=state.step_in_epoch, unit="step",
              desc=f"epoch {state.epoch + 1}/{config.train.epochs}", disable=not run.is_main,
              dynamic_ncols=True) as progress:
        throughput = Throughput(lambda: run.sync.comm_wait_seconds)
        for micro_batches in loader_batches(run.loader):
            throughput.batch_arrived()
            loss, stopping = optimizer_step(run, state, micro_batches, throughput, stop)
            progress.update()
            done = after_step(run, state, loss, stopping, throughput, progress)
            if done or stopping:
                return stopping
            throughput.fetching()
    return False


def optimizer_step(run: Run, state: RunState, micro_batches: list, throughput: Throughput,
                   stop: StopRequests | None) -> tuple[float, bool]:
    """One step on the global batch: each micro-batch's loss and gradient, their sum
    across processes, the update; returns the batch's loss and whether any rank stops."""
    model, config = run.model, run.config
    global_size = run.sampler.global_batch_size(state.step_in_epoch)
    # Summed where the losses are: one read of the device per step (finish_step), not one
    # per micro-batch.
    local_loss = torch.zeros((), dtype=torch.float64, device=run.device)
    for number, batch in enumerate(micro_batches):
        run.sync.start_micro_batch(last=number == len(micro_batches) - 1)
        if batch is None:
            # Every file of it failed to decode: a zero gradient, so that the gradient
            # hooks and the collectives run as for any micro-batch.
            zero = sum(p.sum() for p in model.parameters()) * 0.0
            run.scaler.scale(zero).backward()
            loss = zero.detach()  # no autograd graph kept alive into a CUDA graph's capture
        else:
            # Dropout draws from a stream owned by the micro-batch, so the bits do not
            # depend on which rank computes it or on how many came before.
            torch.manual_seed(sample_seed(config.train.seed, state.epoch, batch.indices[0]))
            loss = run.runner.loss_and_backward(batch, global_size)
            throughput.audio_seconds += run.extractor.audio_seconds(batch.feature_lengths)
        run.sync.micro_batch_done(model)
        local_loss += loss.double()
    step_loss, stopping = run.sync.finish_step(model, local_loss,
                                               stop=stop is not None and stop.requested)
    if math.isfinite(step_loss):
        apply_gradients(model, run.optimizer, run.scaler, config.optim.grad_clip)
        if run.average is not None:
            run.average.update(model, state.step + 1)
    else:
        state.skipped_steps += 1
        log.warning("step %d: loss is %s, step skipped (%d so far)",
                    state.step + 1, step_loss, state.skipped_steps)
    run.optimizer.zero_grad(set_to_none=True)
    run.scheduler.step()
    state.step += 1
    state.step_in_epoch += 1
    return step_loss, stopping


def after_step(run: Run, state: RunState, loss: float, stopping: bool,
               throughput: Throughput, progress: tqdm) -> bool:
    """Log; at the end of an epoch or of the run validate and keep ``best.pt``; save
    ``last.pt`` every ``train.checkpoint_every`` steps and before stopping. Returns
    whether ``train.max_steps`` is reached."""
    config = run.config
    steps_per_epoch = run.sampler.steps_per_epoch()
    if state.step % config.train.log_every == 0 or state.step_in_epoch == steps_per_epoch:
        lr = run.optimizer.param_groups[0]["lr"]
        window = throughput.take_window(run.sync.size)
        progress.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}",
                             audio_s_per_s=f"{window['train/audio_seconds_per_second']:.0f}")
        run.metrics.log(state.step, {"train/loss": loss, "train/lr": lr, **window,
                                     "train/skipped_steps": state.skipped_steps})
    end_of_epoch = state.step_in_epoch == steps_per_epoch
    if end_of_epoch:
        starved = throughput.epoch_starvation(config.data.num_workers)
        if starved and run.is_main:
            log.warning("epoch %d: %s", state.epoch + 1, starved)
        state.epoch, state.step_in_epoch = state.epoch + 1, 0
    done = run.max_steps_reached(state)
    if end_of_epoch or done:
        state.validation = validate(run, state.step)
        run.model.train()
        wer = state.validation["wer"] if state.validation else math.inf
        if wer < state.best_wer:
            state.best_wer = wer
            save_checkpoints(run, state, "best.pt", card=True)
    if end_of_epoch or done or stopping or state.step % config.train.checkpoint_every == 0:
        # Without validation there is no best.pt: the card describes last.pt.
        save_checkpoints(run, state, "last.pt",
                         card=run.data.validation is None and (end_of_epoch or done))
    return done


def validate(run: Run, step: int) -> dict | None:
    """Greedy CER/WER on the validation set (sharded over ranks); None without one."""
    corpus = run.data.validation
    if corpus is None:
        return None
    dataset = SpeechDataset(*validated_part(corpus, run.config), run.extractor)
    result = evaluate_dataset(run.evaluated, dataset, run.vocabulary,
                              run.config.train.eval_batch_size,
                              num_workers=run.config.data.num_workers, sync=run.sync)
    run.metrics.log(step, {"val/wer": result.wer.rate, "val/cer": result.cer.rate,
                           "val/loss": result.loss})
    if run.is_main:
        log.info("step %d: validation WER %.2f%%, CER %.2f%%, loss %.3f (%d utterances)",
                 step, 100 * result.wer.rate, 100 * result.cer.rate, result.loss,
                 len(dataset))
    return {"manifest": corpus.manifest, "utterances": len(dataset), "step": step,
            "wer": result.wer.rate, "cer": result.cer.rate}


def save_checkpoints(run: Run, state: RunState, name: str, card: bool) -> None:
    """``name`` in the run's folder (and, with ``card``, the model card beside it). Every
    rank calls it: the RNG states of all ranks are gathered into the checkpoint."""
    checkpoint = Checkpoint(
        config=run.config.to_dict(), vocabulary=run.vocabulary.to_list(),
        feature_stats=run.extractor.stats.to_dict() if run.extractor.stats else None,
        model=run.evaluated.state_dict(),
        training_model=run.model.state_dict() if run.average is not None else None,
        optimizer=run.optimizer.state_dict(), scheduler=run.scheduler.state_dict(),
        scaler=run.scaler.state_dict(), state=dataclasses.replace(state),
        rng=run.sync.gather_objects(rng_state()), parameters=run.parameters,
        train_data=run.data.summary, execution=run.plan.to_dict())
    if run.is_main:
        save_checkpoint(checkpoint, run.output_dir / name)
        if card:
            write_model_card(checkpoint, run.output_dir / MODEL_CARD)


def _say_what_is_kept(run: Run, state: RunState, error: BaseException) -> None:
    """What a multi-process run that fails mid-training (a peer dead or frozen past
    ``distributed.timeout_s``) leaves, said before the job is aborted: last.pt, whose step
    may lie well before the step the run reached."""
    if not run.is_main or run.sync.size == 1:
        return
    last = run.output_dir / "last.pt"
    try:
        # mmap: the step without reading the weights (the other ranks wait for the abort)
        kept = torch.load(last, map_location="cpu", weights_only=True, mmap=True)["step"]
    except (OSError, RuntimeError, KeyError, pickle.UnpicklingError):
        kept = None
    if kept is None:
        where = f"no last.pt was written, the {state.step} steps trained are lost"
    else:
        where = (f"last.pt at step {kept} kept, {state.step - kept} later step(s) and the "
                 f"one in flight lost; continue with train.resume={last}")
    log.error("%s at step %d: %s", type(error).__name__, state.step, where)


def _say_how_it_ended(run: Run, state: RunState, stopped_by: str | None) -> None:
    if run.is_main and stopped_by:
        log.warning("stopped by %s at step %d; continue with train.resume=%s", stopped_by,
                    state.step, run.output_dir / "last.pt")
    elif run.is_main:
        shown = (f"{state.best_wer:.2%}" if math.isfinite(state.best_wer)
                 else "n/a (no validation set, so no best.pt: use last.pt)")
        log.info("finished: %d steps, best validation WER %s, checkpoints in %s",
                 state.step, shown, run.output_dir)
