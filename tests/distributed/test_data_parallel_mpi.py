"""Data-parallel training under real mpirun: bitwise results across runs and world sizes."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from deepspeech.config import load_config
from deepspeech.data.sampler import build_sampler
from deepspeech.training.checkpoint import load_checkpoint
from deepspeech.training.determinism import state_dict_digest
from deepspeech.training.metrics import read_metrics

pytestmark = [pytest.mark.mpi, pytest.mark.slow]


def train_job(run_job, corpus, overrides, output_dir, ranks: int, *extra: str):
    args = ["train", "-c", str(corpus["config"]), *overrides(corpus, output_dir),
            "distributed.timeout_s=60", *extra]
    job = run_job("-m deepspeech", ranks, *args, timeout=600)
    assert job.returncode == 0, job.output[-3000:]
    state = load_checkpoint(output_dir / "last.pt")
    return state_dict_digest(state.model), state, job.output


@pytest.fixture(scope="module")
def corpus(tiny_corpus, tmp_path_factory):
    config = tmp_path_factory.mktemp("config") / "empty.yaml"
    config.write_text("{}\n")
    return {**tiny_corpus, "config": config}


def test_deterministic_mode_gives_the_same_bits_for_1_2_and_4_processes(
        run_job, corpus, tiny_overrides, with_nan_audio, tmp_path):
    # Global feature statistics too, each rank reading its share of the utterances, and an
    # utterance that fails to decode, skipped: a micro-batch of one that comes out empty.
    manifest = with_nan_audio(corpus["train"], 5, tmp_path / "data")
    extra = ("distributed.deterministic=true", "train.micro_batch_size=1", "train.epochs=1",
             "features.normalize=global", f"data.train_manifest={manifest}",
             "data.bad_input=skip")
    digests, stats = {}, {}
    for ranks in (1, 2, 4):
        digests[ranks], state, output = train_job(run_job, corpus, tiny_overrides,
                                                  tmp_path / f"n{ranks}", ranks, *extra)
        assert state.state.step == 6
        assert output.count("computing global feature statistics on 48 utterances") == 1
        assert output.count("skipping an utterance (data.bad_input: skip)") == 1
        stats[ranks] = torch.cat([state.feature_stats["mean"], state.feature_stats["std"]])
    assert digests[1] == digests[2] == digests[4]
    assert torch.equal(stats[1], stats[2]) and torch.equal(stats[1], stats[4])


def test_default_mode_is_bitwise_reproducible_at_a_given_world_size(
        run_job, corpus, tiny_overrides, with_nan_audio, tmp_path):
    # With a skipped utterance whose micro-batch comes out empty on one rank only.
    manifest = with_nan_audio(corpus["train"], 5, tmp_path / "data")
    extra = (f"data.train_manifest={manifest}", "data.bad_input=skip",
             "train.micro_batch_size=1")
    first, state, _ = train_job(run_job, corpus, tiny_overrides, tmp_path / "a", 2, *extra)
    second, _, _ = train_job(run_job, corpus, tiny_overrides, tmp_path / "b", 2, *extra)
    assert first == second
    assert state.state.step == 12
    assert len(state.rng) == 2  # every rank's RNG state, for an exact resume


def test_ranks_that_disagree_on_the_config_fail_at_start(corpus, tiny_overrides, tmp_path):
    mpirun = shutil.which("mpirun", path=str(Path(sys.executable).parent)) or shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun not found")
    base = [sys.executable, "-m", "deepspeech", "train", "-c", str(corpus["config"]),
            *tiny_overrides(corpus, tmp_path), "distributed.timeout_s=20"]
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    # MPMD launch: rank 0 and rank 1 get different model widths.
    command = [mpirun, *root, "-n", "1", *base, "model.rnn.hidden=24", ":",
               "-n", "1", *base, "model.rnn.hidden=32"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OMPI_MCA_btl": "^ofi"})
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert "resolved config" in output and "differ" in output, output[-2000:]
    assert "keys that differ: model.rnn.hidden (rank 0: 24; rank 1: 32) (" in output, \
        output[-2000:]
    assert not (tmp_path / "last.pt").exists()


def endless_two_rank_training(corpus, overrides, output_dir: Path, *extra: str) -> list[str]:
    """The command of a 2-rank training under mpirun that runs until stopped."""
    mpirun = shutil.which("mpirun", path=str(Path(sys.executable).parent)) or shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun not found")
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    return [mpirun, *root, "-n", "2", sys.executable, "-m", "deepspeech", "train", "-c",
            str(corpus["config"]), *overrides(corpus, output_dir), "train.epochs=1000", *extra]


def test_sigusr1_to_mpirun_stops_every_rank_after_the_same_step(corpus, tiny_overrides,
                                                                interrupted_training, tmp_path):
    command = endless_two_rank_training(corpus, tiny_overrides, tmp_path,
                                        "distributed.timeout_s=60")
    # mpirun forwards SIGUSR1 to the ranks; its own SIGINT and SIGTERM kill the job.
    _, output = interrupted_training(command, tmp_path / "metrics.jsonl", signal.SIGUSR1,
                                     env={**os.environ, "OMPI_MCA_btl": "^ofi"})
    assert output.count("SIGUSR1: stopping after this step") == 2, output[-3000:]
    step = load_checkpoint(tmp_path / "last.pt").state.step
    assert f"stopped by SIGUSR1 at step {step}" in output
    assert "MPI_ABORT" not in output and "Traceback" not in output


def test_a_deterministic_run_resumes_bit_for_bit_on_another_process_count(
        run_job, corpus, tiny_overrides, tmp_path):
    """Written by 2 processes, finished by 1: the bits of a run that never stopped.

    A constant rate, so that stopping early with ``train.max_steps`` leaves the
    schedule alone. Before, the resume failed on the missing RNG state of rank 1.
    """
    extra = ("distributed.deterministic=true", "train.micro_batch_size=2", "train.epochs=1",
             "optim.schedule=constant", "optim.warmup_steps=0")
    whole, _, _ = train_job(run_job, corpus, tiny_overrides, tmp_path / "whole", 1, *extra)
    two = run_job("-m deepspeech", 2, "train", "-c", str(corpus["config"]),
                  *tiny_overrides(corpus, tmp_path / "two"), *extra, "train.max_steps=3",
                  timeout=600)
    assert two.returncode == 0, two.output[-3000:]
    # what every rank finds alike is said once, by rank 0
    assert two.output.count("data parallel over 2 processes") == 1, two.output[-3000:]
    resumed = tmp_path / "one"
    job = run_job("-m deepspeech", 1, "train", "-c", str(corpus["config"]),
                  *tiny_overrides(corpus, resumed), *extra,
                  f"train.resume={tmp_path / 'two' / 'last.pt'}", timeout=600)
    assert job.returncode == 0, job.output[-3000:]
    assert "written by 2 process(es), this run has 1; distributed.deterministic keeps the bits" \
        in job.output
    state = load_checkpoint(resumed / "last.pt")
    assert state.state.step == 6 and state_dict_digest(state.model) == whole


def test_batches_by_audio_give_the_same_bits_for_1_and_3_processes(
        run_job, corpus, tiny_overrides, tmp_path):
    """Batches of 2-5 utterances in micro-batches of 2: in most steps one of 3 ranks has
    nothing to compute and still joins the gradient sum (with zeros)."""
    extra = ("distributed.deterministic=true", "train.micro_batch_size=2", "train.epochs=1",
             "train.batch_seconds=3.0", "data.val_manifest=")
    with open(corpus["train"], encoding="utf-8") as manifest:
        durations = [json.loads(line)["duration"] for line in manifest]
    config = load_config(None, list(extra), check_files=False)
    idle = [not items for items in build_sampler(config.train, durations, 2, 3)]
    assert sum(idle) >= 5
    one, state, _ = train_job(run_job, corpus, tiny_overrides, tmp_path / "n1", 1, *extra)
    three, _, _ = train_job(run_job, corpus, tiny_overrides, tmp_path / "n3", 3, *extra)
    assert state.state.step == len(idle)
    assert one == three


def _rank_pid(launcher: int, rank: str) -> int | None:
    """The pid of ``rank`` among the children of ``launcher`` (mpirun), from /proc."""
    children = Path(f"/proc/{launcher}/task/{launcher}/children")
    for pid in map(int, children.read_text().split()):
        with contextlib.suppress(OSError):
            if f"OMPI_COMM_WORLD_RANK={rank}".encode() in \
                    Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                return pid
    return None


def test_a_frozen_peer_ends_the_job_saying_which_last_pt_is_kept(corpus, tiny_overrides,
                                                                 tmp_path):
    command = endless_two_rank_training(corpus, tiny_overrides, tmp_path,
                                        "train.checkpoint_every=3", "distributed.timeout_s=3")
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           start_new_session=True, env={**os.environ, "OMPI_MCA_btl": "^ofi"})
    try:
        deadline = time.monotonic() + 120
        while not ((tmp_path / "last.pt").exists() and len(read_metrics(
                tmp_path / "metrics.jsonl")) >= 5):
            assert job.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        frozen = _rank_pid(job.pid, "1")
        assert frozen is not None
        os.kill(frozen, signal.SIGSTOP)
        output, _ = job.communicate(timeout=90)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    assert job.returncode != 0, output[-3000:]
    step = load_checkpoint(tmp_path / "last.pt").state.step
    assert re.search(rf"CommTimeoutError at step \d+: last.pt at step {step} kept, \d+ later "
                     r"step\(s\) and the one in flight lost; continue with train.resume=",
                     output), output[-3000:]
    assert "Traceback" not in output and "munmap_chunk" not in output
