"""``deepspeech bench serve`` against a real server: both loads run and are counted."""

from __future__ import annotations

import json

import pytest

from deepspeech.cli import main
from tests.inference.conftest import _free_port, _serving


def test_without_a_server_it_names_the_url(tmp_path, capsys):
    url = f"http://127.0.0.1:{_free_port()}"
    assert main(["bench", "serve", "--url", url, "--manifest", str(tmp_path / "m.jsonl")]) == 2
    assert f"deepspeech bench: error: no server answers at {url}" in capsys.readouterr().err


@pytest.mark.slow  # starts a server
def test_posts_and_streams_are_measured_and_written(tiny_checkpoint, tiny_corpus, tmp_path,
                                                    capsys):
    figures_file = tmp_path / "figures" / "serve.json"
    with _serving(tiny_checkpoint, tmp_path / "server.log", ["--workers", "1"]) as port:
        assert main(["bench", "serve", "--url", f"http://127.0.0.1:{port}", "--manifest",
                     str(tiny_corpus["val"]), "--limit", "3", "--clients", "2", "--seconds",
                     "1", "--streams", "1", "--stream-seconds", "1", "--chunk-ms", "200",
                     "--json", str(figures_file)]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures == json.loads(figures_file.read_text())
    assert figures["server"]["workers"] == 1
    assert figures["http"]["clients"] == 2 and figures["http"]["errors"] == {}
    assert figures["http"]["requests"] > 0 and figures["http"]["audio_s"] > 0
    assert figures["stream"]["streams"] == 1 and figures["stream"]["errors"] == 0
    assert figures["stream"]["audio_s"] > 0
