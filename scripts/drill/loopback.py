"""The hostile part's server and clients: ``deepspeech serve`` on a loopback port with
short limits, the requests that attack it, and the checks that it still serves.

Clients on other loopback addresses (127.0.x.y, all this machine's) stand for other users,
so that the per-client limits apply to them and not to the drill's own requests from
127.0.0.1. After a case the server must be alive, answer ``GET /health`` and an ordinary
``POST /transcribe`` with 200, have logged no traceback and no ERROR, and its peak
resident memory must stay within ``HEADROOM_MB`` of what it held once started.
"""

from __future__ import annotations

import http.client
import io
import itertools
import json
import re
import select
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from deepspeech.data.synth.tones import spoken

from .jobs import Job, alive, deepspeech, wait_for
from .verdicts import TRACEBACK, Row
from .workspace import Drill

BODY_TIMEOUT_S = 2.0  # the server's --body-timeout-s
STREAM_IDLE_S = 2.0  # the server's --stream-idle-s
UPLOADS_PER_CLIENT = 4  # the server's --max-uploads-per-client
STREAMS_PER_CLIENT = 2  # the server's --max-streams-per-client
LIMITS = ("--workers", 2, "--threads", 1, "--max-queue", 4,
          "--max-uploads-per-client", UPLOADS_PER_CLIENT, "--body-timeout-s", BODY_TIMEOUT_S,
          "--max-streams", 4, "--max-streams-per-client", STREAMS_PER_CLIENT,
          "--stream-idle-s", STREAM_IDLE_S)
SLACK_S = 3.0  # a time limit's refusal comes within the limit plus this
SERVED_S = 10.0  # an ordinary request, or a refusal that needs no waiting, is answered within
HEADROOM_MB = 512  # the server's peak RSS above its RSS once started and warmed up
BODY = 100_000  # the length that slow uploads announce and never send
UPLOAD_HEAD = (b"POST /transcribe HTTP/1.1\r\nHost: drill\r\nContent-Type: audio/wav\r\n"
               + f"Content-Length: {BODY}\r\n\r\n".encode())  # a slow upload's headers


@dataclass
class Answer:
    """What a client got: an HTTP status or close code ("final": a stream served; None:
    nothing within its bound), the server's message or transcript, and when."""

    status: int | str | None
    said: str
    seconds: float


def speech(rate: int, words: int = 6) -> np.ndarray:
    """Tone 'speech' (0.3 s a word) at ``rate``, the same every time."""
    return spoken(["yes", "no"] * (words // 2), np.random.default_rng(0), rate)


def wav_bytes(rate: int, words: int = 6) -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, speech(rate, words), rate, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def pcm_bytes(rate: int) -> bytes:
    """The live stream's format: 16-bit little-endian mono."""
    return (np.clip(speech(rate), -1, 1) * 32767).astype("<i2").tobytes()


_addresses = itertools.count(2)


def stranger() -> str:
    """A loopback address that no client of this drill used before: another user."""
    number = next(_addresses)
    return f"127.0.{1 + number // 250}.{1 + number % 250}"


def until(condition: Callable[[], bool], seconds: float) -> bool:
    """Poll ``condition`` for at most ``seconds``."""
    end = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def read_answer(sock: socket.socket, start: float) -> Answer:
    """The HTTP response waiting on ``sock``: its status and error or transcript."""
    try:
        response = http.client.HTTPResponse(sock, method="POST")
        response.begin()
        body = response.read().decode(errors="replace")
    except (OSError, http.client.HTTPException) as exc:
        return Answer(None, f"no answer: {type(exc).__name__}", time.monotonic() - start)
    try:
        data = json.loads(body)
        said = data["error"] if "error" in data else f"served: {data.get('text')!r}"
    except (ValueError, TypeError):
        said = body[:200]
    return Answer(response.status, said, time.monotonic() - start)


def post(port: int, data: bytes, client: str = "127.0.0.1", bound: float = SERVED_S) -> Answer:
    """``POST /transcribe`` with ``data`` as the raw body."""
    start = time.monotonic()
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=bound,
                                        source_address=(client, 0))
    except OSError as exc:
        return Answer(None, f"no connection: {exc}", time.monotonic() - start)
    with sock:
        sock.sendall(b"POST /transcribe?filename=speech.wav HTTP/1.1\r\nHost: drill\r\n"
                     b"Content-Type: audio/wav\r\nConnection: close\r\n"
                     + f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        return read_answer(sock, start)


def slow_upload(port: int, client: str, trickle: bool, bound: float) -> Answer:
    """A POST that announces BODY bytes, then sends one a second (``trickle``) or none."""
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=bound,
                                  source_address=(client, 0)) as sock:
        sock.sendall(UPLOAD_HEAD)
        while time.monotonic() - start < bound:
            if select.select([sock], [], [], 1.0)[0]:
                return read_answer(sock, start)
            if trickle:
                try:
                    sock.send(b"\0")
                except OSError:
                    return read_answer(sock, start)
    return Answer(None, f"no answer within {bound:g} s", time.monotonic() - start)


def stream(port: int, client: str, rate: str, audio: bytes | None, bound: float) -> Answer:
    """A WebSocket stream at ``rate`` (the query's text): ``audio`` sent in 0.1 s frames
    then the end frame, or (None) nothing at all; how it ended."""
    from websockets.exceptions import ConnectionClosed, WebSocketException
    from websockets.sync.client import connect

    start = time.monotonic()
    try:
        with connect(f"ws://127.0.0.1:{port}/stream?rate={rate}", source_address=(client, 0),
                     proxy=None, open_timeout=bound, close_timeout=SLACK_S,
                     max_size=2**24) as ws:
            while True:
                message = json.loads(ws.recv(timeout=max(0.01, bound - time.monotonic()
                                                         + start)))
                if message["type"] == "ready" and audio is not None:
                    frame = 2 * round(message["rate"] / 10)
                    for at in range(0, len(audio), frame):
                        ws.send(audio[at:at + frame])
                    ws.send(json.dumps({"type": "end"}))
                elif message["type"] == "final":
                    return Answer("final", f"served: {message['text']!r}",
                                  time.monotonic() - start)
    except ConnectionClosed as exc:
        closed = exc.rcvd
        return Answer(closed.code if closed else None, closed.reason if closed else str(exc),
                      time.monotonic() - start)
    except TimeoutError:
        return Answer(None, f"nothing within {bound:g} s", time.monotonic() - start)
    except (OSError, WebSocketException) as exc:
        return Answer(None, f"{type(exc).__name__}: {exc}", time.monotonic() - start)


def megabytes(pid: int, field: str) -> float:
    """``field`` (VmRSS, VmHWM: the peak) of /proc/PID/status, in MB."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(rf"^{field}:\s+(\d+) kB", status, re.M).group(1)) / 1024


class Server:
    """``deepspeech serve`` on base12 with the short LIMITS, on a free loopback port."""

    def __init__(self, d: Drill) -> None:
        self.port = free_port()
        self.job = Job(deepspeech("serve", "--checkpoint", d.base12, "--port", self.port,
                                  *LIMITS), d.root / "logs" / "server")
        self.log = self.job.folder / "stderr.txt"
        self.ordinary = wav_bytes(16000)
        if not wait_for(lambda: self.health() is not None, self.job):
            raise RuntimeError(f"the server did not start: {self.log_since(0)[-500:]}")
        post(self.port, self.ordinary)  # its first transcript, so that the start is warm
        self.rss_start = megabytes(self.job.proc.pid, "VmRSS")

    def health(self) -> dict | None:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=SERVED_S)
        try:
            connection.request("GET", "/health")
            response = connection.getresponse()
            return json.loads(response.read()) if response.status == 200 else None
        except (OSError, http.client.HTTPException, ValueError):
            return None
        finally:
            connection.close()

    def count(self, key: str) -> int:
        """A counter of /health (arriving, streams); -1 when it does not answer."""
        return (self.health() or {}).get(key, -1)

    def log_size(self) -> int:
        return self.log.stat().st_size

    def log_since(self, offset: int) -> str:
        with open(self.log, "rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")

    def peak_mb(self) -> float:
        return megabytes(self.job.proc.pid, "VmHWM")

    def bound_mb(self) -> float:
        """What the peak may reach: HEADROOM_MB over the RSS once started."""
        return self.rss_start + HEADROOM_MB

    def still_serving(self, offset: int) -> list[str]:
        """What is wrong with the server after a case (nothing: an empty list)."""
        if not alive(self.job.proc.pid):
            return [f"the server died: {self.log_since(offset)[-300:]!r}"]
        problems = []
        if self.health() is None:
            problems.append("GET /health does not answer 200")
        answer = post(self.port, self.ordinary)
        if answer.status != 200:
            problems.append(f"an ordinary POST answered {answer.status}: {answer.said}")
        log = self.log_since(offset)
        if TRACEBACK in log or re.search(r"^\S+ ERROR ", log, re.M):
            problems.append("a traceback or an ERROR in the server's log")
        if self.peak_mb() > self.bound_mb():
            problems.append(f"peak RSS {self.peak_mb():.0f} MB, over {self.rss_start:.0f} + "
                            f"{HEADROOM_MB} MB")
        return problems


_servers: dict[Path, Server] = {}


def server_for(d: Drill) -> Server:
    """The part's server; a new one if a case killed it (that case has failed already)."""
    if d.root not in _servers or not _servers[d.root].job.running():
        _servers[d.root] = Server(d)
    return _servers[d.root]


def serving_after(body: Callable[[Drill, Server], Row]) -> Callable[[Drill], Row]:
    """The case ``body``, then the checks that the server is still alive and serving."""
    def case(d: Drill) -> Row:
        server = server_for(d)
        offset = server.log_size()
        row = body(d, server)
        problems = server.still_serving(offset)
        row.intact = "no" if problems else "yes"
        row.problems += problems
        return row
    return case
