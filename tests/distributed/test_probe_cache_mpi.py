"""The pre-flight on two ranks: the files split between them, one verdict, a cache reused;
a stop request during it ends every rank at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from deepspeech.data.synth.tones import write_tone_corpus
from tests.distributed.conftest import HERE, mpirun_path

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


def test_sigusr1_during_the_pre_flight_ends_every_rank_at_once(tmp_path):
    mpirun = mpirun_path()
    if mpirun is None:
        pytest.skip("mpirun not found")
    tones = write_tone_corpus(tmp_path / "corpus", 8, seed=0, name="tones")
    lines = tones.read_text().splitlines()
    train = tmp_path / "corpus" / "train.jsonl"
    with train.open("w") as manifest:  # 256 files to probe: hard links to 8
        for i in range(256):
            entry = json.loads(lines[i % 8])
            os.link(tmp_path / "corpus" / entry["audio_filepath"], tmp_path / f"{i}.flac")
            manifest.write(json.dumps({**entry, "audio_filepath": str(tmp_path / f"{i}.flac")})
                           + "\n")
    config = tmp_path / "empty.yaml"
    config.write_text("{}\n")
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    # 128 files a rank, 8 threads, 2 s a probe: each rank's pre-flight takes 32 s or more.
    command = [mpirun, *root, "-n", "2", sys.executable, str(HERE / "_worker_probe_cache.py"),
               "--slow", "2", str(tmp_path), "train", "-c", str(config),
               f"data.train_manifest={train}", f"train.output_dir={tmp_path / 'run'}",
               "data.num_workers=0", "train.num_threads=1", "distributed.timeout_s=60"]
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env={**os.environ, "OMPI_MCA_btl": "^ofi"})
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("probing*"))) < 2:  # both ranks are probing
        assert job.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    start = time.monotonic()
    job.send_signal(signal.SIGUSR1)  # mpirun forwards it to every rank
    output, _ = job.communicate(timeout=120)
    assert time.monotonic() - start < 15, output[-3000:]
    assert job.returncode != 0
    assert "SIGUSR1 before the first step: stopped at once, nothing to save" in output, \
        output[-3000:]
    assert "stopping after this step" not in output
    assert not (tmp_path / "run" / "last.pt").exists()
