"""``deepspeech bench batching``: batches of a fixed count against batches sized by audio
(``train.batch_seconds``): per epoch, steps, padding waste and seconds of audio per global
batch, from the durations alone.

    deepspeech bench batching /tmp/an4data/train.jsonl --batch-size 16

Each manifest given, and a synthetic one (``--synthetic`` utterances of 1-30 s, log-uniform
with a fixed seed: many short, few long), is planned by the training sampler twice: batches
of ``--batch-size`` utterances, and batches of up to ``batch_seconds`` of audio (at most
``--cap`` times as many utterances), where ``batch_seconds`` is chosen so that the first
shuffled epoch has as many steps, i.e. the same mean utterances per batch. Epoch 1 is
SortaGrad's (sorted); the later ones are shuffled. Padding waste is the share of the padded
batches' frames (10 ms) that are padding, for one process (a global batch is one padded
tensor); no audio is read. ``plan ms`` is the time to compute the epoch's plan, which
every rank does at the start of each epoch (and, for batches sized by audio, once for each
epoch at the start of a run, to count its steps).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path

from deepspeech.arguments import non_negative_int, positive_int
from deepspeech.config import TrainConfig
from deepspeech.data.sampler import BucketBatchSampler, build_sampler

HOP_SECONDS = 0.01


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``deepspeech bench batching``."""
    parser.add_argument("manifests", nargs="*", type=Path)
    parser.add_argument("--batch-size", type=positive_int, default=16)
    parser.add_argument("--cap", type=positive_int, default=8,
                        help="batch_size under batch_seconds, as a multiple of --batch-size")
    parser.add_argument("--epochs", type=positive_int, default=3)
    parser.add_argument("--synthetic", type=non_negative_int, default=20000,
                        help="utterances of the synthetic manifest (0: none)")
    parser.add_argument("--seed", type=int, default=0)


def run(args: argparse.Namespace) -> int:
    """Print both plans' figures for each manifest and the synthetic one."""
    sets = [(str(path), read_durations(path)) for path in args.manifests]
    if args.synthetic:
        sets.append((f"synthetic, {args.synthetic} utterances of 1-30 s",
                     synthetic_durations(args.synthetic, args.seed)))
    for name, durations in sets:
        compare(name, durations, args)
    return 0


def read_durations(manifest: Path) -> list[float]:
    """The ``duration`` of every line of a JSON Lines manifest."""
    with manifest.open(encoding="utf-8") as lines:
        return [float(json.loads(line)["duration"]) for line in lines if line.strip()]


def synthetic_durations(count: int, seed: int) -> list[float]:
    """Log-uniform durations in [1, 30] s: a corpus of mostly short and some long turns."""
    rng = random.Random(seed)
    return [math.exp(rng.uniform(0.0, math.log(30.0))) for _ in range(count)]


def compare(name: str, durations: list[float], args: argparse.Namespace) -> None:
    """Print the fixed-count plan and the by-audio plan of the same mean batch, per epoch."""
    fixed = build_sampler(TrainConfig(batch_size=args.batch_size, seed=args.seed), durations)
    seconds = matching_batch_seconds(durations, fixed.steps_per_epoch(), args)
    by_audio = build_sampler(TrainConfig(batch_size=args.batch_size * args.cap,
                                         batch_seconds=seconds, seed=args.seed), durations)
    print(f"\n{name}: {len(durations)} utterances, {sum(durations) / 3600:.2f} h, "
          f"{min(durations):.2f}-{max(durations):.2f} s")
    print(f"{'plan':34} {'epoch':>5} {'steps':>6} {'utt/batch':>9} {'padding':>8} "
          f"{'s/batch mean':>12} {'max':>7} {'plan ms':>8}")
    for label, sampler in ((f"batch_size={args.batch_size}", fixed),
                           (f"batch_seconds={seconds:.1f} (cap {args.batch_size * args.cap})",
                            by_audio)):
        for epoch in range(args.epochs):
            print(f"{label:34} {epoch + 1:>5} {plan_figures(sampler, epoch, durations)}")


def matching_batch_seconds(durations: list[float], steps: int,
                           args: argparse.Namespace) -> float:
    """The smallest ``batch_seconds`` (to 0.1 s) whose first shuffled epoch takes at most
    ``steps`` steps: the fixed plan's mean utterances per batch."""
    def steps_at(limit: float) -> int:
        config = TrainConfig(batch_size=args.batch_size * args.cap, batch_seconds=limit,
                             seed=args.seed)
        return build_sampler(config, durations).steps_per_epoch(1)

    low, high = max(durations) / 10, sum(durations)
    while high - low > 0.1:
        middle = (low + high) / 2
        low, high = (low, middle) if steps_at(middle) <= steps else (middle, high)
    return high


def plan_figures(sampler: BucketBatchSampler, epoch: int, durations: list[float]) -> str:
    """One epoch's steps, mean utterances, padding waste, mean/max seconds per batch and the
    milliseconds its plan took."""
    start = time.perf_counter()
    batches = sampler.global_batches(epoch)
    milliseconds = 1000 * (time.perf_counter() - start)
    frames = [[round(durations[i] / HOP_SECONDS) for i in batch] for batch in batches]
    padded = sum(len(f) * max(f) for f in frames)
    waste = 1 - sum(sum(f) for f in frames) / padded
    audio = [sum(durations[i] for i in batch) for batch in batches]
    return (f"{len(batches):>6} {len(durations) / len(batches):>9.1f} {100 * waste:>7.1f}% "
            f"{sum(audio) / len(audio):>12.1f} {max(audio):>7.1f} {milliseconds:>8.0f}")
