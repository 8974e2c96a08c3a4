"""``deepspeech bench data``: how fast audio becomes features, in x real time per core.

Measures, on one thread, load (soundfile decode), load + resample, and load +
resample + spectrogram, over a manifest or over files it writes itself at common
rates (8, 16, 44.1 kHz; FLAC and WAV). Then the whole DataLoader path with
workers, which is what training waits on. The target is 200x real time per core.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from deepspeech.arguments import non_negative_int, positive_float, positive_int
from deepspeech.config import FeaturesConfig
from deepspeech.data.audio import load_audio
from deepspeech.data.dataset import SpeechDataset, collate
from deepspeech.data.manifest import Utterance, read_manifest
from deepspeech.features import FeatureExtractor

RATES = (8000, 16000, 44100)


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
        dataset = SpeechDataset(utterances, [[1]] * len(utterances), extractor)
        batches = [list(range(i, min(i + 16, len(utterances))))
                   for i in range(0, len(utterances), 16)]
        loader = torch.utils.data.DataLoader(dataset, batch_sampler=batches,
                                             num_workers=args.workers, collate_fn=collate)
        start = time.perf_counter()
        for _ in loader:
            pass
        results[f"dataloader ({args.workers} workers)"] = \
            audio_seconds / (time.perf_counter() - start)
    if args.json:
        print(json.dumps({"source": source, "audio_seconds": audio_seconds,
                          "features": args.features,
                          "x_real_time": {k: round(v, 1) for k, v in results.items()}}))
        return 0
    print(f"data pipeline on {source}: {audio_seconds:.0f} s of audio, "
          f"{args.features} features at {args.sample_rate} Hz")
    for name, value in results.items():
        per_core = "" if name.startswith("dataloader") else "  (1 thread)"
        print(f"  {name:32s} {value:9.0f} x real time{per_core}")
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--manifest", help="measure on this manifest instead of generated files")
    parser.add_argument("--seconds", type=positive_float, default=600.0,
                        help="seconds of generated audio (without --manifest)")
    parser.add_argument("--limit", type=non_negative_int, default=0,
                        help="with --manifest: at most this many utterances, evenly spread")
    parser.add_argument("--sample-rate", type=positive_int, default=16000)
    parser.add_argument("--features", choices=["linear", "mel"], default="linear")
    parser.add_argument("--workers", type=non_negative_int, default=2)
    parser.add_argument("--json", action="store_true")
