"""``python -m deepspeech.data.synth.worker REQUESTS.json OUTPUT``: speak one batch of utterances.

espeak-ng keeps state between utterances in static variables that no API
resets (the pitch-flutter phase, the gain control, the glottal cycle count),
and Piper's noise generator runs on from one utterance to the next, so an
utterance's samples depend on what the process spoke before. Each batch
therefore runs in a fresh process (``batches.py`` starts them): the output is
then a function of the batch alone.

REQUESTS is a JSON list of ``[engine, text, voice, params]``. OUTPUT gets a JSON
list of ``[sample count, sample rate]`` on its first line, then the int16
samples (native byte order) back to back. The worker imports neither numpy nor
torch unless an engine needs them, so an espeak-ng batch starts in a fraction of
a second.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from deepspeech.data.synth import engines
from deepspeech.data.synth.espeak import SynthesisError

if TYPE_CHECKING:
    import numpy as np


def speak_batch(requests: list[list]) -> list[tuple[bytes, int]]:
    """Speak ``[engine, text, voice, params]`` requests in order: (int16 bytes, rate) each."""
    return [engines.get(engine).speak(text, voice, params)
            for engine, text, voice, params in requests]


def main(argv: list[str] | None = None) -> int:
    """Read REQUESTS, speak them, write OUTPUT (see the module's docstring)."""
    requests_path, output_path = argv if argv is not None else sys.argv[1:]
    with open(requests_path, encoding="utf-8") as handle:
        spoken = speak_batch(json.load(handle))
    with open(output_path, "wb") as handle:
        handle.write(json.dumps([[len(pcm) // 2, rate] for pcm, rate in spoken]).encode() + b"\n")
        handle.writelines(pcm for pcm, _ in spoken)
    return 0


def read_batch(path: str | Path) -> list[tuple[np.ndarray, int]]:
    """The int16 sample arrays and their sample rates in a file written by :func:`main`."""
    import numpy as np

    data = Path(path).read_bytes()
    header, _, body = data.partition(b"\n")
    samples = np.frombuffer(body, dtype=np.int16)
    arrays, start = [], 0
    for count, rate in json.loads(header):
        arrays.append((samples[start : start + count], rate))
        start += count
    if start != len(samples):
        raise SynthesisError(f"{path}: truncated synthesis batch")
    return arrays


if __name__ == "__main__":
    raise SystemExit(main())
