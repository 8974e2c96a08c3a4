"""``deepspeech serve``: a checkpoint behind HTTP and a WebSocket, with a page to try it.

Routes (Starlette on uvicorn):

* ``GET /health``: ``{"ok": true, "model": <model card>, "live": ..., "limits": ...}``.
* ``POST /transcribe``: the audio as the multipart field ``audio`` (or as the raw body),
  any format and rate that ``deepspeech transcribe`` reads; answers the transcript as
  JSON: ``text``, ``duration``, ``words`` (``word``, ``start``, ``end``, ``confidence``),
  ``confidence``.
* ``WS /stream?rate=R``: binary frames of 16-bit little-endian mono PCM at R Hz (8000 to
  48000; 16000 when not given); the text frame ``{"type": "end"}`` ends the audio. The
  server sends ``{"type": "ready", ...}``, then ``{"type": "partial", "text", "audio_s"}``
  as the audio arrives and ``{"type": "final", ...}`` (the transcript, as
  ``POST /transcribe``) before it closes with 1000 (``deepspeech.inference.live``).
* ``GET /``: the page (``static/index.html``): microphone or file, transcript with
  low-confidence words underlined.

Every refusal is a JSON ``{"error": message}`` whose message names the limit and its flag;
on the WebSocket it is an ``{"type": "error", "status", "error"}`` frame and the close code
``4000 + status`` with the message as reason. A limit on the audio's length is 413, like
the byte limit: the request is well formed but more than this server takes. Unforeseen
errors are answered 500 without their traceback, which the log gets once; a client that
hangs up is no error, one line at INFO.

A slow client holds no model: an upload takes a place in the queue only once all of it
has arrived (within ``--body-timeout-s``, else 408), a stream that sends nothing for
``--stream-idle-s`` is closed (4408), and one client address holds at most
``--max-uploads-per-client`` uploads and ``--max-streams-per-client`` streams (429).

The model runs in a thread pool (``workers`` threads, torch's intra-op threads split
between them), so the event loop only moves bytes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

import torch
from python_multipart.exceptions import FormParserError
from starlette.applications import Starlette
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException
from starlette.requests import ClientDisconnect, HTTPConnection, Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from deepspeech.data.audio import AUDIO_SUFFIXES, audio_info
from deepspeech.errors import AudioError, ClientError, DeepSpeechError
from deepspeech.inference.limits import LiveSettings, ServeLimits
from deepspeech.inference.live import (
    LiveSession,
    live_mode,
    transcribe_waveform,
    transcript_json,
)
from deepspeech.inference.recognizer import Recognizer
from deepspeech.inference.transcribe import transcribe_file

log = logging.getLogger(__name__)

STATIC = Path(__file__).with_name("static")
LOOPBACK = ("127.0.0.1", "localhost", "::1")
MIN_RATE, MAX_RATE = 8000, 48000


class PerClient:
    """The places each client address holds, so that one client cannot take them all."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._held: dict[str, int] = {}

    def take(self, client: str) -> bool:
        """One more place for ``client``; False when it holds ``limit`` already."""
        held = self._held.get(client, 0)
        if held >= self.limit:
            return False
        self._held[client] = held + 1
        return True

    def give_back(self, client: str) -> None:
        held = self._held.pop(client) - 1
        if held:  # an address that holds nothing is forgotten: the table stays small
            self._held[client] = held


class Service:
    """The recognizer, its thread pool and the counters that the limits read."""

    def __init__(self, recognizer: Recognizer, limits: ServeLimits, workers: int,
                 threads: int, low_confidence: float, live: LiveSettings) -> None:
        self.recognizer = recognizer
        self.limits = limits
        self.low_confidence = low_confidence
        self.live = live
        self.mode, self.mode_reason = live_mode(recognizer)
        # Torch's intra-op thread count is per thread (OpenMP): each worker sets its own.
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="model",
                                       initializer=torch.set_num_threads, initargs=(threads,))
        self.workers, self.threads = workers, threads
        self.arriving = 0  # uploads whose body is still arriving
        self.arriving_bytes = 0  # what they have sent so far
        self.queued = 0  # uploads arrived, waiting for the model or with it
        self.streams = 0
        self.uploads_of = PerClient(limits.max_uploads_per_client)
        self.streams_of = PerClient(limits.max_streams_per_client)

    async def run(self, function, *args):
        """``function(*args)`` in the model's thread pool."""
        return await asyncio.get_running_loop().run_in_executor(self.pool, function, *args)

    def health(self) -> dict:
        return {"ok": True, "model": self.recognizer.describe(),
                "sample_rate": self.recognizer.extractor.sample_rate,
                "device": str(self.recognizer.device),
                "live": {"mode": self.mode, "why": self.mode_reason, **asdict(self.live)},
                "low_confidence": self.low_confidence,
                "limits": asdict(self.limits), "workers": self.workers,
                "torch_threads": self.threads,
                "arriving": self.arriving, "arriving_bytes": self.arriving_bytes,
                "queued": self.queued, "streams": self.streams}

    def warm_up(self) -> None:
        """One transcript of a second of silence: builds the decoder (an LM loads once)."""
        transcribe_waveform(self.recognizer, torch.zeros(self.recognizer.extractor.sample_rate))


def _client(connection: HTTPConnection) -> str:
    """The peer's address (behind a proxy, the proxy's, unless uvicorn trusts its
    X-Forwarded-For: by default one on this machine)."""
    return connection.client.host if connection.client else "unknown"


# --- HTTP ---------------------------------------------------------------------------------

async def _read_body(request: Request, service: Service) -> bytes:
    """The body, refused (413) as soon as it passes ``--max-request-mb``, or (429) when the
    bodies arriving at once would hold more than the queue may: ``--max-queue`` full ones.
    A slow client holds its bytes only, so many of them leave room for the others."""
    limit = service.limits.max_request_bytes
    budget = service.limits.max_queue * limit
    too_big = ClientError(413, f"request larger than {limit} bytes (--max-request-mb)")
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise too_big
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            service.arriving_bytes += len(chunk)
            if size > limit:
                raise too_big
            if service.arriving_bytes > budget:
                raise ClientError(429, f"uploads arriving at once hold more than {budget} "
                                       "bytes (--max-queue x --max-request-mb); try again "
                                       "shortly")
            chunks.append(chunk)
    finally:
        service.arriving_bytes -= size
    return b"".join(chunks)


async def _upload(request: Request, service: Service) -> tuple[bytes, str]:
    """``(audio bytes, file name)`` from the multipart field ``audio`` or the raw body."""
    limit = service.limits.max_request_bytes
    body = await _read_body(request, service)
    kind = request.headers.get("content-type", "")
    if kind.startswith("multipart/form-data"):
        async def replay() -> dict:
            return {"type": "http.request", "body": body, "more_body": False}

        try:
            form = await Request(request.scope, replay).form(max_files=4, max_fields=16,
                                                              max_part_size=limit)
        except HTTPException as exc:  # how Starlette reports a MultiPartException
            raise ClientError(422, f"malformed multipart body: {exc.detail}") from None
        except (MultiPartException, FormParserError) as exc:
            raise ClientError(422, f"malformed multipart body: {exc}") from None
        audio = form.get("audio")
        if not isinstance(audio, UploadFile):
            raise ClientError(422, "no file in the multipart field 'audio'")
        return await audio.read(), audio.filename or "audio"
    if kind.startswith("application/x-www-form-urlencoded"):
        raise ClientError(415, "send audio as the multipart field 'audio' or as the raw body")
    return body, request.query_params.get("filename", "audio")


def _transcribe_bytes(service: Service, data: bytes, name: str) -> dict:
    """In a worker thread: the transcript of an uploaded file (checked header first)."""
    suffix = Path(name).suffix.lower()
    handle, path = tempfile.mkstemp(suffix=suffix if suffix in AUDIO_SUFFIXES else "",
                                    prefix="deepspeech-upload-")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        try:
            frames, rate = audio_info(path)
        except AudioError as exc:
            raise ClientError(415, str(exc).replace(path, name)) from None
        limit = service.limits.max_audio_seconds
        if rate and frames / rate > limit:
            raise ClientError(413, f"{name}: {frames / rate:.1f} s of audio; this server "
                                   f"takes at most {limit:g} s (--max-audio-seconds)")
        try:
            return {"filename": name, **transcript_json(transcribe_file(service.recognizer, path))}
        except AudioError as exc:
            raise ClientError(422, str(exc).replace(path, name)) from None
    finally:
        os.unlink(path)


async def _arrived_upload(request: Request, service: Service) -> tuple[bytes, str]:
    """``_upload`` within ``--body-timeout-s``."""
    limits = service.limits
    service.arriving += 1
    try:
        return await asyncio.wait_for(_upload(request, service), limits.body_timeout_s)
    except TimeoutError:  # asyncio's own since Python 3.11
        raise ClientError(408, f"the request did not arrive within {limits.body_timeout_s:g} s "
                               "(--body-timeout-s)") from None
    finally:
        service.arriving -= 1


async def transcribe(request: Request) -> JSONResponse:
    service: Service = request.app.state.service
    limits, client = service.limits, _client(request)
    if not service.uploads_of.take(client):
        raise ClientError(429, f"too many uploads from {client} at once "
                               f"({limits.max_uploads_per_client}, --max-uploads-per-client)")
    try:
        data, name = await _arrived_upload(request, service)
        if not data:
            raise ClientError(422, f"{name}: empty file (0 bytes)")
        if service.queued >= limits.max_queue:
            raise ClientError(429, f"too many requests in progress ({limits.max_queue}, "
                                   "--max-queue); try again shortly")
        service.queued += 1
        try:
            return JSONResponse(await service.run(_transcribe_bytes, service, data, name))
        finally:
            service.queued -= 1
    finally:
        service.uploads_of.give_back(client)


async def health(request: Request) -> JSONResponse:
    return JSONResponse(request.app.state.service.health())


async def page(request: Request) -> FileResponse:
    return FileResponse(STATIC / "index.html", media_type="text/html")


# --- WebSocket ----------------------------------------------------------------------------

def _stream_rate(websocket: WebSocket) -> int:
    text = websocket.query_params.get("rate", "16000")
    # isdigit() alone takes "²" (which int() refuses) and digits without end (int() refuses
    # more than 4300 of them).
    digits = text.isascii() and text.isdigit() and len(text) <= len(str(MAX_RATE))
    if not digits or not MIN_RATE <= int(text) <= MAX_RATE:
        shown = text if len(text) <= 16 else f"{text[:16]}..."
        raise ClientError(422, f"rate={shown!r}: the sample rate must be an integer "
                               f"from {MIN_RATE} to {MAX_RATE} Hz")
    return int(text)


async def stream(websocket: WebSocket) -> None:
    service: Service = websocket.app.state.service
    limits, client = service.limits, _client(websocket)
    await websocket.accept()
    try:
        rate = _stream_rate(websocket)
        if service.streams >= limits.max_streams:
            raise ClientError(429, f"too many concurrent streams ({limits.max_streams}"
                                   ", --max-streams); try again later")
        if not service.streams_of.take(client):
            raise ClientError(429, f"too many streams from {client} at once "
                                   f"({limits.max_streams_per_client}, --max-streams-per-client)")
    except ClientError as exc:
        await _refuse(websocket, exc.status, str(exc))
        return
    service.streams += 1
    held = [True]

    def release() -> None:
        """Free the stream's place once, before the close handshake, so that a client
        that opens its next stream as this one closes finds it free."""
        if held[0]:
            held[0] = False
            service.streams -= 1
            service.streams_of.give_back(client)

    session = None
    try:
        session = LiveSession(service.recognizer, rate, service.mode, service.live)
        await websocket.send_json({"type": "ready", "rate": rate, "mode": service.mode,
                                   "sample_rate": session.model_rate})
        await _run_stream(service, websocket, session, rate, release)
    except WebSocketDisconnect:
        log.info("stream: the client left after %.1f s of audio; its state is dropped",
                 session.audio_seconds if session else 0.0)
    except ClientError as exc:
        release()
        await _refuse(websocket, exc.status, str(exc))
    except DeepSpeechError as exc:
        release()
        await _refuse(websocket, 422, str(exc))
    except Exception:
        log.exception("stream failed")
        release()
        await _refuse(websocket, 500, "internal error (logged on the server)", code=1011)
    finally:
        release()


async def _run_stream(service: Service, websocket: WebSocket, session: LiveSession,
                      rate: int, release) -> None:
    """Receive frames while a second task feeds what has arrived to the model."""
    pending: list[bytes] = []
    wake = asyncio.Event()
    ended = False
    limit, idle = service.limits.max_stream_seconds, service.limits.stream_idle_s

    async def receive() -> None:
        nonlocal ended
        received = 0
        while True:
            try:
                message = await asyncio.wait_for(websocket.receive(), idle)
            except TimeoutError:  # asyncio's own since Python 3.11
                raise ClientError(408, f"nothing received for {idle:g} s "
                                       "(--stream-idle-s)") from None
            if message["type"] == "websocket.disconnect":
                raise WebSocketDisconnect(message.get("code", 1000))
            if message.get("bytes") is not None:
                data = message["bytes"]
                if len(data) % 2:
                    raise ClientError(422, f"malformed frame: {len(data)} bytes are not "
                                           "whole 16-bit samples")
                received += len(data) // 2
                if received > limit * rate:
                    raise ClientError(413, f"stream longer than {limit:g} s "
                                           "(--max-stream-seconds)")
                pending.append(data)
                wake.set()
                continue
            if _end_frame(message.get("text")):
                ended = True
                wake.set()
                return
            raise ClientError(422, 'malformed frame: text frames must be {"type": "end"}; '
                                   "audio goes in binary frames")

    async def consume() -> None:
        while True:
            await wake.wait()
            wake.clear()
            if pending:
                chunk = b"".join(pending)
                pending.clear()
                partial = await service.run(session.feed, chunk)
                if partial is not None:
                    await websocket.send_json(partial)
            if ended and not pending:
                await websocket.send_json(await service.run(session.finish))
                release()
                await websocket.close(1000)
                return

    receiver = asyncio.create_task(receive())
    consumer = asyncio.create_task(consume())
    try:
        done, _ = await asyncio.wait({receiver, consumer}, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            task.result()  # raises what the task raised
        await consumer
    finally:
        for task in (receiver, consumer):
            task.cancel()


def _end_frame(text: str | None) -> bool:
    try:
        return json.loads(text or "").get("type") == "end"
    except (ValueError, AttributeError):
        return False


async def _refuse(websocket: WebSocket, status: int, message: str, code: int = 0) -> None:
    """Tell the client why (a JSON frame, then the close code ``4000 + status``)."""
    log.info("stream refused (%d): %s", status, message)
    try:
        await websocket.send_json({"type": "error", "status": status, "error": message})
        reason = message.encode()[:120].decode(errors="ignore")  # a close reason: <= 123 bytes
        await websocket.close(code or 4000 + status, reason)
    except (WebSocketDisconnect, RuntimeError):
        pass  # the client is gone already


# --- the app ------------------------------------------------------------------------------

async def _client_error(request: Request, exc: ClientError) -> JSONResponse:
    log.info("%s %s refused (%d): %s", request.method, request.url.path, exc.status, exc)
    return JSONResponse({"error": str(exc)}, status_code=exc.status)


async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
    return JSONResponse({"error": exc.detail}, status_code=exc.status_code)


async def _client_left(request: Request, exc: ClientDisconnect) -> Response:
    log.info("%s %s: the client left before its request arrived", request.method,
             request.url.path)
    return Response(status_code=400)  # read by no one: the connection is gone


async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    # One line naming the request: Starlette raises the error on to uvicorn, which logs
    # its traceback ("Exception in ASGI application").
    log.error("%s %s failed: %s: %s", request.method, request.url.path,
              type(exc).__name__, exc)
    return JSONResponse({"error": "internal error (logged on the server)"}, status_code=500)


def create_app(recognizer: Recognizer, limits: ServeLimits | None = None, workers: int = 2,
               threads: int = 1, low_confidence: float = 0.5,
               live: LiveSettings | None = None) -> Starlette:
    """The ASGI app serving ``recognizer``: ``workers`` model threads of ``threads`` torch
    intra-op threads each."""
    app = Starlette(
        routes=[Route("/", page), Route("/health", health),
                Route("/transcribe", transcribe, methods=["POST"]),
                WebSocketRoute("/stream", stream)],
        exception_handlers={ClientError: _client_error, HTTPException: _http_error,
                            ClientDisconnect: _client_left, Exception: _internal_error})
    app.state.service = Service(recognizer, limits or ServeLimits(), workers, threads,
                                low_confidence, live or LiveSettings())
    return app


def serve(app: Starlette, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Run ``app`` with uvicorn until interrupted; warns when reachable beyond this machine."""
    import uvicorn

    service: Service = app.state.service
    if host not in LOOPBACK:
        log.warning("listening on %s: reachable from other machines, with no authentication "
                    "and no TLS; put it behind a proxy that adds them", host)
    log.info("warming up the model ...")
    service.pool.submit(service.warm_up).result()
    log.info("live partials: %s (%s)", service.mode, service.mode_reason)
    log.info("serving on http://%s:%d/ (%d model threads x %d torch threads)",
             f"[{host}]" if ":" in host else host, port, service.workers, service.threads)
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False,
                ws="websockets-sansio", ws_max_size=service.limits.max_frame_kb * 1024)
