"""A large manifest for pre-flight benchmarks: N lines over 20 short FLAC files, each line
through its own symlink, so that every line has its own path as in a real corpus.

    python scripts/big_manifest.py 280000 /tmp/bench/d280k    # writes .../big.jsonl
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import soundfile as sf

RATE = 16000
SOURCES = 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lines", type=int)
    parser.add_argument("output", type=Path)
    args = parser.parse_args()
    sources, links = args.output / "src", args.output / "links"
    sources.mkdir(parents=True, exist_ok=True)
    links.mkdir(exist_ok=True)
    rng = np.random.default_rng(0)
    lengths = [RATE + 800 * i for i in range(SOURCES)]  # 1.0 to 1.95 s
    for i, length in enumerate(lengths):
        sf.write(sources / f"s{i}.flac", (0.1 * rng.standard_normal(length)).astype("float32"),
                 RATE)
    with open(args.output / "big.jsonl", "w", encoding="utf-8") as manifest:
        for k in range(args.lines):
            link = links / f"u{k:07d}.flac"
            if not link.is_symlink():
                link.symlink_to(sources / f"s{k % SOURCES}.flac")
            manifest.write(json.dumps({"audio_filepath": str(link), "text": "hello world",
                                       "duration": lengths[k % SOURCES] / RATE}) + "\n")
    print(f"{args.output / 'big.jsonl'}: {args.lines} lines")


if __name__ == "__main__":
    main()
