"""``deepspeech bench package``: a model package against its checkpoint: size on disk and
the time to load each.

Loading is what every ``--checkpoint`` command does first (``Recognizer.from_checkpoint``);
for a package that includes checking every file's SHA-256. Loads alternate, after one
warm-up each, and the median is printed.

    deepspeech bench package runs/an4/best.pt models/an4 --repeats 7
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from deepspeech.arguments import positive_int
from deepspeech.inference.recognizer import Recognizer


def size_of(path: Path) -> int:
    """Bytes of a file, or of every file in a folder."""
    return path.stat().st_size if path.is_file() else sum(
        item.stat().st_size for item in path.rglob("*") if item.is_file())


def load_seconds(path: Path) -> float:
    """Seconds to load ``path`` as every ``--checkpoint`` command does."""
    start = time.perf_counter()
    Recognizer.from_checkpoint(path, device="cpu")
    return time.perf_counter() - start


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``deepspeech bench package``."""
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("package", type=Path)
    parser.add_argument("--repeats", type=positive_int, default=7)


def run(args: argparse.Namespace) -> int:
    """Print each one's size and median load time, and the ratio of the sizes."""
    torch.set_num_threads(1)
    paths = (args.checkpoint, args.package)
    times: dict[Path, list[float]] = {path: [] for path in paths}
    for path in paths:
        load_seconds(path)  # warm-up: imports, the OS's file cache
    for _ in range(args.repeats):
        for path in paths:
            times[path].append(load_seconds(path))
    ratio = size_of(args.package) / size_of(args.checkpoint)
    for path in paths:
        print(f"{path}: {size_of(path):,} bytes, load median "
              f"{1000 * statistics.median(times[path]):.1f} ms")
    print(f"package / checkpoint size: {ratio:.3f}")
    return 0
