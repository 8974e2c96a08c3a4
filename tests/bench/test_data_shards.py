"""``deepspeech bench data --shards``: loose files against shards under a slow open."""

from __future__ import annotations

import json

from deepspeech.cli import main


def test_shards_open_each_file_once_per_worker(capsys):
    assert main(["bench", "data", "--shards", "--shard-utterances", "40", "--shard-mb", "0.2",
                 "--open-latency-ms", "2", "--workers", "2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["utterances"] == 40 and result["shards"] > 1
    runs = result["results"]
    assert set(runs) == {f"{kind}, {ms} ms per open" for kind in ("loose", "shards")
                         for ms in (0, 2)}
    for ms in (0, 2):
        assert runs[f"loose, {ms} ms per open"]["files_opened"] == 40  # FLAC: one open each
        assert 0 < runs[f"shards, {ms} ms per open"]["files_opened"] <= 2 * result["shards"]
        assert all(run["x_real_time"] > 0 for run in runs.values())
