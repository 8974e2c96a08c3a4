"""WER/CER of a checkpoint on one manifest re-recorded under other conditions.

Every utterance is rewritten as 16-bit WAV at 8 kHz (telephone), 22.05, 44.1 and
48 kHz, as stereo, 30 dB quieter, 20 dB louder with clipping, and with its leading and
trailing silence cut off (as a voice-activity detector hands speech over); each variant
is scored with ``deepspeech evaluate``. The model resamples and mixes down on load.

    python scripts/robust_input.py --checkpoint runs/an4/best.pt --manifest data/an4/dev.jsonl
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from deepspeech.cli import main
from deepspeech.data.audio import load_audio
from deepspeech.data.augment import trim_silence
from deepspeech.data.manifest import read_manifest

# name: (sample rate or None for the file's own, channels, gain in dB, silence trimmed)
CONDITIONS = {
    "as recorded": (None, 1, 0.0, False),
    "8 kHz": (8000, 1, 0.0, False),
    "22.05 kHz": (22050, 1, 0.0, False),
    "44.1 kHz": (44100, 1, 0.0, False),
    "48 kHz": (48000, 1, 0.0, False),
    "stereo": (None, 2, 0.0, False),
    "-30 dB": (None, 1, -30.0, False),
    "+20 dB, clipped": (None, 1, 20.0, False),
    "silence trimmed": (None, 1, 0.0, True),
}


def write_variant(manifest: str, folder: Path, rate: int | None, channels: int,
                  gain_db: float, trimmed: bool) -> Path:
    """Copies of every utterance under one condition, with their manifest."""
    folder.mkdir(parents=True)
    lines = []
    for index, utterance in enumerate(read_manifest(manifest)):
        native = sf.info(utterance.audio_filepath).samplerate
        target = rate or native
        audio = load_audio(utterance.audio_filepath, target)
        if trimmed:
            audio = trim_silence(audio, target)
        audio = np.clip(audio.numpy() * 10 ** (gain_db / 20), -1.0, 1.0)
        if channels == 2:
            audio = np.stack([audio, audio], axis=1)
        path = folder / f"{index:05d}.wav"
        sf.write(path, audio, target, subtype="PCM_16")
        lines.append(json.dumps({"audio_filepath": path.name, "text": utterance.text,
                                 "duration": len(audio) / target}))
    variant = folder / "manifest.jsonl"
    variant.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return variant


def score(checkpoint: str, manifest: Path) -> dict:
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        main(["evaluate", "--checkpoint", checkpoint, "--manifest", str(manifest), "--json"])
    return json.loads(output.getvalue().strip().splitlines()[-1])


def run() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--manifest", required=True)
    args = parser.parse_args()
    torch.set_num_threads(2)
    print("| condition | WER | CER |\n|---|---:|---:|")
    with tempfile.TemporaryDirectory() as scratch:
        for number, (name, condition) in enumerate(CONDITIONS.items()):
            variant = write_variant(args.manifest, Path(scratch) / str(number), *condition)
            result = score(args.checkpoint, variant)
            print(f"| {name} | {100 * result['wer']:.2f}% | {100 * result['cer']:.2f}% |",
                  flush=True)


if __name__ == "__main__":
    run()
