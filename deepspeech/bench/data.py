"""``deepspeech bench data``: how fast audio becomes features, in x real time per core.

Measures, on one thread, load (soundfile decode), load + resample, and load +
resample + spectrogram, over a manifest or over files it writes itself at common
rates (8, 16, 44.1 kHz; FLAC and WAV). Then the whole DataLoader path with
workers, which is what training waits on. The target is 200x real time per core.
``--compute-on device`` adds, in the same run, what ``execution.features_on: device``
trains with: workers that only decode, the features computed batched on ``--device``;
and the device's features alone, on batches already decoded into memory.

``--shards`` compares loose files with tar shards (``deepspeech data shard``) on a file
system where every open costs ``--open-latency-ms`` (a shared one: each open is a
metadata round trip): loader workers that only decode, as ``features_on: device`` has
them, over one shuffled epoch. In each worker an audit hook (every Python ``open`` and
``os.open``) and a wrapped ``soundfile.SoundFile`` (libsndfile opens files in C) count the
opens of files under the corpus folder and sleep for each one: the files opened per epoch
and the audio seconds delivered per second. ``--shard-sources`` makes a manifest of many
lines on little disk (``deepspeech.bench.linked_corpus``), ``--shards-only`` skips the loose
epochs that its size makes long, ``--folder`` keeps both manifests to time training on.
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from deepspeech.arguments import non_negative_int, positive_float, positive_int
from deepspeech.bench.linked_corpus import write_linked_corpus
from deepspeech.config import FeaturesConfig
from deepspeech.data.audio import load_audio
from deepspeech.data.dataset import (
    Batch,
    SpeechDataset,
    WaveformBatch,
    collate,
    collate_decoded,
)
from deepspeech.data.manifest import Utterance, read_manifest, write_manifest
from deepspeech.data.shard_writer import shard_manifest
from deepspeech.data.synth.tones import write_tone_corpus
from deepspeech.data.workers import init_data_worker, worker_start_method
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


def _slow_file_system(folder: str, latency_s: float, opened: multiprocessing.Value,
                      worker_id: int) -> None:
    """In a loader worker started as training starts it: every open of a file under
    ``folder`` counted in ``opened`` and delayed by ``latency_s`` (module docstring)."""
    init_data_worker(worker_id)

    def opening(path: object) -> None:
        if isinstance(path, (str, os.PathLike)) and os.fspath(path).startswith(folder):
            with opened.get_lock():
                opened.value += 1
            time.sleep(latency_s)

    def hook(event: str, args: tuple) -> None:
        if event == "open":
            opening(args[0])

    sys.addaudithook(hook)  # for the worker's life: the worker ends with its epoch

    class SlowSoundFile(sf.SoundFile):
        def __init__(self, file: object, *args: object, **kwargs: object) -> None:
            opening(file)
            super().__init__(file, *args, **kwargs)

    sf.SoundFile = SlowSoundFile


def _shard_rates(args: argparse.Namespace, folder: Path) -> dict[str, dict[str, float]]:
    """Files opened and x real time of one shuffled, decode-only epoch, for loose files and
    for shards, at no added latency and at ``--open-latency-ms`` per open."""
    if args.manifest:
        loose = Path(args.manifest)
        utterances = read_manifest(loose)
        corpus = str(Path(os.path.commonpath([u.audio_filepath for u in utterances])))
    elif args.shard_sources:
        loose = write_linked_corpus(folder / "loose", args.shard_utterances, args.shard_sources)
        corpus = str(folder)
    else:
        loose = write_tone_corpus(folder / "loose", args.shard_utterances, name="bench")
        corpus = str(folder)
    start = time.perf_counter()
    sharded = shard_manifest(loose, folder / "shards", args.shard_mb)
    shard_seconds = time.perf_counter() - start
    write_manifest(folder / "loose.jsonl", read_manifest(loose))
    extractor = FeatureExtractor(FeaturesConfig(kind=args.features), args.sample_rate)
    order = torch.randperm(sharded.utterances, generator=torch.Generator().manual_seed(0))
    batches = [order[i:i + args.batch_size].tolist()
               for i in range(0, len(order), args.batch_size)]
    results = {}
    kinds = (("shards", sharded.manifest),) if args.shards_only else (
        ("loose", loose), ("shards", sharded.manifest))
    for latency_ms in sorted({0.0, args.open_latency_ms}):
        for kind, manifest in kinds:
            utterances = read_manifest(manifest)
            opened = multiprocessing.Value("q", 0)
            loader = torch.utils.data.DataLoader(
                SpeechDataset(utterances, [[1]] * len(utterances), extractor,
                              features=OnDevice(torch.device("cpu"))),
                batch_sampler=batches, num_workers=max(1, args.workers),
                collate_fn=collate_decoded, worker_init_fn=functools.partial(
                    _slow_file_system, corpus if kind == "loose" else str(folder / "shards"),
                    latency_ms / 1000, opened))
            seconds = _seconds(loader, _fetched, torch.device("cpu"))
            results[f"{kind}, {latency_ms:g} ms per open"] = {
                "files_opened": opened.value,
                "x_real_time": sum(u.duration for u in utterances) / seconds}
    results["setup"] = {"utterances": sharded.utterances, "shards": sharded.shards,
                        "workers": max(1, args.workers), "shard_mb": sharded.bytes / 1e6,
                        "shard_seconds": shard_seconds}
    return results


def run(args: argparse.Namespace) -> int:
    torch.set_num_threads(1)
    if args.shards:
        return _report_shards(args)
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


def _report_shards(args: argparse.Namespace) -> int:
    if args.folder:
        results = _shard_rates(args, Path(args.folder).resolve())
    else:
        with tempfile.TemporaryDirectory() as tmp:
            results = _shard_rates(args, Path(tmp))
    setup = results.pop("setup")
    if args.json:
        print(json.dumps({**setup, "results": {
            name: {"files_opened": value["files_opened"],
                   "x_real_time": round(value["x_real_time"], 1)}
            for name, value in results.items()}}))
        return 0
    print(f"loose files vs shards: {setup['utterances']} utterances, {setup['shards']} "
          f"shard(s), {setup['shard_mb']:.0f} MB in all, written in "
          f"{setup['shard_seconds']:.0f} s, {setup['workers']} decode-only worker(s), one "
          "shuffled epoch")
    for name, value in results.items():
        print(f"  {name:28s} {value['files_opened']:8d} files opened "
              f"{value['x_real_time']:9.0f} x real time")
    if args.shards_only:
        return 0
    slow = f"{args.open_latency_ms:g} ms per open"
    ratio = results[f"shards, {slow}"]["x_real_time"] / results[f"loose, {slow}"]["x_real_time"]
    print(f"  shards / loose at {slow}: {ratio:.1f}x")
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
    parser.add_argument("--shards", action="store_true",
                        help="instead: loose files against tar shards with a delay per open "
                             "(a shared file system): files opened, x real time")
    parser.add_argument("--open-latency-ms", type=positive_float, default=5.0,
                        help="with --shards: the delay of each open")
    parser.add_argument("--shard-utterances", type=positive_int, default=2000,
                        help="with --shards and without --manifest: tone clips to generate")
    parser.add_argument("--shard-mb", type=positive_float, default=16.0,
                        help="with --shards: shard size in MB")
    parser.add_argument("--shard-sources", type=non_negative_int, default=0,
                        help="with --shards and without --manifest: this many one-word clips, "
                             "each utterance a link of its own to one of them (a large "
                             "manifest on a small disk; the shards still copy every one)")
    parser.add_argument("--shards-only", action="store_true",
                        help="with --shards: no loose epochs (at the delay a loose epoch takes "
                             "utterances x delay / workers)")
    parser.add_argument("--folder",
                        help="with --shards: write the corpus and shards here and keep them "
                             "(loose.jsonl, shards/manifest.jsonl), e.g. to time training")
    parser.add_argument("--json", action="store_true")
