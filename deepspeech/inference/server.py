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
errors are logged here with their traceback and answered 500 without it.

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
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse
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
        self.queued = 0
        self.streams = 0

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
                "queued": self.queued, "streams": self.streams}

    def warm_up(self) -> None:
        """One transcript of a second of silence: builds the decoder (an LM loads once)."""
        transcribe_waveform(self.recognizer, torch.zeros(self.recognizer.extractor.sample_rate))


# --- HTTP ---------------------------------------------------------------------------------

async def _read_body(request: Request, limit: int) -> bytes:
    """The body, refused (413) as soon as it passes ``limit`` bytes."""
    too_big = ClientError(413, f"request larger than {limit} bytes (--max-request-mb)")
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise too_big
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_big
        chunks.append(chunk)
    return b"".join(chunks)


async def _upload(request: Request, limit: int) -> tuple[bytes, str]:
    """``(audio bytes, file name)`` from the multipart field ``audio`` or the raw body."""
    body = await _read_body(request, limit)
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


async def transcribe(request: Request) -> JSONResponse:
    service: Service = request.app.state.service
    if service.queued >= service.limits.max_queue:
        raise ClientError(429, f"too many requests in progress ({service.limits.max_queue}, "
                               "--max-queue); try again shortly")
    service.queued += 1
    try:
        data, name = await _upload(request, service.limits.max_request_bytes)
        if not data:
            raise ClientError(422, f"{name}: empty file (0 bytes)")
        return JSONResponse(await service.run(_transcribe_bytes, service, data, name))
    finally:
        service.queued -= 1


async def health(request: Request) -> JSONResponse:
    return JSONResponse(request.app.state.service.health())


async def page(request: Request) -> FileResponse:
    return FileResponse(STATIC / "index.html", media_type="text/html")


# --- WebSocket ----------------------------------------------------------------------------

def _stream_rate(websocket: WebSocket) -> int:
    text = websocket.query_params.get("rate", "16000")
    if not text.isdigit() or not MIN_RATE <= int(text) <= MAX_RATE:
        raise ClientError(422, f"rate={text!r}: the sample rate must be an integer "
                               f"from {MIN_RATE} to {MAX_RATE} Hz")
    return int(text)


async def stream(websocket: WebSocket) -> None:
    service: Service = websocket.app.state.service
    await websocket.accept()
    try:
        rate = _stream_rate(websocket)
        if service.streams >= service.limits.max_streams:
            raise ClientError(429, f"too many concurrent streams ({service.limits.max_streams}"
                                   ", --max-streams); try again later")
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
    limit = service.limits.max_stream_seconds

    async def receive() -> None:
        nonlocal ended
        received = 0
        while True:
            message = await websocket.receive()
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


async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
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
                            Exception: _internal_error})
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
