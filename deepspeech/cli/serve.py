"""``deepspeech serve``: a checkpoint or model package behind HTTP, a WebSocket and a page."""

from __future__ import annotations

import argparse
import os

from deepspeech.arguments import finite_float, positive_float, positive_int
from deepspeech.cli.transcribe import OVERRIDE


def _serve(args: argparse.Namespace) -> int:
    import torch

    from deepspeech.errors import ConfigError
    from deepspeech.inference.limits import LiveSettings, ServeLimits
    from deepspeech.inference.recognizer import Recognizer
    from deepspeech.inference.server import create_app, serve

    wrong = [item for item in args.overrides if not OVERRIDE.match(item)]
    if wrong:
        raise ConfigError(f"{wrong[0]!r}: serve takes decode.key=value overrides only")
    if not 1 <= args.port <= 65535:
        raise ConfigError(f"--port {args.port}: must be from 1 to 65535")
    # The model's threads share the cores: each of `workers` threads computes with
    # cores / workers intra-op threads, so concurrent requests do not oversubscribe them.
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    workers = args.workers or max(1, min(4, cores or 1))
    threads = args.threads or max(1, (cores or 1) // workers)
    torch.set_num_threads(threads)  # loading; the workers set theirs (per thread)
    recognizer = Recognizer.from_checkpoint(args.checkpoint, args.overrides, args.device,
                                            args.decode_config)
    limits = ServeLimits(max_request_mb=args.max_request_mb,
                         max_audio_seconds=args.max_audio_seconds, max_queue=args.max_queue,
                         max_uploads_per_client=args.max_uploads_per_client,
                         body_timeout_s=args.body_timeout_s, max_streams=args.max_streams,
                         max_streams_per_client=args.max_streams_per_client,
                         stream_idle_s=args.stream_idle_s,
                         max_stream_seconds=args.max_stream_seconds,
                         max_frame_kb=args.max_frame_kb)
    live = LiveSettings(every_s=args.partial_every, window_s=args.window)
    serve(create_app(recognizer, limits, workers, threads, args.low_confidence, live),
          args.host, args.port)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``serve``."""
    from deepspeech.inference.limits import LiveSettings, ServeLimits

    defaults, live = ServeLimits(), LiveSettings()
    parser = subparsers.add_parser(
        "serve", help="serve a model over HTTP and WebSocket, with a page to try it",
        description="Serve a checkpoint or model package: GET / (a page: microphone or file), "
                    "GET /health, POST /transcribe (multipart field 'audio'), WebSocket "
                    "/stream?rate=R (16-bit little-endian mono PCM; text frame "
                    '{"type": "end"} to finish). Listens on 127.0.0.1 unless --host says '
                    "otherwise.")
    parser.add_argument("--checkpoint", required=True,
                        help="checkpoint (best.pt, last.pt) or package folder")
    parser.add_argument("overrides", nargs="*", metavar="decode.key=value",
                        help="decode overrides such as decode.mode=beam")
    parser.add_argument("--decode-config", metavar="YAML",
                        help="decode settings from a file's decode section (decode tune -o)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default: loopback only; another address "
                             "is reachable from other machines and is logged with a warning)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--workers", type=positive_int, default=None,
                        help="model threads (default: the cores, at most 4)")
    parser.add_argument("--threads", type=positive_int, default=None,
                        help="torch intra-op threads (default: cores / workers)")
    parser.add_argument("--low-confidence", type=finite_float, default=0.5,
                        help="the page marks words below this confidence (default: 0.5)")
    parser.add_argument("--partial-every", type=positive_float, default=live.every_s,
                        help="bidirectional models: seconds of audio between partials "
                             f"(default: {live.every_s:g})")
    parser.add_argument("--window", type=positive_float, default=live.window_s,
                        help="bidirectional models: at most this many seconds of the latest "
                             f"audio are decoded again for each partial (default: "
                             f"{live.window_s:g})")
    limits = parser.add_argument_group("limits (each refusal names its flag)")
    limits.add_argument("--max-request-mb", type=positive_float,
                        default=defaults.max_request_mb, help="POST body size (413)")
    limits.add_argument("--max-audio-seconds", type=positive_float,
                        default=defaults.max_audio_seconds,
                        help="length of a POSTed file (413)")
    limits.add_argument("--max-queue", type=positive_int, default=defaults.max_queue,
                        help="POSTs in progress or waiting (429); the bodies still arriving "
                             "hold at most as many bytes as this many full ones")
    limits.add_argument("--max-uploads-per-client", type=positive_int,
                        default=defaults.max_uploads_per_client,
                        help="POSTs in progress from one client address (429)")
    limits.add_argument("--body-timeout-s", type=positive_float,
                        default=defaults.body_timeout_s,
                        help="seconds for a POST body to arrive; it waits for the model only "
                             "once arrived (408)")
    limits.add_argument("--max-streams", type=positive_int, default=defaults.max_streams,
                        help="concurrent WebSocket streams (close code 4429)")
    limits.add_argument("--max-streams-per-client", type=positive_int,
                        default=defaults.max_streams_per_client,
                        help="concurrent streams from one client address (close code 4429)")
    limits.add_argument("--stream-idle-s", type=positive_float, default=defaults.stream_idle_s,
                        help="seconds a stream may send nothing (close code 4408)")
    limits.add_argument("--max-stream-seconds", type=positive_float,
                        default=defaults.max_stream_seconds,
                        help="audio in one stream (close code 4413)")
    limits.add_argument("--max-frame-kb", type=positive_int, default=defaults.max_frame_kb,
                        help="one WebSocket frame (larger ones close the stream with 1009)")
    parser.set_defaults(handler=_serve)
