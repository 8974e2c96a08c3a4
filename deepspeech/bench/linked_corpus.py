"""A manifest of many utterances on little disk: a few one-word tone clips, each utterance a
symbolic link of its own to one of them.

Every line names its own file, as in a real corpus, so a loader opens one file per
utterance and ``deepspeech data shard`` copies every utterance's bytes into the shards; only
the loose side shares its audio. 280,000 lines (the utterance count of a 1,000-hour corpus)
take about 50 MB of links and manifest; their shards 2.3 GB (0.3 s clips, 6.6 kB each).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import soundfile as sf

from deepspeech.data.synth.tones import RATE, WORDS, manifest_line, spoken


def write_linked_corpus(folder: Path, utterances: int, sources: int, seed: int = 0) -> Path:
    """``sources`` one-word clips in ``folder/sources``, ``utterances`` links to them in
    turn in ``folder/links``, and their manifest ``folder/linked.jsonl``; its path."""
    rng = np.random.default_rng(seed)
    (folder / "sources").mkdir(parents=True, exist_ok=True)
    (folder / "links").mkdir(exist_ok=True)
    clips = []
    for number in range(sources):
        word = WORDS[number % len(WORDS)]
        audio = spoken([word], rng)
        path = (folder / "sources" / f"s{number:04d}.flac").resolve()
        sf.write(path, audio, RATE)
        clips.append((path, word, len(audio) / RATE))
    lines = []
    for number in range(utterances):
        source, word, duration = clips[number % sources]
        link = folder / "links" / f"u{number:07d}.flac"
        if not link.is_symlink():
            os.symlink(source, link)
        lines.append(manifest_line(link.relative_to(folder), word, duration))
    manifest = folder / "linked.jsonl"
    manifest.write_text("\n".join(lines) + "\n")
    return manifest
