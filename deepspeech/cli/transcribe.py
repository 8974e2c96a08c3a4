"""``deepspeech transcribe``: text (and word times with --json) for audio files."""

from __future__ import annotations

import argparse
import json


def _transcribe(args: argparse.Namespace) -> int:
    from deepspeech.recognizer import Recognizer
    from deepspeech.transcribe import transcribe_file

    # Overrides look like decode.key=value; everything else is an audio file.
    overrides = [item for item in args.inputs if item.startswith("decode.") and "=" in item]
    audio = [item for item in args.inputs if item not in overrides]
    recognizer = Recognizer.from_checkpoint(args.checkpoint, overrides, args.device)
    if args.info:
        print(json.dumps(recognizer.describe(), indent=2))
    for path in audio:
        transcript = transcribe_file(recognizer, path, args.window, args.overlap)
        if args.json:
            print(json.dumps(transcript.to_dict(), ensure_ascii=False))
        else:
            print(f"{path}: {transcript.text}" if len(audio) > 1 else transcript.text)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``transcribe``."""
    parser = subparsers.add_parser(
        "transcribe", help="transcribe audio files with a checkpoint",
        description="Transcribe audio files (any format soundfile reads, any sample rate, "
                    "mono or stereo). A checkpoint is all it needs.")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("inputs", nargs="+", metavar="AUDIO|decode.key=value",
                        help="audio files, and decode overrides such as decode.mode=beam")
    parser.add_argument("--json", action="store_true",
                        help="one JSON object per file with per-word start/end times")
    parser.add_argument("--window", type=float, default=20.0,
                        help="seconds per window for long files")
    parser.add_argument("--overlap", type=float, default=2.0,
                        help="seconds of overlap between windows")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--info", action="store_true", help="print what the checkpoint holds")
    parser.set_defaults(handler=_transcribe)
