"""``deepspeech transcribe``: text (and word times and confidences with --json) for audio
files."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable

from deepspeech.arguments import non_negative_float, positive_float

OVERRIDE = re.compile(r"^[a-z_]+(\.[a-z_0-9]+)+=")


def _transcribe(args: argparse.Namespace) -> int:
    from deepspeech.errors import ConfigError
    from deepspeech.inference.recognizer import Recognizer
    from deepspeech.inference.transcribe import transcribe_file

    if not args.stream and args.overlap >= args.window:  # streaming cuts no windows
        raise ConfigError(f"--overlap ({args.overlap:g} s) must be shorter than --window "
                          f"({args.window:g} s)")
    # Overrides look like section.key=value (only decode.* may change; the recognizer says
    # so for the others); everything else is an audio file.
    overrides = [item for item in args.inputs
                 if OVERRIDE.match(item) and not os.path.exists(item)]
    audio = _audio_files([item for item in args.inputs if item not in overrides])
    recognizer = Recognizer.from_checkpoint(args.checkpoint, overrides, args.device,
                                            args.decode_config)
    if args.info:
        print(json.dumps(recognizer.describe(), indent=2, allow_nan=False))
    elif not audio:
        raise SystemExit("deepspeech transcribe: give audio files to transcribe (or --info)")
    if args.stream:
        return _each_file(audio, args.json, lambda path: _stream(recognizer, path, audio, args))

    def transcribe(path: str) -> None:
        transcript = transcribe_file(recognizer, path, args.window, args.overlap)
        if args.json:
            print(json.dumps(transcript.to_dict(), ensure_ascii=False, allow_nan=False))
        else:
            print(f"{path}: {transcript.text}" if len(audio) > 1 else transcript.text)

    return _each_file(audio, args.json, transcribe)


def _audio_files(inputs: list[str]) -> list[tuple[str, str | None]]:
    """The files named, a folder standing for the audio files anywhere under it in sorted
    order (a recorder's folder, a test set's tree); each as ``(path, None)``, or a folder
    that gives none as ``(folder, why)``, so that it is reported in its turn and the
    other arguments are still transcribed."""
    from deepspeech.data.audio import AUDIO_SUFFIXES
    from deepspeech.files import files_under

    files: list[tuple[str, str | None]] = []
    for item in inputs:
        if not os.path.isdir(item):
            files.append((item, None))
            continue
        try:
            found = sorted(str(path) for path in files_under(item)
                           if path.suffix.lower() in AUDIO_SUFFIXES)
        except OSError as exc:
            files.append((item, f"{exc.filename or item}: folder not readable "
                                f"({exc.strerror or exc})"))
            continue
        if not found:
            files.append((item, f"{item}: a folder without audio files (names ending in "
                                f"{', '.join(AUDIO_SUFFIXES)})"))
        files.extend((path, None) for path in found)
    return files


def _each_file(audio: list[tuple[str, str | None]], as_json: bool,
               work: Callable[[str], None]) -> int:
    """Run ``work`` on every file: one that cannot be read, or an argument that gives no
    file, is reported (on stdout too with --json, so that results and files stay aligned)
    and the rest are still transcribed."""
    from deepspeech.errors import AudioError, own_message

    failed = 0
    for path, problem in audio:
        try:
            if problem:
                raise AudioError(problem)
            work(path)
        except AudioError as exc:
            failed += 1
            message = own_message(exc)
            if as_json:
                print(json.dumps({"audio_filepath": path, "error": message}, ensure_ascii=False))
            print(f"deepspeech transcribe: error: {message}", file=sys.stderr, flush=True)
    if failed and len(audio) > 1:
        print(f"deepspeech transcribe: {failed} of {len(audio)} files could not be transcribed",
              file=sys.stderr)
    return 2 if failed else 0


def _stream(recognizer, path: str, audio: list[str], args: argparse.Namespace) -> None:
    """--stream: feed the file in chunks; print the partial text as it grows."""
    from deepspeech.inference.streaming import stream_file

    overwrite = sys.stdout.isatty()
    prefix = f"{path}: " if len(audio) > 1 else ""
    shown = [None]

    def show(chunk) -> None:
        if args.json:
            if not chunk.final:
                print(json.dumps({"audio_filepath": path, "chunk": chunk.index,
                                  "audio_s": round(chunk.audio_seconds, 3),
                                  "final_s": round(chunk.final_seconds, 3),
                                  "text": chunk.text, "final": False,
                                  "compute_ms": round(chunk.compute_ms, 3)},
                                 ensure_ascii=False, allow_nan=False), flush=True)
        elif overwrite:  # one line, rewritten in place
            end = "\n" if chunk.final else ""
            print(f"\r\033[K{prefix}{chunk.text}", end=end, flush=True)
        elif chunk.text != shown[0] or chunk.final:  # a line per change, the final last
            print(f"{prefix}{chunk.text}", flush=True)
            shown[0] = chunk.text

    result = stream_file(recognizer, path, args.chunk_ms, show)
    latency = result.latency()
    if args.json:
        print(json.dumps({**result.transcript.to_dict(), "final": True, "latency": latency},
                         ensure_ascii=False, allow_nan=False))
    print(f"{path}: {latency['chunks']} chunks of {args.chunk_ms:g} ms, compute "
          f"{latency['compute_ms_mean']:.1f} ms mean, {latency['compute_ms_p95']:.1f} ms "
          f"p95; algorithmic latency {latency['algorithmic_latency_ms']:.0f} ms; "
          f"real-time factor {latency['real_time_factor']:.3f}", file=sys.stderr)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``transcribe``."""
    parser = subparsers.add_parser(
        "transcribe", help="transcribe audio files with a checkpoint",
        description="Transcribe audio files (any format soundfile reads, any sample rate, "
                    "mono or stereo), or every audio file under a folder. A checkpoint is "
                    "all it needs.")
    parser.add_argument("--checkpoint", required=True,
                        help="checkpoint (best.pt, last.pt) or package folder")
    parser.add_argument("inputs", nargs="*", metavar="AUDIO|decode.key=value",
                        help="audio files or folders of them, and decode overrides such as "
                             "decode.mode=beam")
    parser.add_argument("--json", action="store_true",
                        help="one JSON object per file with per-word start/end times and "
                             "confidences (0-1), and the file's confidence")
    parser.add_argument("--window", type=positive_float, default=20.0,
                        help="seconds per window for long files")
    parser.add_argument("--overlap", type=non_negative_float, default=2.0,
                        help="seconds of overlap between windows")
    parser.add_argument("--stream", action="store_true",
                        help="feed the audio in chunks as if live and print partial text "
                             "(unidirectional models, features.normalize global or none)")
    parser.add_argument("--chunk-ms", type=positive_float, default=200.0,
                        help="audio per chunk with --stream (default: 200 ms); small chunks "
                             "run fastest with OMP_NUM_THREADS=1")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--info", action="store_true", help="print what the checkpoint holds")
    parser.add_argument("--decode-config", metavar="YAML",
                        help="decode settings from a file's decode section, such as the one "
                             "deepspeech decode tune -o writes; decode.key=value go on top")
    parser.set_defaults(handler=_transcribe)
