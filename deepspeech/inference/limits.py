"""What ``deepspeech serve`` lets one client ask, and how it makes live partials.

Plain settings, apart from the server so that the command line reads its defaults
without importing the web stack.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServeLimits:
    """What one client may ask of the server; each is a ``deepspeech serve`` flag."""

    max_request_mb: float = 20.0  # --max-request-mb: a POST body
    max_audio_seconds: float = 300.0  # --max-audio-seconds: one POSTed file
    max_queue: int = 64  # --max-queue: POSTs being transcribed or waiting
    # Per client address; the defaults leave room for `deepspeech bench serve` (16 POST
    # clients, 4 streams), which runs beside the server on one address.
    max_uploads_per_client: int = 16  # --max-uploads-per-client: POSTs of one address
    body_timeout_s: float = 60.0  # --body-timeout-s: a POST body arrives within it
    max_streams: int = 4  # --max-streams: open WebSocket streams
    max_streams_per_client: int = 4  # --max-streams-per-client: streams of one address
    stream_idle_s: float = 30.0  # --stream-idle-s: a stream that sends nothing is closed
    max_stream_seconds: float = 600.0  # --max-stream-seconds: audio in one stream
    max_frame_kb: int = 1024  # --max-frame-kb: one WebSocket frame

    @property
    def max_request_bytes(self) -> int:
        return round(self.max_request_mb * 2**20)


@dataclass(frozen=True)
class LiveSettings:
    """How the window path makes partials (bidirectional models)."""

    every_s: float = 0.5
    window_s: float = 10.0
