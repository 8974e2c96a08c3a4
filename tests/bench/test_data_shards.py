"""``deepspeech bench data --shards``: loose files against shards under a slow open."""

from __future__ import annotations

import json

from deepspeech.cli import main
from deepspeech.data.manifest import read_manifest


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


def test_a_linked_corpus_is_kept_and_measured_in_shards_only(tmp_path, capsys):
    assert main(["bench", "data", "--shards", "--shard-utterances", "30", "--shard-sources", "4",
                 "--shard-mb", "0.1", "--shards-only", "--folder", str(tmp_path), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result["results"]) == {"shards, 0 ms per open", "shards, 5 ms per open"}
    links = sorted((tmp_path / "loose" / "links").iterdir())
    assert len(links) == 30 and all(link.is_symlink() for link in links)
    assert len({link.resolve() for link in links}) == 4
    assert len(read_manifest(tmp_path / "shards" / "manifest.jsonl")) == 30
    for run in result["results"].values():
        assert 0 < run["files_opened"] <= result["workers"] * result["shards"]
