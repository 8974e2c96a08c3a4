"""``deepspeech bench resample``: what resampling costs by source rate, as a file and as a stream.

For each rate: the path that serves it (``polyphase``: torchaudio's precomputed kernel,
bit for bit what the usual rates always got; ``per-output``: the same filter at each
output's own taps, for pairs whose kernel would be huge; ``/N+per-output``: after an
integer decimation by N, far above the target rate), then the seconds, on one
thread, to resample ``--seconds`` of noise to ``--to`` Hz whole (``resample``: training,
evaluate, transcribe, ``POST /transcribe``) and in 0.1 s chunks (``ChunkResampler``: the
server's WebSocket), and the peak memory each adds (VmHWM, reset before each: Linux).
47,999 Hz once took a minute and 13 GB here; every rate should cost about what 48 kHz does.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from deepspeech.arguments import positive_float, positive_int
from deepspeech.data.audio import decimation, polyphase_fits, resample
from deepspeech.inference.live import ChunkResampler

RATES = (8000, 44100, 48000, 47999, 7999, 8001)
CHUNK_SECONDS = 0.1  # a WebSocket frame from the page's microphone
STATUS = Path("/proc/self/status")


def _kib(field: str) -> int:
    """A ``/proc/self/status`` figure (``VmHWM``: peak RSS) in KiB."""
    for line in STATUS.read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"{STATUS}: no {field} line")


def _measure(work, *args) -> tuple[float, float]:
    """``(seconds, peak MB above the memory in use before)`` of ``work(*args)``."""
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    before = _kib("VmHWM")
    start = time.perf_counter()
    work(*args)
    # The kernel syncs RSS counters lazily: a peak read just after the reset may lag by a page.
    return time.perf_counter() - start, max(0, _kib("VmHWM") - before) / 1024


def _stream(samples: torch.Tensor, rate: int, to_rate: int) -> None:
    resampler = ChunkResampler(rate, to_rate)
    step = max(1, round(CHUNK_SECONDS * rate))
    for start in range(0, samples.numel(), step):
        resampler.accept(samples[start:start + step])
    resampler.accept(torch.zeros(0), final=True)


def _path(rate: int, to_rate: int) -> str:
    if polyphase_fits(rate, to_rate):
        return "polyphase"
    factor = decimation(rate, to_rate)
    return f"/{factor}+per-output" if factor > 1 else "per-output"


def run(args: argparse.Namespace) -> int:
    torch.set_num_threads(1)
    rows, generator = [], torch.Generator()
    for rate in args.rates:
        samples = torch.randn(round(args.seconds * rate), generator=generator.manual_seed(0))
        file_s, file_mb = _measure(resample, samples, rate, args.to)
        stream_s, stream_mb = _measure(_stream, samples, rate, args.to)
        rows.append({"rate": rate, "path": _path(rate, args.to), "file_s": round(file_s, 4),
                     "file_mb": round(file_mb, 1), "stream_s": round(stream_s, 4),
                     "stream_mb": round(stream_mb, 1)})
    if args.json:
        print(json.dumps({"seconds": args.seconds, "to": args.to, "rates": rows}))
        return 0
    print(f"resampling {args.seconds:g} s of noise to {args.to} Hz, 1 thread "
          f"(stream: {CHUNK_SECONDS:g} s chunks)")
    print(f"{'rate':>9} {'path':>16} {'file s':>8} {'file MB':>8} {'stream s':>9} "
          f"{'stream MB':>10}")
    for row in rows:
        print(f"{row['rate']:>9} {row['path']:>16} {row['file_s']:>8.3f} {row['file_mb']:>8.1f} "
              f"{row['stream_s']:>9.3f} {row['stream_mb']:>10.1f}")
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rates", type=positive_int, nargs="+", default=list(RATES),
                        help="source rates in Hz")
    parser.add_argument("--to", type=positive_int, default=16000, help="target rate in Hz")
    parser.add_argument("--seconds", type=positive_float, default=2.0,
                        help="seconds of audio per rate")
    parser.add_argument("--json", action="store_true")
