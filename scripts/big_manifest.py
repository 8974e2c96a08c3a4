"""A large manifest for pre-flight benchmarks: N lines over 20 short FLAC files, each line
through its own symlink, so that every line has its own path as in a real corpus.

    python scripts/big_manifest.py 280000 /tmp/bench/d280k    # writes .../big.jsonl
    python scripts/big_manifest.py 280000 /tmp/bench/d280k --broken 0.001   # .../broken.jsonl

``--broken F`` writes ``broken.jsonl`` instead, where every 1/F-th line's audio is broken,
in turn: missing, empty, not audio, a FLAC cut off halfway; each such line its own file.
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
    parser.add_argument("--broken", type=float, default=0.0,
                        help="the fraction of lines whose audio is broken")
    args = parser.parse_args()
    sources, links = args.output / "src", args.output / "links"
    sources.mkdir(parents=True, exist_ok=True)
    links.mkdir(exist_ok=True)
    rng = np.random.default_rng(0)
    lengths = [RATE + 800 * i for i in range(SOURCES)]  # 1.0 to 1.95 s
    for i, length in enumerate(lengths):
        sf.write(sources / f"s{i}.flac", (0.1 * rng.standard_normal(length)).astype("float32"),
                 RATE)
    every = round(1 / args.broken) if args.broken else 0
    name = "broken.jsonl" if every else "big.jsonl"
    broken = args.output / "broken"
    broken.mkdir(exist_ok=True)
    with open(args.output / name, "w", encoding="utf-8") as manifest:
        for k in range(args.lines):
            link = links / f"u{k:07d}.flac"
            if not link.is_symlink():
                link.symlink_to(sources / f"s{k % SOURCES}.flac")
            audio = str(link)
            if every and k % every == every // 2:
                audio = break_file(broken / f"b{k:07d}.flac", k // every, sources / "s0.flac")
            manifest.write(json.dumps({"audio_filepath": audio, "text": "hello world",
                                       "duration": lengths[k % SOURCES] / RATE}) + "\n")
    print(f"{args.output / name}: {args.lines} lines")


def break_file(path: Path, kind: int, good: Path) -> str:
    """A broken file at ``path`` (missing, empty, text, cut-off FLAC, by ``kind % 4``)."""
    path.unlink(missing_ok=True)
    if kind % 4 == 1:
        path.write_bytes(b"")
    elif kind % 4 == 2:
        path.write_text("not audio at all\n")
    elif kind % 4 == 3:
        content = good.read_bytes()
        path.write_bytes(content[:len(content) // 2])
    return str(path)


if __name__ == "__main__":
    main()
