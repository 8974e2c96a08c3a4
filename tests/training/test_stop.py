"""A stop request (Ctrl-C, SIGTERM, SIGUSR1) ends training after the step, with last.pt there;
before the first step, at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from deepspeech.config import load_config
from deepspeech.data.workers import init_data_worker
from deepspeech.training.checkpoint import load_checkpoint
from deepspeech.training.determinism import state_dict_digest
from deepspeech.training.stop import StopRequests, nothing_to_save
from deepspeech.training.trainer import train
from tests.conftest import StopAtStep

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_stopped_run_resumes_to_the_bits_of_one_never_stopped(tiny_corpus, tiny_overrides,
                                                                tmp_path):
    whole = train(load_config(None, tiny_overrides(tiny_corpus, tmp_path / "whole")))
    reference = state_dict_digest(load_checkpoint(tmp_path / "whole" / "last.pt").model)

    # Step 5 is mid-epoch and between the run's every-2-steps checkpoints.
    stopped = train(load_config(None, tiny_overrides(tiny_corpus, tmp_path / "cut")),
                    stop=StopAtStep(5))
    assert (stopped.steps, stopped.stopped_by) == (5, "SIGINT")
    assert load_checkpoint(tmp_path / "cut" / "last.pt").state.step == 5
    resumed = train(load_config(None, [*tiny_overrides(tiny_corpus, tmp_path / "cut"),
                                       f"train.resume={tmp_path / 'cut' / 'last.pt'}"]))
    assert resumed.steps == whole.steps and resumed.stopped_by is None
    assert state_dict_digest(load_checkpoint(tmp_path / "cut" / "last.pt").model) == reference


@pytest.mark.slow
def test_a_stop_asked_in_the_last_step_leaves_a_finished_run(tiny_corpus, tiny_overrides,
                                                             tmp_path):
    config = load_config(None, tiny_overrides(tiny_corpus, tmp_path))
    whole = train(config, stop=StopAtStep(10**6))
    again = train(config, overwrite=True, stop=StopAtStep(whole.steps))
    assert (again.steps, again.stopped_by) == (whole.steps, None)


def test_data_workers_from_a_fork_server_outlive_the_signals_that_stop_training():
    # As after CUDA, where the workers do not inherit the training process's handlers;
    # a cluster's SIGTERM reaches every process of the job, Ctrl-C the process group.
    loader = DataLoader(TensorDataset(torch.arange(6)), num_workers=1, prefetch_factor=1,
                        multiprocessing_context="forkserver",
                        worker_init_fn=init_data_worker)
    batches = iter(loader)
    first = next(batches)
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        os.kill(batches._workers[0].pid, number)
    assert [int(b[0]) for b in [first, *batches]] == list(range(6))


def test_the_second_signal_stops_at_once():
    with StopRequests() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested and stop.signal_name == "SIGTERM"
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


@pytest.mark.slow
def test_ctrl_c_on_the_command_line_saves_the_step_it_stopped_at(tiny_corpus, tiny_overrides,
                                                                 interrupted_training, tmp_path):
    config = tmp_path / "empty.yaml"
    config.write_text("{}\n")
    # Two loader workers: a Ctrl-C reaches them too and must not kill them.
    command = [sys.executable, "-m", "deepspeech", "train", "-c", str(config),
               *tiny_overrides(tiny_corpus, tmp_path / "run"), "train.epochs=1000",
               "data.num_workers=2"]
    status, output = interrupted_training(command, tmp_path / "run" / "metrics.jsonl",
                                          signal.SIGINT, cwd=ROOT)
    assert status == 130, output[-2000:]
    step = load_checkpoint(tmp_path / "run" / "last.pt").state.step
    assert f"stopped by SIGINT at step {step}; continue with train.resume=" in output
    assert "Traceback" not in output


def test_nothing_to_save_stops_at_once_and_only_inside():
    with StopRequests(), pytest.raises(KeyboardInterrupt, match="SIGTERM before the first step"), \
            nothing_to_save():
        os.kill(os.getpid(), signal.SIGTERM)
        pytest.fail("the signal did not stop the block")
    with StopRequests() as stop:
        with nothing_to_save():
            pass
        os.kill(os.getpid(), signal.SIGTERM)  # after it: after the step, as before
        assert stop.requested
        with pytest.raises(KeyboardInterrupt, match="SIGTERM before the first step"), \
                nothing_to_save():
            pytest.fail("a request made before the block did not stop it as it began")
    with nothing_to_save():  # no StopRequests in force: nothing changes
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def _wait_for(paths: Callable[[], list], count: int, job: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while len(paths()) < count:
        assert job.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)


@pytest.mark.slow
def test_sigterm_during_the_pre_flight_stops_at_once(tiny_corpus, tiny_overrides, tmp_path):
    # 48 training files, 8 threads, 4 s a probe: a pre-flight of 24 s or more.
    config = tmp_path / "empty.yaml"
    config.write_text("{}\n")
    command = [sys.executable, str(ROOT / "tests" / "distributed" / "_worker_probe_cache.py"),
               "--slow", "4", str(tmp_path), "train", "-c", str(config),
               *tiny_overrides(tiny_corpus, tmp_path / "run")]
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           cwd=ROOT)
    _wait_for(lambda: list(tmp_path.glob("probing*")), 1, job)
    start = time.monotonic()
    job.send_signal(signal.SIGTERM)
    output, _ = job.communicate(timeout=120)
    assert time.monotonic() - start < 15, output[-2000:]
    assert job.returncode == 130, output[-2000:]
    assert "SIGTERM before the first step: stopped at once, nothing to save yet" in output
    assert "stopping after this step" not in output and "Traceback" not in output
    assert not (tmp_path / "run" / "last.pt").exists()


@pytest.mark.parametrize(("world", "number", "promise"), [
    ("1", signal.SIGTERM, True), ("2", signal.SIGUSR1, True), ("2", signal.SIGTERM, False)])
def test_a_save_is_promised_only_where_mpirun_will_not_end_the_job_first(
        monkeypatch, caplog, world, number, promise):
    # Open MPI's mpirun kills every rank a moment after forwarding SIGTERM or SIGINT, so
    # "saving last.pt" would be a promise the run cannot keep; SIGUSR1 it only forwards.
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", world)
    with StopRequests() as stop:
        signal.raise_signal(number)
    assert stop.requested
    assert ("saving last.pt there" in caplog.text) is promise
    assert ("kill -USR1 <mpirun pid>" in caplog.text) is not promise
