"""The training loop: read top to bottom, it is the whole algorithm.

Deep Speech 2 training on one process or many: SortaGrad, CTC loss summed over a
global batch cut into fixed micro-batches, gradients averaged across processes
(``deepspeech.distributed``), clipping, one optimizer step, validation CER/WER
every epoch (of the moving average of the weights where ``optim.ema_decay`` asks
for one), atomic checkpoints (``last.pt`` every N steps, ``best.pt`` by
validation WER). Everything that decides the bits of the weights is a function
of the config and the step, so that a resumed run continues bit for bit.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils.data import DataLoader
from tqdm import tqdm

from deepspeech.config import Config, save_config
from deepspeech.data.audio import load_audio
from deepspeech.data.check import without_unreadable
from deepspeech.data.corpus import (
    Corpus,
    load_corpus,
    mix_corpora,
    read_texts,
    warn_if_held_out_in_training,
)
from deepspeech.data.dataset import (
    Batch,
    SpeechDataset,
    collate,
    init_data_worker,
    loader_batches,
    worker_start_method,
)
from deepspeech.data.sampler import BucketBatchSampler, sample_seed, split_micro_batches
from deepspeech.data.text import Vocabulary, build_normalizer, build_vocabulary
from deepspeech.device import select_device
from deepspeech.errors import AudioError, ConfigError
from deepspeech.evaluation.evaluate import evaluate_dataset
from deepspeech.features import FeatureExtractor, FeatureStats
from deepspeech.model import DeepSpeech2, count_parameters
from deepspeech.model.ctc_loss import ctc_loss_sum
from deepspeech.model.frames import output_frames_counter
from deepspeech.training.checkpoint import (
    MODEL_CARD,
    load_checkpoint,
    save_checkpoint,
    write_model_card,
)
from deepspeech.training.determinism import make_deterministic, rng_state, set_rng_state
from deepspeech.training.ema import WeightAverage
from deepspeech.training.init_from import init_from_checkpoint, pretrained_feature_stats
from deepspeech.training.launch import launched_local_rank
from deepspeech.training.metrics import MetricsLogger
from deepspeech.training.optim import build_optimizer, build_scheduler, load_optimizer_state
from deepspeech.training.resume import (
    best_wer_to_keep,
    check_resumable,
    check_same_data,
    rng_state_for_rank,
    training_data_digest,
    warn_if_not_exact,
    warn_if_optimization_changed,
)
from deepspeech.training.stop import StopRequests
from deepspeech.training.sync import GradientSync, LocalSync

log = logging.getLogger(__name__)
STATS_UTTERANCES = 500
AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
"""``train.precision`` -> the dtype autocast runs matrix work in (fp32: no autocast)."""
STARVED_FRACTION = 0.2
"""Above this share of an epoch spent waiting for batches, training says so."""
RESULT_FILES = ("last.pt", "best.pt", "metrics.jsonl")
"""A run's results in ``train.output_dir``: a new run there needs ``overwrite``."""
RUN_FILES = (*RESULT_FILES, MODEL_CARD, "config.yaml", "tensorboard")
"""Everything a run writes there; a new run removes it first, so that the two never mix."""


def autocast_dtype_for(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype of ``train.precision`` on ``device``; fp16 is refused off the GPU,
    where oneDNN has no fp16 LSTM and there is no loss scaling to keep its gradients."""
    if precision == "fp16" and device.type != "cuda":
        raise ConfigError(f"train.precision: fp16 needs a CUDA device, and this run is on "
                          f"{device.type}; use bf16 or fp32 there")
    return AUTOCAST_DTYPES.get(precision)


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
    unless ``overwrite`` says to replace them: hours of training are not lost to a
    forgotten ``train.output_dir``. With ``stop`` (given on every rank or none), a
    signal ends the run after the current step, with ``last.pt`` saved there.
    """
    if not config.data.train_manifest:
        raise ConfigError("data.train_manifest: training needs a manifest; set it in the "
                          "config or as data.train_manifest=PATH")
    sync = sync or LocalSync()
    is_main = sync.rank == 0
    sync.check_same(json.dumps(config.to_dict(), sort_keys=True), "resolved config")
    make_deterministic(config.train.seed, config.train.num_threads)
    device = select_device(config.train.device, launched_local_rank())
    autocast_dtype = autocast_dtype_for(config.train.precision, device)
    output_dir = Path(config.train.output_dir)
    previous_run = [] if config.train.resume or not is_main else _present(output_dir, RUN_FILES)
    results = [name for name in previous_run if name in RESULT_FILES]
    if results and not overwrite:
        raise ConfigError(
            f"train.output_dir: {output_dir} already holds a run ({', '.join(results)}); "
            f"continue it with train.resume={output_dir / 'last.pt'}, train elsewhere with "
            f"another train.output_dir, or replace it with deepspeech train --overwrite")

    # Data, vocabulary and features: every problem surfaces here, before step one.
    normalizer = build_normalizer(config.data)
    resume = load_checkpoint(config.train.resume) if config.train.resume else None
    if resume is not None:
        check_resumable(resume, config)
    weighted_manifests = [(config.data.train_manifest, 1.0),
                          *((m.manifest, m.weight) for m in config.data.mix)]
    if resume is not None:
        vocabulary = Vocabulary(resume["vocabulary"])
    else:
        vocabulary = build_vocabulary(config.data.vocabulary, [
            text for manifest, _ in weighted_manifests
            for text in read_texts(manifest, normalizer)])
    extractor = FeatureExtractor(config.features, config.data.sample_rate)
    model = DeepSpeech2(config.model, extractor.num_bins, len(vocabulary))
    output_frames = output_frames_counter(model, extractor)
    # Speed perturbation shortens audio by up to its fastest factor.
    fastest = max(config.data.augment.speed)

    def training_corpus(manifest: str) -> Corpus:
        return without_unreadable(
            load_corpus(manifest, vocabulary, normalizer, config.data,
                        max_labels=lambda seconds: output_frames(seconds / fastest)),
            config.data.bad_input)

    train_corpus = (mix_corpora([(training_corpus(m), w) for m, w in weighted_manifests],
                                config.train.seed)
                    if config.data.mix else training_corpus(config.data.train_manifest))
    # Under data.bad_input: skip the validation set is decoded once, here, so that every
    # validation scores the same utterances; training skips what fails as it meets it.
    val_corpus = (without_unreadable(
        load_corpus(config.data.val_manifest, vocabulary, normalizer, config.data),
        config.data.bad_input, decode=config.data.bad_input == "skip")
        if config.data.val_manifest else None)
    if val_corpus is not None:
        warn_if_held_out_in_training(train_corpus, val_corpus)
    train_data = {"manifests": [f"{m} (weight {w:g})" if config.data.mix else m
                                for m, w in weighted_manifests],
                  "utterances": len(train_corpus.utterances),
                  "hours": round(train_corpus.hours, 3),
                  "digest": training_data_digest(train_corpus)}
    if resume is not None:
        check_same_data(resume, train_data, config.train.resume)
    if config.features.normalize == "global":
        if resume is not None:
            extractor.stats = FeatureStats.from_dict(resume["feature_stats"])
        else:
            extractor.stats = ((pretrained_feature_stats(config.train.init_from, config)
                                if config.train.init_from else None)
                               or _global_stats(extractor, train_corpus, sync,
                                                config.data.bad_input == "skip"))

    sampler = BucketBatchSampler(
        [u.duration for u in train_corpus.utterances], config.train.batch_size,
        config.train.seed, config.train.sortagrad, config.train.micro_batch_size,
        sync.rank, sync.size,
    )
    steps_per_epoch = sampler.steps_per_epoch()
    total_steps = steps_per_epoch * config.train.epochs
    if config.train.max_steps:
        total_steps = min(total_steps, config.train.max_steps)

    model.to(device)
    optimizer = build_optimizer(model.parameters(), config.optim)
    scaler = torch.amp.GradScaler(device.type, enabled=config.train.precision == "fp16"
                                  and device.type == "cuda")
    step = epoch = step_in_epoch = skipped_steps = 0
    best_wer = math.inf
    if resume is not None:
        # With weight averaging "model" holds the average; the optimizer's weights are apart.
        model.load_state_dict(resume.get("training_model", resume["model"]))
        load_optimizer_state(optimizer, resume["optimizer"])
        scaler.load_state_dict(resume["scaler"])
        step, epoch, step_in_epoch = resume["step"], resume["epoch"], resume["step_in_epoch"]
        skipped_steps = resume["skipped_steps"]
        set_rng_state(rng_state_for_rank(resume, sync.rank))
    scheduler = build_scheduler(optimizer, config.optim, steps_per_epoch, total_steps, step)
    if resume is not None and (epoch >= config.train.epochs or step >= total_steps):
        # A job queue that resumes until done gets a clean exit, and nothing is written.
        if is_main:
            limit = ("max_steps" if config.train.max_steps and step >= config.train.max_steps
                     else "epochs")
            log.warning("%s has trained %d steps (%d epochs), all that this run's "
                        "train.%s=%d allows: nothing is left to train; raise train.%s to "
                        "train on", config.train.resume, step, epoch, limit,
                        getattr(config.train, limit), limit)
        return TrainResult(step, epoch, resume["best_wer"], Path(config.train.resume).parent,
                           skipped_steps)
    if resume is not None:
        validated = 0 if val_corpus is None else len(_validated(val_corpus, config)[0])
        best_wer = best_wer_to_keep(resume, config.data.val_manifest, validated,
                                    config.train.resume)
        if is_main:
            warn_if_not_exact(resume, config, sync.size)
            warn_if_optimization_changed(resume, config, optimizer.param_groups[0]["lr"])
            log.info("resumed from %s at step %d (epoch %d)", config.train.resume, step,
                     epoch + 1)
    elif config.train.init_from:
        init_from_checkpoint(model, config.train.init_from, vocabulary, config)
    sync.prepare(model)
    average = WeightAverage(model, config.optim.ema_decay) if config.optim.ema_decay else None
    if average is not None and resume is not None:
        average.model.load_state_dict(resume["model"])
    # What validation scores, best.pt keeps and evaluate/transcribe load.
    evaluated = average.model if average is not None else model

    parameters = count_parameters(model)
    if is_main:
        # Only now: train.init_from may have read its weights from the run replaced here.
        _remove_run(output_dir, previous_run)
        output_dir.mkdir(parents=True, exist_ok=True)
        save_config(config, output_dir / "config.yaml")
        log.info("model: %s parameters; train: %d utterances (%.2f h), %d steps per epoch",
                 f"{parameters:,}", len(train_corpus.utterances),
                 train_corpus.hours, steps_per_epoch)
    metrics = MetricsLogger(output_dir, enabled=is_main, resume_step=step)
    train_set = SpeechDataset(train_corpus.utterances, train_corpus.labels, extractor,
                              config.features.spec_augment, augment=config.data.augment,
                              skip_unreadable=config.data.bad_input == "skip")
    # The loader draws its worker seeds from its own generator, not the global one,
    # so that starting an epoch's iterator (again, after a resume) leaves dropout's
    # random stream untouched. Samples are seeded per item by the sampler.
    loader = DataLoader(train_set, batch_sampler=sampler, num_workers=config.data.num_workers,
                        collate_fn=functools.partial(_collate_micro_batches,
                                                     micro_size=sampler.micro_batch_size),
                        worker_init_fn=init_data_worker, generator=torch.Generator(),
                        multiprocessing_context=worker_start_method(config.data.num_workers))

    def micro_batch_loss(batch: Batch) -> torch.Tensor:
        """CTC summed over the micro-batch's utterances; the caller divides by the global
        batch size, so how the batch is cut into micro-batches does not change the gradient."""
        # Dropout draws from a stream owned by the micro-batch, so the bits do not depend
        # on which rank computes it or on how many came before.
        torch.manual_seed(sample_seed(config.train.seed, epoch, batch.indices[0]))
        with torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
            log_probs, out_lengths = model(batch.features.to(device),
                                           batch.feature_lengths.to(device))
        return ctc_loss_sum(log_probs, out_lengths, batch.targets, batch.target_lengths)

    def checkpoint_state() -> dict:
        return {
            "config": config.to_dict(), "vocabulary": vocabulary.to_list(),
            "feature_stats": extractor.stats.to_dict() if extractor.stats else None,
            "model": evaluated.state_dict(),
            **({"training_model": model.state_dict()} if average is not None else {}),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(),
            "step": step, "epoch": epoch, "step_in_epoch": step_in_epoch,
            "skipped_steps": skipped_steps, "best_wer": best_wer,
            "rng": sync.gather_objects(rng_state()),
            "parameters": parameters, "train_data": train_data,
            "validation": validation,
        }

    validation = resume.get("validation") if resume is not None else None
    done = bool(config.train.max_steps) and step >= config.train.max_steps
    stopping = False
    while epoch < config.train.epochs and not done and not stopping:
        sampler.set_position(epoch, step_in_epoch)
        model.train()
        with tqdm(total=steps_per_epoch, initial=step_in_epoch, unit="step",
                  desc=f"epoch {epoch + 1}/{config.train.epochs}", disable=not is_main,
                  dynamic_ncols=True) as progress:
            window_audio, window_start = 0.0, time.perf_counter()
            window_wait = sync.comm_wait_seconds
            # Time blocked on the data loader: training should never wait for its data.
            window_data_wait, fetch_start = 0.0, time.perf_counter()
            epoch_data_wait, epoch_timed_from = 0.0, None
            for micro_batches in loader_batches(loader):
                waited = time.perf_counter() - fetch_start
                window_data_wait += waited
                if epoch_timed_from is None:  # the first batch also waits for the workers to start
                    epoch_timed_from = time.perf_counter()
                else:
                    epoch_data_wait += waited
                global_size = sampler.global_batch_size(step_in_epoch)
                local_loss = torch.zeros((), dtype=torch.float64)
                for number, batch in enumerate(micro_batches):
                    sync.start_micro_batch(last=number == len(micro_batches) - 1)
                    if batch is None:
                        # Every file of it failed to decode: a zero gradient, so that the
                        # gradient hooks and the collectives run as for any micro-batch.
                        loss = sum(p.sum() for p in model.parameters()) * 0.0
                    else:
                        loss = micro_batch_loss(batch) / global_size
                        window_audio += extractor.audio_seconds(batch.feature_lengths)
                    scaler.scale(loss).backward()
                    sync.micro_batch_done(model)
                    local_loss += loss.detach().double().cpu()
                step_loss, stopping = sync.finish_step(
                    model, local_loss, stop=stop is not None and stop.requested)
                if math.isfinite(step_loss):
                    scaler.unscale_(optimizer)
                    if config.optim.grad_clip:
                        torch.nn.utils.clip_grad_norm_(model.parameters(), config.optim.grad_clip)
                    scaler.step(optimizer)
                    scaler.update()
                    if average is not None:
                        average.update(model, step + 1)
                else:
                    skipped_steps += 1
                    log.warning("step %d: loss is %s, step skipped (%d so far)",
                                step + 1, step_loss, skipped_steps)
                optimizer.zero_grad(set_to_none=True)
                scheduler.step()
                step += 1
                step_in_epoch += 1
                progress.update()

                if step % config.train.log_every == 0 or step_in_epoch == steps_per_epoch:
                    lr = optimizer.param_groups[0]["lr"]
                    elapsed = max(time.perf_counter() - window_start, 1e-9)
                    speed = window_audio * sync.size / elapsed
                    waiting = (sync.comm_wait_seconds - window_wait) / elapsed
                    progress.set_postfix(loss=f"{step_loss:.3f}", lr=f"{lr:.2e}",
                                         audio_s_per_s=f"{speed:.0f}")
                    metrics.log(step, {"train/loss": step_loss, "train/lr": lr,
                                       "train/audio_seconds_per_second": speed,
                                       "train/comm_wait_fraction": waiting,
                                       "train/data_wait_fraction": window_data_wait / elapsed,
                                       "train/skipped_steps": skipped_steps})
                    window_audio, window_start = 0.0, time.perf_counter()
                    window_wait, window_data_wait = sync.comm_wait_seconds, 0.0

                end_of_epoch = step_in_epoch == steps_per_epoch
                if end_of_epoch:
                    starved = data_starvation(epoch_data_wait,
                                              time.perf_counter() - epoch_timed_from,
                                              config.data.num_workers)
                    if starved and is_main:
                        log.warning("epoch %d: %s", epoch + 1, starved)
                    epoch, step_in_epoch = epoch + 1, 0
                done = bool(config.train.max_steps) and step >= config.train.max_steps
                if end_of_epoch or done:
                    validation = _validate(evaluated, val_corpus, extractor, vocabulary, config,
                                           sync, metrics, step)
                    model.train()
                    wer = validation["wer"] if validation else math.inf
                    if wer < best_wer:
                        best_wer = wer
                        state = checkpoint_state()
                        if is_main:
                            save_checkpoint(state, output_dir / "best.pt")
                            write_model_card(state, output_dir / MODEL_CARD)
                if end_of_epoch or done or stopping or step % config.train.checkpoint_every == 0:
                    state = checkpoint_state()
                    if is_main:
                        save_checkpoint(state, output_dir / "last.pt")
                        if val_corpus is None and (end_of_epoch or done):
                            # No validation, no best.pt: the card describes last.pt.
                            write_model_card(state, output_dir / MODEL_CARD)
                if done or stopping:
                    break
                fetch_start = time.perf_counter()

    metrics.close()
    finished = done or epoch >= config.train.epochs  # a stop asked in the last step is moot
    stopped_by = (stop.signal_name or "another rank's signal") if stopping and not finished \
        else None
    if is_main and stopped_by:
        log.warning("stopped by %s at step %d; continue with train.resume=%s", stopped_by,
                    step, output_dir / "last.pt")
    elif is_main:
        shown = (f"{best_wer:.2%}" if math.isfinite(best_wer)
                 else "n/a (no validation set, so no best.pt: use last.pt)")
        log.info("finished: %d steps, best validation WER %s, checkpoints in %s",
                 step, shown, output_dir)
    return TrainResult(step, epoch, best_wer, output_dir, skipped_steps, stopped_by)


def _present(folder: Path, names: tuple[str, ...]) -> list[str]:
    return [name for name in names if (folder / name).exists()]


def _remove_run(output_dir: Path, names: list[str]) -> None:
    if names:
        log.warning("replacing the earlier run in %s (%s)", output_dir, ", ".join(names))
    for name in names:
        path = output_dir / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()


def data_starvation(waited: float, elapsed: float, num_workers: int) -> str | None:
    """What to tell a person whose training waited for its data more than it should."""
    if elapsed <= 0 or waited / elapsed <= STARVED_FRACTION:
        return None
    return (f"{waited / elapsed:.0%} of the training time went to waiting for batches with "
            f"data.num_workers={num_workers}: the data pipeline is the bottleneck; give it "
            f"more workers if the machine has idle cores")


def _validate(model: DeepSpeech2, corpus: Corpus | None, extractor: FeatureExtractor,
              vocabulary: Vocabulary, config: Config, sync: GradientSync,
              metrics: MetricsLogger, step: int) -> dict | None:
    """Greedy CER/WER on the validation set (sharded over ranks); None without one."""
    if corpus is None:
        return None
    dataset = SpeechDataset(*_validated(corpus, config), extractor)
    result = evaluate_dataset(model, dataset, vocabulary, config.train.eval_batch_size,
                              num_workers=config.data.num_workers, sync=sync)
    metrics.log(step, {"val/wer": result.wer.rate, "val/cer": result.cer.rate,
                       "val/loss": result.loss})
    if sync.rank == 0:
        log.info("step %d: validation WER %.2f%%, CER %.2f%%, loss %.3f (%d utterances)",
                 step, 100 * result.wer.rate, 100 * result.cer.rate, result.loss,
                 len(dataset))
    return {"manifest": corpus.manifest, "utterances": len(dataset), "step": step,
            "wer": result.wer.rate, "cer": result.cer.rate}


def _validated(corpus: Corpus, config: Config) -> tuple[list, list]:
    """The utterances and labels that validation scores: the first ``train.val_limit``."""
    limit = config.train.val_limit or None
    return corpus.utterances[:limit], corpus.labels[:limit]


def _global_stats(extractor: FeatureExtractor, corpus: Corpus, sync: GradientSync,
                  skip_unreadable: bool) -> FeatureStats:
    """Feature statistics over an evenly spread subset of the training set, computed once:
    each process reads its share of the subset and the sums are added across processes."""
    every = max(1, len(corpus.utterances) // STATS_UTTERANCES)
    chosen = corpus.utterances[::every]
    if sync.rank == 0:
        log.info("computing global feature statistics on %d utterances", len(chosen))

    def waveforms() -> Iterator[torch.Tensor]:
        for u in chosen[sync.rank::sync.size]:
            try:
                yield load_audio(u.audio_filepath, extractor.sample_rate, u.offset,
                                 u.duration if u.offset is not None else None)
            except AudioError as exc:
                if not skip_unreadable:
                    raise
                log.warning("feature statistics without %s", exc)

    sums = extractor.frame_sums(waveforms())
    return FeatureStats.from_sums(torch.tensor(sync.sum_counts(sums.tolist()),
                                               dtype=torch.float64))


def _collate_micro_batches(items: list, micro_size: int) -> list[Batch | None]:
    """The rank's micro-batches, less the utterances whose audio failed to decode
    (``data.bad_input: skip``); a micro-batch with none left is None. Cut before the
    failures are taken out, so the other micro-batches are the same for any world size."""
    return [_collate_readable(part) for part in split_micro_batches(items, micro_size)]


def _collate_readable(items: list) -> Batch | None:
    readable = [item for item in items if item[1] is not None]
    return collate(readable) if readable else None
