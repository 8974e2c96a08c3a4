"""Cases where a client or a file is hostile: ``deepspeech serve`` under attack on loopback,
and model packages that would hang, leak or poison their loader.

One server (``loopback.Server``: base12 on a free loopback port, short limits) takes every
server case of the part. A case is ok when each hostile request ends in its named refusal
(status or close code, the message naming the flag) or is served, within the bound stated
beside it, and the server still serves afterwards (``loopback.serving_after``). A package
case runs ``deepspeech transcribe`` and ``deepspeech serve`` on a tampered copy of the
drill's package: both must exit 2 within ``PACKAGE_S``, naming the file or tensor.

Each function makes a case: ``case(drill) -> Row``, run by ``fault_drill.py``.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import struct
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import yaml

from .jobs import Job, deepspeech
from .loopback import (
    BODY_TIMEOUT_S,
    SERVED_S,
    SLACK_S,
    STREAM_IDLE_S,
    STREAMS_PER_CLIENT,
    UPLOAD_HEAD,
    UPLOADS_PER_CLIENT,
    Answer,
    Server,
    free_port,
    pcm_bytes,
    post,
    serving_after,
    slow_upload,
    stranger,
    stream,
    until,
    wav_bytes,
)
from .verdicts import Row, judged
from .workspace import Drill

ODD_RATE_S = 5.0  # audio at an odd rate is served within this (it took 60 s and 13 GB)
PACKAGE_S = 30.0  # a tampered package is refused within this, the command's start included
DISCONNECTS = 16


def expect(row: Row, answers: list[Answer], status: int | str, names: str, bound: float,
           what: str) -> None:
    """Every answer is ``status`` within ``bound`` s, its message matching ``names``."""
    for answer in answers:
        if answer.status != status or not re.search(names, answer.said):
            row.problems.append(f"{what}: {answer.status} {answer.said!r}, expected {status} "
                                f"naming /{names}/")
            return
        if answer.seconds > bound:
            row.problems.append(f"{what}: {status} after {answer.seconds:.1f} s, over {bound:g} s")
            return


def answered_row(first: Answer, seconds: float) -> Row:
    return Row(said=first.said, status="-" if first.status is None else first.status,
               seconds=seconds)


# --- places held -------------------------------------------------------------------------

@dataclass(frozen=True)
class Holding:
    """Clients that take the server's places (uploads or streams) and keep them, sending
    slowly or nothing: the server must end each one by its time limit, and meanwhile answer
    one more request as ``meanwhile`` says (served when the holders are other clients,
    refused by the per-client limit when the holder is the same)."""

    places: int
    same_client: bool
    counter: str  # the /health counter of the places held
    time_limit: float  # the server's flag that ends a held place
    hold: Callable[[int, str, float, int], Answer]  # (port, client, bound, index)
    ask: Callable[[int, str], Answer]  # the one more request: (port, client)
    ended: tuple[int, str]  # how each held place ends: status, what the message names
    meanwhile: tuple[int | str, str]  # the one more request's status, what it names


def slow_body(port: int, client: str, bound: float, index: int) -> Answer:
    """Every other one sends 1 byte a second, the others their headers only."""
    return slow_upload(port, client, index % 2 == 0, bound)


def idle_stream(port: int, client: str, bound: float, index: int) -> Answer:
    return stream(port, client, "16000", None, bound)


def ordinary_post(port: int, client: str) -> Answer:
    return post(port, wav_bytes(16000), client)


def ordinary_stream(port: int, client: str) -> Answer:
    return stream(port, client, "16000", pcm_bytes(16000), SERVED_S)


HOLDINGS: dict[str, Holding] = {
    # more than --max-queue: uploads that held their place while arriving starved every POST
    "slow bodies (1 B/s)": Holding(6, False, "arriving", BODY_TIMEOUT_S, slow_body,
                                   ordinary_post, (408, "--body-timeout-s"), (200, "served")),
    "uploads per client": Holding(UPLOADS_PER_CLIENT, True, "arriving", BODY_TIMEOUT_S,
                                  slow_body, ordinary_post, (408, "--body-timeout-s"),
                                  (429, "--max-uploads-per-client")),
    "idle streams": Holding(3, False, "streams", STREAM_IDLE_S, idle_stream, ordinary_stream,
                            (4408, "--stream-idle-s"), ("final", "served")),
    "streams per client": Holding(STREAMS_PER_CLIENT, True, "streams", STREAM_IDLE_S,
                                  idle_stream, ordinary_stream, (4408, "--stream-idle-s"),
                                  (4429, "--max-streams-per-client")),
}


def holding_case(holding: Holding) -> Callable[[Drill, Server], Row]:
    def body(d: Drill, server: Server) -> Row:
        bound, client = holding.time_limit + SLACK_S, stranger()
        clients = [client if holding.same_client else stranger()
                   for _ in range(holding.places)]
        with ThreadPoolExecutor(holding.places) as pool:
            held = [pool.submit(holding.hold, server.port, one, bound + 5, index)
                    for index, one in enumerate(clients)]
            taken = until(lambda: server.count(holding.counter) >= holding.places, bound)
            meanwhile = holding.ask(server.port, client if holding.same_client else stranger())
            answers = [future.result() for future in held]
        if holding.same_client:  # the row shows the refusal of the one too many
            row = answered_row(meanwhile, meanwhile.seconds)
        else:  # the row shows how the held places ended
            row = answered_row(answers[0], max(answer.seconds for answer in answers))
            row.said = f"{answers[0].said} (x{holding.places}; meanwhile {meanwhile.status})"
        if not taken:
            row.problems.append(f"the server never held the {holding.places} places at once")
        expect(row, answers, *holding.ended, bound, "a held place")
        expect(row, [meanwhile], *holding.meanwhile, SERVED_S, "the request meanwhile")
        return row
    return body


# --- odd requests ------------------------------------------------------------------------

def leaves_mid_upload(d: Drill, server: Server) -> Row:
    """DISCONNECTS clients send part of a body and reset the connection: one INFO line
    each, no traceback (checked after every case)."""
    start, offset = time.monotonic(), server.log_size()
    for _ in range(DISCONNECTS):
        with socket.create_connection(("127.0.0.1", server.port), timeout=SERVED_S,
                                      source_address=(stranger(), 0)) as sock:
            sock.sendall(UPLOAD_HEAD + bytes(1000))
            time.sleep(0.05)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    def told() -> list[str]:
        return [line for line in server.log_since(offset).splitlines()
                if "the client left" in line]

    until(lambda: len(told()) >= DISCONNECTS and server.count("arriving") == 0, SERVED_S)
    lines = told()
    said = re.sub(r"^\S+ \w+ [\w.]+: ", "", lines[0]) if lines else "(nothing logged)"
    row = Row(said=said, seconds=time.monotonic() - start)
    if len(lines) != DISCONNECTS:
        row.problems.append(f"{len(lines)} 'the client left' lines for {DISCONNECTS} clients")
    return row


def odd_rate_post(rate: int) -> Callable[[Drill, Server], Row]:
    def body(d: Drill, server: Server) -> Row:
        answer = post(server.port, wav_bytes(rate), stranger(), bound=ODD_RATE_S + SLACK_S)
        row = answered_row(answer, answer.seconds)
        expect(row, [answer], 200, "served", ODD_RATE_S, f"a {rate} Hz WAV")
        return row
    return body


def stream_rate(query: str, refused: bool) -> Callable[[Drill, Server], Row]:
    """A stream asking for ``rate=query``: served within ODD_RATE_S, or refused 4422."""
    def body(d: Drill, server: Server) -> Row:
        audio = None if refused else pcm_bytes(int(query))
        answer = stream(server.port, stranger(), query, audio, ODD_RATE_S + SLACK_S)
        row = answered_row(answer, answer.seconds)
        if refused:
            expect(row, [answer], 4422, r"rate=", SERVED_S, f"rate={query[:16]}")
        else:
            expect(row, [answer], "final", "served", ODD_RATE_S, f"rate={query}")
        return row
    return body


# --- packages ----------------------------------------------------------------------------

def relist(package: Path) -> None:
    """checksums.sha256 written anew over the package's regular files, as a tamperer would
    (a special file keeps the digest it had)."""
    listing = package / "checksums.sha256"
    lines = []
    for line in listing.read_text().splitlines():
        digest, name = line.split("  ", 1)
        path = package / name
        if path.is_file() and not path.is_symlink():
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        lines.append(f"{digest}  {name}\n")
    listing.write_text("".join(lines))


def decode_lm(package: Path, lm: str) -> None:
    path = package / "decode.yaml"
    data = yaml.safe_load(path.read_text())
    data["decode"].update(mode="beam", lm=lm)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    relist(package)


def nan_weights(package: Path) -> str:
    from safetensors.torch import load_file, save_file

    weights = load_file(package / "model.safetensors")
    name = sorted(weights)[-1]
    weights[name].view(-1)[:2] = float("nan")
    save_file(weights, str(package / "model.safetensors"), metadata={"format": "pt"})
    relist(package)
    return name


def other_lm(folder: Path) -> Path:
    """A well-formed ARPA LM outside the package: loaded silently before."""
    path = folder / "other.arpa"
    path.write_text("\\data\\\nngram 1=5\nngram 2=2\n\n\\1-grams:\n-1.0\t<unk>\t0\n"
                    "-99\t<s>\t-0.3\n-1.0\t</s>\t0\n-0.5\tyes\t-0.3\n-0.5\tno\t-0.3\n\n"
                    "\\2-grams:\n-0.3\t<s> yes\n-0.3\tyes no\n\n\\end\\\n")
    return path


def tamper(package: Path, kind: str) -> str:
    """Make the package ``kind`` of hostile; what the refusal must name (a regex)."""
    if kind == "/dev/zero link":
        (package / "feature_stats.json").unlink()
        os.symlink("/dev/zero", package / "feature_stats.json")
        return r"feature_stats\.json: a link to /dev/zero"
    if kind == "FIFO":
        (package / "vocabulary.json").unlink()
        os.mkfifo(package / "vocabulary.json")
        return r"vocabulary\.json: a FIFO"
    if kind == "lm ../etc/passwd":
        decode_lm(package, "../" * len(package.parts) + "etc/passwd")
        return r"decode\.yaml: decode\.lm leads to .*etc/passwd"
    if kind == "lm /absolute":
        decode_lm(package, str(other_lm(package.parent)))
        return r"decode\.yaml: decode\.lm leads to .*other\.arpa"
    return rf"model\.safetensors: weight {re.escape(nan_weights(package))} holds"


PACKAGE_KINDS = ("/dev/zero link", "FIFO", "lm ../etc/passwd", "lm /absolute", "NaN weights")


def package_case(kind: str) -> Callable[[Drill, Server], Row]:
    """``transcribe`` and ``serve`` of a package tampered as ``kind``: each exits 2
    within PACKAGE_S, naming the file or tensor."""
    def body(d: Drill, server: Server) -> Row:
        folder = d.folder(f"hostile package {kind}")
        package = Path(shutil.copytree(d.package, folder / "pkg"))
        names = tamper(package, kind)
        audio = folder / "speech.wav"
        audio.write_bytes(wav_bytes(16000))
        transcribe = Job(deepspeech("transcribe", "--checkpoint", package, audio),
                         folder / "transcribe").finish(PACKAGE_S)
        serve = Job(deepspeech("serve", "--checkpoint", package, "--port", free_port()),
                    folder / "serve").finish(PACKAGE_S)
        row = judged(transcribe, names=names)
        served = judged(serve, names=names)
        row.problems += [f"serve: {problem}" for problem in served.problems]
        row.seconds = max(transcribe.seconds, serve.seconds)
        return row
    return body


def memory_across(d: Drill, server: Server) -> Row:
    """The server's peak resident memory over the whole part, against its bound."""
    peak, bound = server.peak_mb(), server.bound_mb()
    return Row(said=f"peak RSS {peak:.0f} MB; {server.rss_start:.0f} MB once started, "
                    f"bound {bound:.0f} MB", seconds=server.job.elapsed())


def hostile_cases() -> dict[str, Callable[[Drill], Row]]:
    """The part's cases, by name, in the order they run."""
    bodies: dict[str, Callable[[Drill, Server], Row]] = {
        **{f"hostile: {name}": holding_case(holding) for name, holding in HOLDINGS.items()},
        "hostile: client leaves upload": leaves_mid_upload,
        **{f"hostile: POST {rate} Hz": odd_rate_post(rate) for rate in (47999, 7999, 8001)},
        "hostile: stream rate=47999": stream_rate("47999", refused=False),
        "hostile: stream rate=²": stream_rate("%C2%B2", refused=True),
        "hostile: 5000-digit rate": stream_rate("9" * 5000, refused=True),
        **{f"hostile pkg: {kind}": package_case(kind) for kind in PACKAGE_KINDS},
        "hostile: server memory": memory_across,
    }
    return {name: serving_after(body) for name, body in bodies.items()}

