"""``deepspeech bench data``: how fast audio becomes features, in x real time per core.

Measures, on one thread, load (soundfile decode), load + resample, and load +
resample + spectrogram, over a manifest or over files it writes itself at common
rates (8, 16, 44.1 kHz; FLAC and WAV). Then the whole DataLoader path with
workers, which is what training waits on. The target is 200x real time per core.
``--compute-on device`` adds, in the same run, what ``execution.features_on: device``
trains with: workers that only decode, the features computed batched on ``--device``;
and the device's features alone, on batches already decoded into memory.
"""

from __future__ import annotations

import argparse
import functools
import json
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from deepspeech.arguments import non_negative_int, positive_float, positive_int
from deepspeech.config import FeaturesConfig
from deepspeech.data.audio import load_audio
from deepspeech.data.dataset import (
    Batch,
    SpeechDataset,
    WaveformBatch,
    collate,
    collate_decoded,
)
from deepspeech.data.manifest import Utterance, read_manifest
from deepspeech.data.workers import worker_start_method
from deepspeech.device import select_device
from deepspeech.features import FeatureExtractor, OnDevice

RATES = (8000, 16000, 44100)
STEADY_EPOCHS = 3


def _write_corpus(folder: Path, seconds: float) -> list[Utterance]:
    """Speech-like test files: noise shaped by a slow envelope, 3-8 s each."""
    rng = np.random.default_rng(0)
    utterances, total, number = [], 0.0, 0
    while total < seconds:
        rate = RATES[number % len(RATES)]
        duration = float(rng.uniform(3.0, 8.0))
        samples = int(duration * rate)
        envelope = np.abs(np.sin(np.linspace(0, 12 * np.pi, samples)))
        audio = (0.3 * envelope * rng.standard_normal(samples)).astype(np.float32)
        path = folder / f"clip{number}.{'flac' if number % 2 else 'wav'}"
        sf.write(path, audio, rate)
        utterances.append(Utterance(str(path), "x", samples / rate))
        total += samples / rate
        number += 1
    return utterances


def _rate(utterances: list[Utterance], work) -> float:
    start = time.perf_counter()
    for utterance in utterances:
        work(utterance)
    return sum(u.duration for u in utterances) / (time.perf_counter() - start)


def run(args: argparse.Namespace) -> int:
    torch.set_num_threads(1)
    extractor = FeatureExtractor(FeaturesConfig(kind=args.features), args.sample_rate)
    with tempfile.TemporaryDirectory() as tmp:
        if args.manifest:
            utterances = read_manifest(args.manifest)
            if args.limit and args.limit < len(utterances):  # spread over the whole manifest
                utterances = utterances[::-(-len(utterances) // args.limit)]
            source = f"{args.manifest} ({len(utterances)} utterances)"
        else:
            utterances = _write_corpus(Path(tmp), args.seconds)
            source = f"{len(utterances)} generated files at {'/'.join(map(str, RATES))} Hz"
        audio_seconds = sum(u.duration for u in utterances)
        results = {
            "load": _rate(utterances, lambda u: sf.read(u.audio_filepath, dtype="float32")),
            "load+resample": _rate(utterances,
                                   lambda u: load_audio(u.audio_filepath, args.sample_rate)),
            "load+resample+features": _rate(
                utterances, lambda u: extractor(load_audio(u.audio_filepath, args.sample_rate))),
        }
        size = args.batch_size
        batches = [list(range(i, min(i + size, len(utterances))))
                   for i in range(0, len(utterances), size)]
        loader = torch.utils.data.DataLoader(
            SpeechDataset(utterances, [[1]] * len(utterances), extractor),
            batch_sampler=batches, num_workers=args.workers, collate_fn=collate)
        results[f"dataloader ({args.workers} workers)"] = \
            audio_seconds / _seconds(loader, _fetched, torch.device("cpu"))
        if args.compute_on == "device":
            results.update(_device_rates(args, extractor, utterances, batches))
    if args.json:
        print(json.dumps({"source": source, "audio_seconds": audio_seconds,
                          "features": args.features,
                          "x_real_time": {k: round(v, 1) for k, v in results.items()}}))
        return 0
    print(f"data pipeline on {source}: {audio_seconds:.0f} s of audio, "
          f"{args.features} features at {args.sample_rate} Hz")
    for name, value in results.items():
        per_core = "" if name.startswith(("dataloader", "features on")) else "  (1 thread)"
        print(f"  {name:44s} {value:9.0f} x real time{per_core}")
    return 0


def _fetched(batch: object) -> None:
    """Nothing more than fetching the batch."""


def _seconds(batches: Iterable, featurize: Callable, device: torch.device) -> float:
    """Seconds to take every batch of ``batches`` through ``featurize``, until ``device``
    has finished the work."""
    start = time.perf_counter()
    for batch in batches:
        featurize(batch)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def _device_rates(args: argparse.Namespace, extractor: FeatureExtractor,
                  utterances: list[Utterance], batches: list[list[int]]) -> dict[str, float]:
    """x real time of the workers' features (copied to ``args.device`` as the training step
    copies them) against decode-only workers with the features on ``args.device``, both in
    epochs after the one that starts the workers (a fork server's start, which CUDA imposes,
    would otherwise outweigh a small corpus); and of the device's features alone on batches
    decoded beforehand, copies to the device included."""
    device = select_device(args.device, what="--device")
    featurize = functools.partial(WaveformBatch.featurized, extractor=extractor.to(device))
    labels = [[1]] * len(utterances)
    decoding = SpeechDataset(utterances, labels, extractor, features=OnDevice(device))
    decoded = [collate_decoded([decoding[index] for index in batch]) for batch in batches]
    if device.type == "cuda":
        decoded = [batch.pin_memory() for batch in decoded]
    _seconds(decoded[:1], featurize, device)  # FFT plans, kernels, the first allocations
    audio_seconds = sum(u.duration for u in utterances)

    def steady_rate(dataset: SpeechDataset, collate_fn: Callable, work: Callable) -> float:
        loader = torch.utils.data.DataLoader(
            dataset, batch_sampler=batches, num_workers=args.workers, collate_fn=collate_fn,
            pin_memory=device.type == "cuda", persistent_workers=args.workers > 0,
            multiprocessing_context=worker_start_method(args.workers))
        _seconds(loader, work, device)
        seconds = sum(_seconds(loader, work, device) for _ in range(STEADY_EPOCHS))
        return STEADY_EPOCHS * audio_seconds / seconds

    def copied(batch: Batch) -> None:  # as the training step takes the workers' features
        batch.features.to(device)

    workers = f"({args.workers} workers, steady)"
    return {
        f"dataloader {workers}, to {device.type}": steady_rate(
            SpeechDataset(utterances, labels, extractor), collate, copied),
        f"dataloader decode {workers} + {device.type}": steady_rate(
            decoding, collate_decoded, featurize),
        f"features on {device.type} alone": audio_seconds / _seconds(decoded, featurize, device),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--manifest", help="measure on this manifest instead of generated files")
    parser.add_argument("--seconds", type=positive_float, default=600.0,
                        help="seconds of generated audio (without --manifest)")
    parser.add_argument("--limit", type=non_negative_int, default=0,
                        help="with --manifest: at most this many utterances, evenly spread")
    parser.add_argument("--sample-rate", type=positive_int, default=16000)
    parser.add_argument("--features", choices=["linear", "mel"], default="linear")
    parser.add_argument("--workers", type=non_negative_int, default=2)
    parser.add_argument("--batch-size", type=positive_int, default=16,
                        help="utterances per DataLoader batch")
    parser.add_argument("--compute-on", choices=["workers", "device"], default="workers",
                        help="device: also measure decode-only workers with the features "
                             "computed on --device (execution.features_on: device)")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu", "auto"],
                        help="where --compute-on device computes the features")
    parser.add_argument("--json", action="store_true")
