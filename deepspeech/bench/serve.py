"""``deepspeech bench serve``: load on a running ``deepspeech serve``: concurrent POSTs,
then live streams.

    deepspeech serve --checkpoint runs/an4/best.pt &
    deepspeech bench serve --manifest data/an4/dev.jsonl [--clients 16 --seconds 60]
        [--streams 4 --stream-seconds 60] [--url http://127.0.0.1:8000] [--json out.json]

1. HTTP: ``--clients`` threads post the manifest's utterances (each from its own place in
   the manifest, round and round) to ``POST /transcribe`` for ``--seconds``: throughput in
   audio seconds per wall second, latency p50/p95, errors by status.
2. WebSocket: ``--streams`` concurrent streams, each sending utterances as 16 kHz PCM in
   100 ms chunks in real time (a chunk leaves when its audio would have been recorded) for
   ``--stream-seconds``: the delay of each partial behind the audio it covers (its arrival
   minus the moment its last sample was "spoken"), p50/p95, and of the final after the end.

The client runs on the same machine as the server unless ``--url`` says otherwise, and
takes some of its CPU: say so beside the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlparse

import numpy as np

from deepspeech.arguments import (
    non_negative_float,
    non_negative_int,
    output_file,
    positive_float,
    positive_int,
)
from deepspeech.data.audio import load_audio
from deepspeech.data.manifest import read_manifest
from deepspeech.errors import DeepSpeechError
from deepspeech.files import atomic_write


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) by nearest rank; nan when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


def load_utterances(manifest: str, limit: int | None) -> list[tuple[str, bytes, float]]:
    """``(name, file bytes, duration)`` of the manifest's utterances."""
    utterances = read_manifest(manifest)[:limit]
    return [(Path(u.audio_filepath).name, Path(u.audio_filepath).read_bytes(), u.duration)
            for u in utterances]


def post_once(host: str, port: int, name: str, content: bytes) -> int:
    """POST one file to ``/transcribe`` as a multipart form; the response's status."""
    boundary = uuid.uuid4().hex
    body = (f'--{boundary}\r\nContent-Disposition: form-data; name="audio"; filename="{name}"'
            f"\r\nContent-Type: application/octet-stream\r\n\r\n").encode() + content + \
        f"\r\n--{boundary}--\r\n".encode()
    connection = http.client.HTTPConnection(host, port, timeout=300)
    try:
        connection.request("POST", "/transcribe", body=body,
                           headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def bench_http(host: str, port: int, utterances: list, clients: int, seconds: float) -> dict:
    """``clients`` threads posting for ``seconds``."""
    latencies: list[float] = []
    audio = [0.0]
    errors: dict[str, int] = {}
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def client(index: int) -> None:
        position = index * len(utterances) // clients
        while time.monotonic() < stop_at:
            name, content, duration = utterances[position % len(utterances)]
            position += 1
            begin = time.monotonic()
            try:
                status = post_once(host, port, name, content)
            except OSError as exc:
                status = type(exc).__name__
            elapsed = time.monotonic() - begin
            with lock:
                if status == 200:
                    latencies.append(elapsed)
                    audio[0] += duration
                else:
                    errors[str(status)] = errors.get(str(status), 0) + 1

    start = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.monotonic() - start
    return {"clients": clients, "seconds": round(wall, 1), "requests": len(latencies),
            "audio_s": round(audio[0], 1),
            "throughput_audio_s_per_s": round(audio[0] / wall, 2),
            "latency_p50_s": round(percentile(latencies, 0.5), 3),
            "latency_p95_s": round(percentile(latencies, 0.95), 3),
            "latency_mean_s": round(statistics.fmean(latencies), 3) if latencies else None,
            "errors": errors}


async def one_stream(url: str, waves: list[np.ndarray], stop_at: float, chunk_s: float,
                     result: dict) -> None:
    """Stream utterances in real time, one connection per utterance, until ``stop_at``."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    index = result["first"]
    while time.monotonic() < stop_at:
        pcm = waves[index % len(waves)]
        index += 1
        step = int(16000 * chunk_s)
        try:
            async with connect(f"{url}/stream?rate=16000", max_size=2**24) as ws:
                first = json.loads(await ws.recv())
                if first["type"] != "ready":  # refused (the server is full)
                    result["errors"].append(first.get("error", first["type"]))
                    await asyncio.sleep(0.5)
                    continue
                start = time.monotonic()

                async def listen(start: float) -> float:
                    try:
                        return await receive(start)
                    except ConnectionClosed as exc:
                        result["errors"].append(f"closed {exc.rcvd.code if exc.rcvd else ''}")
                        return time.monotonic()

                async def receive(start: float) -> float:
                    async for message in ws:
                        data = json.loads(message)
                        now = time.monotonic()
                        if data["type"] == "partial":
                            result["delays"].append(now - (start + data["audio_s"]))
                        elif data["type"] == "final":
                            return now
                        else:
                            result["errors"].append(data.get("error", data["type"]))
                    return time.monotonic()

                listener = asyncio.create_task(listen(start))
                for number, begin in enumerate(range(0, len(pcm), step)):
                    # A chunk leaves when its last sample would have been recorded.
                    await asyncio.sleep(max(0.0, start + (number + 1) * chunk_s - time.monotonic()))
                    if listener.done():  # closed by the server
                        break
                    await ws.send(pcm[begin:begin + step].tobytes())
                if listener.done():
                    await listener
                    continue
                ended = time.monotonic()
                await ws.send(json.dumps({"type": "end"}))
                result["final_delays"].append(await listener - ended)
                result["audio_s"] += len(pcm) / 16000
        except Exception as exc:  # noqa: BLE001 (counted and reported, the run goes on)
            result["errors"].append(f"{type(exc).__name__}: {exc}")


async def bench_streams(url: str, waves: list[np.ndarray], streams: int, seconds: float,
                        chunk_s: float) -> dict:
    """``streams`` concurrent real-time streams for ``seconds``: delays and errors."""
    results = [{"first": i * len(waves) // streams, "delays": [], "final_delays": [],
                "errors": [], "audio_s": 0.0} for i in range(streams)]
    stop_at = time.monotonic() + seconds
    await asyncio.gather(*(one_stream(url, waves, stop_at, chunk_s, r) for r in results))
    delays = [d for r in results for d in r["delays"]]
    finals = [d for r in results for d in r["final_delays"]]
    errors = [e for r in results for e in r["errors"]]
    return {"streams": streams, "seconds": seconds, "chunk_ms": round(1000 * chunk_s),
            "audio_s": round(sum(r["audio_s"] for r in results), 1),
            "partials": len(delays),
            "partial_delay_p50_s": round(percentile(delays, 0.5), 3),
            "partial_delay_p95_s": round(percentile(delays, 0.95), 3),
            "final_delay_p50_s": round(percentile(finals, 0.5), 3),
            "final_delay_p95_s": round(percentile(finals, 0.95), 3),
            "errors": len(errors), "error_examples": errors[:3]}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``deepspeech bench serve``."""
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--manifest", required=True)
    parser.add_argument("--clients", type=non_negative_int, default=16,
                        help="concurrent POST clients (0: no HTTP load)")
    parser.add_argument("--seconds", type=non_negative_float, default=60.0)
    parser.add_argument("--streams", type=non_negative_int, default=4,
                        help="concurrent WebSocket streams (0: none)")
    parser.add_argument("--stream-seconds", type=non_negative_float, default=60.0)
    parser.add_argument("--chunk-ms", type=positive_float, default=100.0)
    parser.add_argument("--limit", type=positive_int, default=None, help="first N utterances only")
    parser.add_argument("--json", type=output_file, help="write the figures here too")


def _health(host: str, port: int, url: str) -> dict:
    """The server's ``/health``; refused by name when nothing answers at ``url``."""
    connection = http.client.HTTPConnection(host, port, timeout=10)
    try:
        connection.request("GET", "/health")
        return json.loads(connection.getresponse().read())
    except OSError as exc:
        raise DeepSpeechError(f"no server answers at {url} ({exc}); start one with "
                              "'deepspeech serve --checkpoint ...' or give --url") from None
    finally:
        connection.close()


def run(args: argparse.Namespace) -> int:
    """Load the server, print progress to stderr and the figures as JSON."""
    where = urlparse(args.url)
    host, port = where.hostname or "127.0.0.1", where.port or 80
    health = _health(host, port, args.url)
    print(f"server: {health['model'].get('model')}, live {health['live']['mode']}, "
          f"{health['workers']} model threads x {health['torch_threads']} torch threads",
          file=sys.stderr)
    utterances = load_utterances(args.manifest, args.limit)
    figures: dict = {"server": {"model": health["model"].get("model"),
                                "live_mode": health["live"]["mode"],
                                "workers": health["workers"],
                                "torch_threads": health["torch_threads"]}}
    if args.clients and args.seconds:
        figures["http"] = bench_http(host, port, utterances, args.clients, args.seconds)
        print(json.dumps(figures["http"]), file=sys.stderr)
    if args.streams and args.stream_seconds:
        waves = [(load_audio(u.audio_filepath, 16000).numpy() * 32767).astype("<i2")
                 for u in read_manifest(args.manifest)[:args.limit]]
        ws_url = f"{'wss' if where.scheme == 'https' else 'ws'}://{host}:{port}"
        figures["stream"] = asyncio.run(bench_streams(ws_url, waves, args.streams,
                                                      args.stream_seconds,
                                                      args.chunk_ms / 1000))
        print(json.dumps(figures["stream"]), file=sys.stderr)
    print(json.dumps(figures, indent=2))
    if args.json:
        with atomic_write(args.json, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(figures, indent=2) + "\n")
    return 0
