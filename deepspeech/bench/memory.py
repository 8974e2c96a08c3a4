"""``deepspeech bench memory``: memory per utterance: the trainer's peak RSS by corpus size,
and what a forked loader worker copies of the corpus (docs/BENCHMARKS.md, "Memory per
utterance").

    deepspeech bench memory train --sizes 10000,100000,280000,1000000 --folder /tmp/mem
    deepspeech bench memory workers --utterances 280000

``train``: for each size, a manifest in scripts/big_manifest.py's layout (one symlink per
line) and `deepspeech train -c configs/quickstart.yaml ... train.max_steps=1`, run cold
(empty probe cache) and warm; the figure is the trainer's peak RSS (``ru_maxrss``), and
the growth per utterance between consecutive sizes. It needs a source checkout: the
manifest script and the config are the repository's.

``workers``: a corpus of LibriSpeech-like rows (a 60-character path, a 180-character
transcript) held as columns (``deepspeech.data.table``) and, for comparison, as one
object per row (as before); two forked processes read every row, as loader workers do
over an epoch, and report how much of the parent's memory they had to copy (the growth
of their private pages, ``/proc/self/smaps_rollup``).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from deepspeech.arguments import positive_int
from deepspeech.data.manifest import Utterance
from deepspeech.data.table import LabelTable, UtteranceTable
from deepspeech.errors import DeepSpeechError

ROOT = Path(__file__).resolve().parents[2]
BIG_MANIFEST = ROOT / "scripts" / "big_manifest.py"
CONFIG = "configs/quickstart.yaml"
KIB = 1024


def private_bytes() -> int:
    """This process's private pages (copied on write, or its own), in bytes."""
    fields = Path("/proc/self/smaps_rollup").read_text().splitlines()
    return sum(int(line.split()[1]) * KIB for line in fields
               if line.startswith(("Private_Clean:", "Private_Dirty:")))


PEAK_OF_CHILD = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, "
                 "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
                 "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
"""Runs a command and prints its peak RSS (KiB): a fresh process, so no earlier run's."""


def train_peak(manifest: Path, output: Path, cache: Path) -> tuple[float, int]:
    """Seconds and peak RSS (bytes) of one `deepspeech train` to the end of step one."""
    command = [sys.executable, "-m", "deepspeech", "train", "-c", CONFIG,
               f"data.train_manifest={manifest}", "data.val_manifest=", "train.max_steps=1",
               f"train.output_dir={output}", "--overwrite"]
    start = time.perf_counter()
    peak = subprocess.run([sys.executable, "-c", PEAK_OF_CHILD, *command], cwd=ROOT, check=True,
                          capture_output=True, text=True,
                          env={**os.environ, "DEEPSPEECH_CACHE_DIR": str(cache)}).stdout
    return time.perf_counter() - start, int(peak) * KIB


def bench_train(sizes: list[int], folder: Path) -> None:
    """Print the trainer's peak RSS, cold and warm, for each corpus size."""
    for needed in (BIG_MANIFEST, ROOT / CONFIG):
        if not needed.is_file():
            raise DeepSpeechError(f"bench memory train needs a source checkout: {needed} "
                                  "is missing")
    print(f"{'utterances':>10} {'run':>5} {'seconds':>8} {'peak RSS':>10} {'per utterance':>14}")
    previous: tuple[int, int] | None = None
    for size in sizes:
        data = folder / f"d{size}"
        if not (data / "big.jsonl").exists():
            subprocess.run([sys.executable, str(BIG_MANIFEST), str(size), str(data)],
                           check=True, stdout=subprocess.DEVNULL)
        cache = folder / f"cache{size}"
        shutil.rmtree(cache, ignore_errors=True)
        for run in ("cold", "warm"):
            seconds, peak = train_peak(data / "big.jsonl", folder / f"out{size}", cache)
            growth = ""
            if run == "warm" and previous is not None:
                growth = f"{(peak - previous[1]) / (size - previous[0]):,.0f} B"
            print(f"{size:>10,} {run:>5} {seconds:>8.1f} {peak / 2**20:>7,.0f} MiB {growth:>14}",
                  flush=True)
        previous = (size, peak)


def touch_rows(rows: tuple, share: int, ways: int) -> int:
    """Read every ``ways``-th row as a loader worker does; the bytes this copied."""
    utterances, labels = rows
    before = private_bytes()
    for index in range(share, len(utterances), ways):
        utterance = utterances[index]  # what SpeechDataset reads of a row
        len(utterance.audio_filepath), utterance.duration, utterance.offset, labels[index]
    return private_bytes() - before


CORPUS: tuple = ()
"""The corpus the forked workers read: a module global, so that fork shares it unpickled."""


def _touch(share: int) -> int:
    return touch_rows(CORPUS, share, 2)


def bench_workers(count: int) -> None:
    """Print what two forked workers copy of a corpus held as objects and as columns."""
    global CORPUS

    def rows():
        for i in range(count):
            yield Utterance(f"/data/LibriSpeech/train-clean-360/{i % 921}/{i % 97}/"
                            f"{i:07d}-{i % 97:04d}.flac", ("word " * 36)[:180], 12.0 + i % 5,
                            speaker=str(i % 921))

    label = [1 + j % 27 for j in range(180)]
    layouts = {"objects (before)": lambda: (list(rows()), [list(label) for _ in range(count)]),
               "columns": lambda: (UtteranceTable.of(rows()), LabelTable.of([label] * count))}
    print(f"{count:,} utterances; two forked workers each read every other row")
    for name, build in layouts.items():
        start = private_bytes()
        CORPUS = build()
        held = private_bytes() - start
        with multiprocessing.get_context("fork").Pool(2) as pool:
            copied = pool.map(_touch, [0, 1])
        print(f"  {name:17s} corpus {held / count:6,.0f} B per utterance; copied by the "
              f"workers: {copied[0] / count:6,.0f} + {copied[1] / count:6,.0f} B per utterance",
              flush=True)
        CORPUS = ()


def _sizes(text: str) -> list[int]:
    try:
        return [positive_int(size) for size in text.split(",")]
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"must be positive integers separated by commas, got {text!r}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``deepspeech bench memory``: a sub-command for each measurement."""
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="the trainer's peak RSS by corpus size")
    train.add_argument("--sizes", type=_sizes, default="10000,100000,280000,1000000")
    train.add_argument("--folder", type=Path, default=Path("/tmp/bench_memory"))
    workers = commands.add_parser("workers", help="what forked loader workers copy")
    workers.add_argument("--utterances", type=positive_int, default=280_000)


def run(args: argparse.Namespace) -> int:
    """Run the chosen measurement."""
    if args.command == "train":
        bench_train(args.sizes, args.folder.resolve())
    else:
        bench_workers(args.utterances)
    return 0
