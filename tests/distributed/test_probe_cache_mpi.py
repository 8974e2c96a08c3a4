"""The pre-flight on two ranks: the files split between them, one verdict, a cache reused."""

from __future__ import annotations

import json

import pytest

from deepspeech.data.synth.tones import write_tone_corpus

pytestmark = pytest.mark.mpi


def test_two_ranks_share_the_probes_and_agree(tmp_path, run_job):
    train = write_tone_corpus(tmp_path / "corpus", 16, seed=0, name="train")
    val = write_tone_corpus(tmp_path / "corpus", 5, seed=1, name="val")
    broken = tmp_path / "corpus" / "train003.flac"
    broken.write_bytes(broken.read_bytes()[:200])
    overrides = [f"data.train_manifest={train}", f"data.val_manifest={val}",
                 "data.bad_input=skip"]
    env = {"DEEPSPEECH_CACHE_DIR": str(tmp_path / "cache")}
    runs = []
    for name in ("cold", "warm"):
        out = tmp_path / name
        out.mkdir()
        job = run_job("_worker_probe_cache.py", 2, str(out), *overrides, env=env)
        assert job.returncode == 0, job.output
        runs.append([json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)])
    cold, warm = runs
    # Cold: 16 training and 5 validation files (decoded under skip), split, none twice.
    opened = cold[0]["opened"] + cold[1]["opened"]
    assert len(opened) == 21 and len(set(opened)) == 21
    assert 0 < len(cold[0]["opened"]) < 21
    assert str(broken) not in cold[0]["train"]
    for rank in cold + warm:
        for key in ("summary", "train", "validation"):
            assert rank[key] == cold[0][key]
    assert len(cold[0]["train"]) == 15 and cold[0]["summary"]["utterances"] == 15
    # Warm: nothing opened again, on either rank.
    assert warm[0]["opened"] == warm[1]["opened"] == []
