"""``deepspeech serve``: a real server process, real HTTP and WebSocket clients, bad requests.

One server per module (``python -m deepspeech serve`` on a free loopback port, tight
limits so that each can be hit cheaply), a randomly initialized bidirectional model (its
text is noise, but the server must give exactly what ``transcribe`` gives). The streaming
path of unidirectional models, the window path and the chunk resampler are also tested
in-process.
"""

from __future__ import annotations

import asyncio
import http.client
import io
import json
import logging
import socket
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
import torchaudio.functional as AF
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from deepspeech.errors import ClientError
from deepspeech.inference.limits import LiveSettings
from deepspeech.inference.live import ChunkResampler, LiveSession, transcribe_waveform
from deepspeech.inference.recognizer import Recognizer
from deepspeech.inference.transcribe import transcribe_file

SMALL = ["model.conv.channels=[4,4]", "model.conv.kernels=[[11,5],[11,5]]",
         "model.rnn.layers=2", "model.rnn.hidden=24"]
UNIDIRECTIONAL = [*SMALL, "model.rnn.bidirectional=false", "model.rnn.lookahead=2",
                  "features.normalize=global"]
LIMITS = ["--max-request-mb", "0.25", "--max-audio-seconds", "6", "--max-streams", "3",
          "--max-stream-seconds", "5", "--max-frame-kb", "64", "--partial-every", "0.25",
          "--workers", "2", "--max-queue", "4", "--max-uploads-per-client", "2",
          "--body-timeout-s", "2", "--max-streams-per-client", "2", "--stream-idle-s", "2"]
# Every address in 127.0.0.0/8 is this machine: a second one is a second client.
OTHER_CLIENT = "127.0.0.2"


def noise(seconds: float, rate: int = 16000, seed: int = 0) -> np.ndarray:
    """Speech-like enough for a random model: noise with a slow envelope, in [-1, 1)."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * rng.standard_normal(t.size) * (0.6 + 0.4 * np.sin(2 * np.pi * 1.5 * t))
            ).clip(-1, 0.99).astype(np.float32)


def request(port: int, method: str, path: str, body: bytes | None = None,
            headers: dict | None = None, source: str = "127.0.0.1") -> tuple[int, dict]:
    """``(status, JSON body)`` of one HTTP request from the address ``source``."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60,
                                            source_address=(source, 0))
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        connection.close()


def multipart(fields: dict[str, tuple[str, bytes]]) -> tuple[bytes, dict]:
    """A multipart/form-data body of files: ``{field: (filename, content)}``."""
    boundary = uuid.uuid4().hex
    parts = []
    for name, (filename, content) in fields.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; '
                     f'filename="{filename}"\r\nContent-Type: application/octet-stream\r\n\r\n'
                     .encode() + content + b"\r\n")
    body = b"".join(parts) + f"--{boundary}--\r\n".encode()
    return body, {"Content-Type": f"multipart/form-data; boundary={boundary}"}


def post_audio(port: int, content: bytes, filename: str = "clip.wav",
               source: str = "127.0.0.1") -> tuple[int, dict]:
    body, headers = multipart({"audio": (filename, content)})
    return request(port, "POST", "/transcribe", body, headers, source)


def begin_post(port: int, length: int, start: bytes = b"",
               source: str = "127.0.0.1") -> socket.socket:
    """A raw POST /transcribe that promises ``length`` bytes of body and sends ``start``."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(source, 0))
    sock.sendall(f"POST /transcribe HTTP/1.1\r\nHost: x\r\nContent-Type: audio/wav\r\n"
                 f"Content-Length: {length}\r\n\r\n".encode() + start)
    return sock


def audio_bytes(samples: np.ndarray, rate: int = 16000, kind: str = "WAV",
                subtype: str = "PCM_16") -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, samples, rate, format=kind, subtype=subtype)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, random_recognizer, save_random_checkpoint) -> Path:
    folder = tmp_path_factory.mktemp("serve")
    return save_random_checkpoint(random_recognizer(SMALL), folder / "bi.pt")


@pytest.fixture(scope="module")
def server(checkpoint, serving):
    """The port of a server of ``checkpoint`` with tight limits, for the whole module."""
    with serving(checkpoint, checkpoint.with_name("server.log"), LIMITS) as port:
        yield port


# --- HTTP -----------------------------------------------------------------------------------

@pytest.mark.slow
def test_health_describes_the_model_live_mode_and_limits(server):
    status, info = request(server, "GET", "/health")
    assert status == 200 and info["ok"] is True
    assert info["sample_rate"] == 16000 and "bidirectional" in info["model"]["model"]
    assert info["live"]["mode"] == "window" and "bidirectional" in info["live"]["why"]
    assert info["limits"]["max_streams"] == 3 and info["limits"]["max_request_mb"] == 0.25
    assert info["limits"]["body_timeout_s"] == 2 and info["limits"]["stream_idle_s"] == 2
    assert info["streams"] == 0 and info["queued"] == 0 and info["arriving"] == 0


@pytest.mark.slow
def test_post_gives_what_transcribe_gives_with_confidence_fields(server, checkpoint, tmp_path):
    clip = tmp_path / "clip.flac"
    sf.write(clip, noise(1.7, rate=22050, seed=3), 22050)  # resampled, as transcribe does
    status, result = post_audio(server, clip.read_bytes(), "clip.flac")
    assert status == 200, result
    expected = transcribe_file(Recognizer.from_checkpoint(checkpoint, device="cpu"), str(clip))
    assert result["filename"] == "clip.flac"
    assert result["text"] == expected.text and result["duration"] == pytest.approx(1.7, abs=1e-3)
    assert [w["word"] for w in result["words"]] == [w.word for w in expected.words]
    assert "confidence" in result and all("confidence" in w for w in result["words"])
    assert all({"word", "start", "end"} <= set(w) for w in result["words"])
    # The raw body works too (curl --data-binary), named by ?filename=.
    status, raw = request(server, "POST", "/transcribe?filename=clip.flac", clip.read_bytes(),
                          {"Content-Type": "audio/flac"})
    assert status == 200 and raw["text"] == expected.text


def _bad_requests() -> list[tuple[str, object, int, str]]:
    good = audio_bytes(noise(0.8))
    too_big = audio_bytes(noise(6.0, rate=48000), rate=48000)  # 576 kB > 0.25 MB
    too_long = audio_bytes(noise(7.0, rate=8000), rate=8000, subtype="PCM_U8")  # 56 kB, 7 s
    tiny = audio_bytes(noise(0.001))  # 16 samples
    return [
        ("not audio", ("notes.txt", b"hello, this is not audio\n" * 20), 415,
         "notes.txt: unreadable audio"),
        ("0 bytes", ("empty.wav", b""), 422, "empty.wav: empty file (0 bytes)"),
        ("over the size limit", ("big.wav", too_big), 413, "--max-request-mb"),
        ("too long", ("long.wav", too_long), 413, "7.0 s of audio; this server takes at most 6 s"),
        ("too short", ("tiny.wav", tiny), 422, "too few for the features"),
        ("no audio field", ({"file": ("x.wav", good)},), 422, "multipart field 'audio'"),
        ("malformed multipart", (b"garbage", {"Content-Type":
                                              "multipart/form-data; boundary=xx"}), 422,
         "malformed multipart body"),
        ("a form, not a file", (b"audio=abc", {"Content-Type":
                                               "application/x-www-form-urlencoded"}), 415,
         "multipart field 'audio' or as the raw body"),
        ("GET /transcribe", ("GET",), 405, "Method Not Allowed"),
    ]


@pytest.mark.slow
@pytest.mark.parametrize("case", _bad_requests(), ids=lambda case: case[0])
def test_a_bad_request_gets_its_4xx_and_the_next_good_one_is_served(server, case):
    name, what, status, message = case
    if name == "no audio field":
        body, headers = multipart(what[0])
        got = request(server, "POST", "/transcribe", body, headers)
    elif name in ("malformed multipart", "a form, not a file"):
        got = request(server, "POST", "/transcribe", what[0], what[1])
    elif name == "GET /transcribe":
        got = request(server, "GET", "/transcribe")
    else:
        got = post_audio(server, what[1], what[0])
    assert got[0] == status, got
    assert set(got[1]) == {"error"} and message in got[1]["error"]
    assert "Traceback" not in got[1]["error"]
    status, result = post_audio(server, audio_bytes(noise(0.8, seed=5)))
    assert status == 200 and "text" in result


@pytest.mark.slow
def test_a_body_larger_than_its_header_says_is_cut_off_at_the_limit(server):
    # Chunked transfer: no Content-Length to refuse early, so the stream is counted.
    connection = http.client.HTTPConnection("127.0.0.1", server, timeout=60)
    body, headers = multipart({"audio": ("big.wav", b"\0" * 400_000)})
    connection.request("POST", "/transcribe", body=iter([body[i:i + 65536] for i in
                                                        range(0, len(body), 65536)]),
                       headers=headers, encode_chunked=True)
    response = connection.getresponse()
    assert response.status == 413 and "--max-request-mb" in json.loads(response.read())["error"]
    connection.close()


def _held_uploads(port: int, starts: list[tuple[str, bytes]], length: int) -> list:
    """Uploads that promise ``length`` bytes and send only ``start`` (from ``source``),
    once the server has all that they send."""
    held = [begin_post(port, length, start, source) for source, start in starts]
    sent, deadline = sum(len(start) for _, start in starts), time.monotonic() + 10
    while time.monotonic() < deadline:
        info = request(port, "GET", "/health")[1]
        if info["arriving"] == len(held) and info["arriving_bytes"] == sent:
            break
        time.sleep(0.05)
    return held


def _timed_out(held: list) -> None:
    for sock in held:
        response = http.client.HTTPResponse(sock)
        response.begin()
        assert response.status == 408
        assert json.loads(response.read()) == {
            "error": "the request did not arrive within 2 s (--body-timeout-s)"}
        sock.close()


@pytest.mark.slow
def test_slow_uploads_time_out_and_hold_no_place_of_other_clients(server):
    # Uploads that never finish (headers only, or 4 bytes), as many as --max-queue, from
    # two clients: they wait for their bodies, not in the queue, so a third is served.
    started = time.monotonic()
    held = _held_uploads(server, [("127.0.0.1", b""), ("127.0.0.1", b"RIFF"),
                                  ("127.0.0.3", b""), ("127.0.0.3", b"")], 100_000)
    good = audio_bytes(noise(0.8, seed=5))
    status, refused = post_audio(server, good)
    assert status == 429, refused
    assert refused["error"] == ("too many uploads from 127.0.0.1 at once "
                                "(2, --max-uploads-per-client)")
    status, served = post_audio(server, good, source=OTHER_CLIENT)
    assert status == 200 and "text" in served
    _timed_out(held)
    assert 1.5 < time.monotonic() - started < 15
    status, served = post_audio(server, good)
    assert status == 200 and "text" in served


@pytest.mark.slow
def test_bodies_arriving_at_once_hold_at_most_what_the_queue_may(server):
    # Four uploads stopped just short of --max-request-mb (0.25 MB) fill --max-queue (4)
    # full bodies: a fifth is refused rather than held in memory beside them.
    almost = b"\0" * 262_000
    held = _held_uploads(server, [("127.0.0.1", almost), ("127.0.0.1", almost),
                                  ("127.0.0.3", almost), ("127.0.0.3", almost)], 262_144)
    status, refused = post_audio(server, audio_bytes(noise(0.8, seed=5)), source=OTHER_CLIENT)
    assert status == 429 and refused["error"] == (
        "uploads arriving at once hold more than 1048576 bytes (--max-queue x "
        "--max-request-mb); try again shortly")
    _timed_out(held)
    status, served = post_audio(server, audio_bytes(noise(0.8, seed=5)), source=OTHER_CLIENT)
    assert status == 200 and "text" in served


@pytest.mark.slow
def test_a_client_that_leaves_mid_upload_is_one_info_line_not_a_traceback(server, checkpoint):
    log = checkpoint.with_name("server.log")
    seen = len(log.read_text())
    body, headers = multipart({"audio": ("clip.wav", audio_bytes(noise(1.0)))})
    left = "POST /transcribe: the client left before its request arrived"
    for count in range(1, 4):  # one after another: each leaves before the next comes
        begin_post(server, len(body), body[:len(body) // 2]).close()
        deadline = time.monotonic() + 10
        while log.read_text()[seen:].count(left) < count and time.monotonic() < deadline:
            time.sleep(0.05)
    new = log.read_text()[seen:]
    assert new.count(left) == 3 and " INFO " in new
    assert "Traceback" not in new and "ERROR" not in new
    status, served = post_audio(server, audio_bytes(noise(0.8, seed=5)))
    assert status == 200 and "text" in served


# --- WebSocket ------------------------------------------------------------------------------

async def _stream(port: int, pcm: bytes, rate: int = 16000, chunk_s: float = 0.1,
                  pace: float = 0.0, source: str = "127.0.0.1"
                  ) -> tuple[list[dict], int | None, str]:
    """Send ``pcm`` in chunks, then the end frame; every message, close code and reason."""
    messages = []
    async with connect(f"ws://127.0.0.1:{port}/stream?rate={rate}",
                       local_addr=(source, 0)) as ws:
        messages.append(json.loads(await ws.recv()))
        step = 2 * int(chunk_s * rate)
        for start in range(0, len(pcm), step):
            await ws.send(pcm[start:start + step])
            await asyncio.sleep(pace)
        await ws.send(json.dumps({"type": "end"}))
        async for message in ws:
            messages.append(json.loads(message))
    return messages, ws.close_code, ws.close_reason


async def _refused(port: int, query: str, frames: list) -> tuple[list[dict], int, str]:
    """Open a stream, send ``frames``; what came back before the server closed it."""
    messages = []
    async with connect(f"ws://127.0.0.1:{port}/stream{query}") as ws:
        try:
            for frame in frames:
                await ws.send(frame)
            async for message in ws:
                messages.append(json.loads(message))
        except ConnectionClosed:
            pass
    return messages, ws.close_code, ws.close_reason


def pcm16(samples: np.ndarray) -> bytes:
    return (samples * 32768).clip(-32768, 32767).astype("<i2").tobytes()


@pytest.mark.slow
def test_stream_sends_partials_then_the_transcript_that_post_gives(server):
    samples = noise(2.0, seed=7)
    pcm = pcm16(samples)
    messages, code, _ = asyncio.run(_stream(server, pcm, pace=0.02))
    assert messages[0] == {"type": "ready", "rate": 16000, "mode": "window",
                           "sample_rate": 16000}
    partials = [m for m in messages if m["type"] == "partial"]
    assert partials and all(set(m) == {"type", "text", "audio_s"} for m in partials)
    assert [m["audio_s"] for m in partials] == sorted(m["audio_s"] for m in partials)
    final = messages[-1]
    assert final["type"] == "final" and code == 1000
    # The same 16-bit samples as a WAV file, POSTed: the same transcript.
    status, posted = post_audio(server, audio_bytes(np.frombuffer(pcm, "<i2").copy(),
                                                    subtype="PCM_16"))
    assert status == 200
    assert final["text"] == posted["text"] and final["words"] == posted["words"]
    assert final["duration"] == posted["duration"] == 2.0


@pytest.mark.slow
def test_stream_at_another_rate_is_resampled(server):
    messages, code, _ = asyncio.run(_stream(server, pcm16(noise(1.0, rate=8000)), rate=8000))
    assert messages[0]["rate"] == 8000 and code == 1000
    assert messages[-1]["type"] == "final" and messages[-1]["duration"] == pytest.approx(1.0)


@pytest.mark.slow
@pytest.mark.parametrize(("query", "frames", "code", "message"), [
    ("?rate=100", [], 4422, "rate='100': the sample rate must be an integer from 8000"),
    ("?rate=fast", [], 4422, "rate='fast'"),
    ("?rate=%C2%B2", [], 4422, "rate='²': the sample rate must be an integer"),
    ("?rate=" + "9" * 5000, [], 4422, "rate='9999999999999999...': the sample rate"),
    ("", [b"\x01\x02\x03"], 4422, "malformed frame: 3 bytes are not whole 16-bit samples"),
    ("", ["hello"], 4422, 'malformed frame: text frames must be {"type": "end"}'),
    ("", [json.dumps({"type": "end"})], 4422, "no audio received"),
    ("?rate=8000", [b"\0\0" * 8000] * 6, 4413, "stream longer than 5 s (--max-stream-seconds)"),
], ids=["rate too low", "rate not a number", "rate a superscript digit", "rate of 5000 digits",
        "odd bytes", "text frame", "no audio", "too long"])
def test_a_bad_stream_is_closed_with_4000_plus_status_and_the_next_is_served(
        server, query, frames, code, message):
    messages, got_code, reason = asyncio.run(_refused(server, query, frames))
    errors = [m for m in messages if m["type"] == "error"]
    assert got_code == code and message in reason, (got_code, reason)
    assert errors and errors[-1]["status"] == code - 4000 and message in errors[-1]["error"]
    messages, code, _ = asyncio.run(_stream(server, pcm16(noise(0.5))))
    assert code == 1000 and messages[-1]["type"] == "final"


@pytest.mark.slow
def test_a_frame_over_the_limit_closes_the_stream_with_1009(server):
    messages, code, _ = asyncio.run(_refused(server, "", [b"\0\0" * 40_000]))  # 80 kB > 64 kB
    assert code == 1009 and not [m for m in messages if m["type"] != "ready"]
    messages, code, _ = asyncio.run(_stream(server, pcm16(noise(0.5))))
    assert code == 1000 and messages[-1]["type"] == "final"


@pytest.mark.slow
def test_too_many_streams_get_4429_and_a_left_stream_frees_its_place(server):
    async def scenario() -> tuple:
        url = f"ws://127.0.0.1:{server}/stream"
        first, second = await connect(url), await connect(url)
        third = await connect(url, local_addr=(OTHER_CLIENT, 0))
        for ws in (first, second, third):
            assert json.loads(await ws.recv())["type"] == "ready"
            await ws.send(b"\0\0" * 1600)
        refused = await _refused(server, "", [])
        # A client that vanishes mid-stream (no close frame): its place is freed.
        first.transport.abort()
        await second.close()
        await third.close()
        return refused

    messages, code, reason = asyncio.run(scenario())
    assert code == 4429 and "too many concurrent streams (3, --max-streams)" in reason
    deadline = time.monotonic() + 10
    while request(server, "GET", "/health")[1]["streams"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert request(server, "GET", "/health")[1]["streams"] == 0
    messages, code, _ = asyncio.run(_stream(server, pcm16(noise(0.5))))
    assert code == 1000 and messages[-1]["type"] == "final"


@pytest.mark.slow
def test_one_client_holds_at_most_its_streams_and_others_are_served(server):
    async def scenario() -> tuple:
        url = f"ws://127.0.0.1:{server}/stream"
        async with connect(url) as first, connect(url) as second:
            for ws in (first, second):
                assert json.loads(await ws.recv())["type"] == "ready"
            refused = await _refused(server, "", [])
            served = await _stream(server, pcm16(noise(0.5)), source=OTHER_CLIENT)
        return refused, served

    (messages, code, reason), (served, served_code, _) = asyncio.run(
        asyncio.wait_for(scenario(), 30))
    assert code == 4429
    assert "too many streams from 127.0.0.1 at once (2, --max-streams-per-client)" in reason
    assert served_code == 1000 and served[-1]["type"] == "final"


@pytest.mark.slow
def test_a_stream_that_sends_nothing_is_closed_with_4408_and_the_next_is_served(server):
    started = time.monotonic()
    messages, code, reason = asyncio.run(asyncio.wait_for(_refused(server, "", []), 30))
    assert code == 4408 and reason == "nothing received for 2 s (--stream-idle-s)"
    assert messages[0]["type"] == "ready" and messages[-1]["status"] == 408
    assert 1.5 < time.monotonic() - started < 15
    messages, code, _ = asyncio.run(_stream(server, pcm16(noise(0.5))))
    assert code == 1000 and messages[-1]["type"] == "final"


# --- in-process: the server's pieces --------------------------------------------------------

@pytest.mark.parametrize(("from_rate", "to_rate"), [(44100, 16000), (8000, 16000),
                                                     (16000, 16000)])
def test_chunk_resampler_gives_the_whole_stream_resampled(from_rate, to_rate):
    samples = torch.from_numpy(noise(0.6, rate=from_rate))
    resampler = ChunkResampler(from_rate, to_rate)
    sizes, pieces, start = [1, 441, 1000, 37, 5000], [], 0
    while start < samples.numel():
        size = sizes[len(pieces) % len(sizes)]
        pieces.append(resampler.accept(samples[start:start + size]))
        start += size
    pieces.append(resampler.accept(torch.zeros(0), final=True))
    whole = AF.resample(samples, from_rate, to_rate)
    torch.testing.assert_close(torch.cat(pieces), whole, atol=1e-5, rtol=0)


def test_live_session_streams_a_unidirectional_model_and_ends_offline(random_recognizer):
    recognizer = random_recognizer(UNIDIRECTIONAL)
    session = LiveSession(recognizer, 16000, "chunks")
    pcm = pcm16(noise(1.2, seed=2))
    partials = [session.feed(pcm[i:i + 3200]) for i in range(0, len(pcm), 3200)]
    assert all(p["type"] == "partial" for p in partials)
    assert [p["audio_s"] for p in partials] == pytest.approx([0.1 * (i + 1) for i in range(12)])
    final = session.finish()
    samples = torch.from_numpy(np.frombuffer(pcm, "<i2").astype(np.float32) / 32768)
    assert final["text"] == transcribe_waveform(recognizer, samples)["text"]
    # Greedy partials of final frames only grow: each is a prefix of the next.
    texts = [p["text"] for p in partials]
    assert all(b.startswith(a.rstrip()) for a, b in zip(texts, texts[1:], strict=False))


def test_window_session_keeps_its_window_bounded_and_commits_words(random_recognizer):
    recognizer = random_recognizer(SMALL)
    session = LiveSession(recognizer, 16000, "window", LiveSettings(every_s=0.25, window_s=1.0))
    pcm = pcm16(noise(4.0, seed=4))
    partials = [session.feed(pcm[i:i + 1600]) for i in range(0, len(pcm), 1600)]
    assert sum(p is not None for p in partials) == 16  # one per 0.25 s of audio
    assert session._window.numel() <= 1.25 * 16000
    assert session._window_start > 0
    assert session.finish()["type"] == "final"


def test_a_session_ended_before_any_audio_is_refused_as_a_client_error(random_recognizer):
    session = LiveSession(random_recognizer(SMALL), 16000, "window")
    with pytest.raises(ClientError, match="no audio received") as refused:
        session.finish()
    assert refused.value.status == 422


def test_binding_beyond_loopback_is_logged_as_a_warning(monkeypatch, caplog, random_recognizer):
    import uvicorn

    from deepspeech.inference.server import create_app, serve

    calls = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: calls.append(kw))
    app = create_app(random_recognizer(SMALL))
    with caplog.at_level(logging.INFO, logger="deepspeech.inference.server"):
        serve(app, "127.0.0.1", 8123)
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
        serve(app, "0.0.0.0", 8123)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "0.0.0.0: reachable from other machines" in warnings[0]
    assert [c["host"] for c in calls] == ["127.0.0.1", "0.0.0.0"]
