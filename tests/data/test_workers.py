"""Data-loader workers: a dead one is noticed, and none outlives its owner or hangs its exit."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from deepspeech.data.workers import BY_VALUE_BYTES, init_data_worker, loader_batches

ROOT = Path(__file__).resolve().parents[2]
BOUND_S = 60
"""Every process these tests start must end well within this; before the fix it never did."""

LOADER = """
    import os, sys, time
    from torch.utils.data import DataLoader, Dataset
    from deepspeech.data.workers import init_data_worker, loader_batches

    class Slow(Dataset):
        def __len__(self):
            return 100

        def __getitem__(self, index):
            if index:  # the worker is busy with the next items whatever happens meanwhile
                time.sleep(30)
            return os.getpid()

    batches = loader_batches(DataLoader(Slow(), num_workers=1, worker_init_fn=init_data_worker))
    print(next(batches).item(), flush=True)
"""


def _start(script: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _kill_group(job: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(job.pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for a reaper (a container's init may never reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@pytest.mark.slow  # the loader looks at its workers every 5 s while it waits
def test_a_dead_worker_is_noticed_where_the_next_batch_is_awaited(dying_loader):
    previous = signal.getsignal(signal.SIGCHLD)
    try:
        batches = loader_batches(dying_loader)
        # torch's handler would raise the death wherever the main process is, backward
        # included ("is killed by signal"); the default disposition leaves it to the
        # loader's check while it waits for the batch.
        assert signal.getsignal(signal.SIGCHLD) == signal.SIG_DFL
        with pytest.raises(RuntimeError, match=r"^DataLoader worker \(pid\(s\) \d+\) exited "
                                               r"unexpectedly"):
            next(batches)
    finally:
        signal.signal(signal.SIGCHLD, previous)


@pytest.mark.slow
def test_an_error_with_live_workers_ends_the_process():
    """The workers ignore SIGTERM, which multiprocessing sent them at exit and then waited
    for ever: a named error met in training never ended its process."""
    job = _start(LOADER + "    raise SystemExit('stopped by an error while the worker runs')\n")
    try:
        _, error = job.communicate(timeout=BOUND_S)
    finally:
        _kill_group(job)
    assert job.returncode == 1 and "stopped by an error" in error


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_worker_dies_with_its_owner():
    job = _start(LOADER + "    time.sleep(600)\n")
    try:
        worker = int(job.stdout.readline())
        assert _alive(worker)
        job.kill()
        job.wait(BOUND_S)
        deadline = time.monotonic() + 1.0
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _alive(worker)
    finally:
        _kill_group(job)


@pytest.mark.slow
def test_training_that_meets_a_bad_file_ends_with_its_error(tiny_corpus, tiny_overrides,
                                                           with_nan_audio, tmp_path):
    nan = with_nan_audio(tiny_corpus["train"], 3, tmp_path / "nan")
    config = tmp_path / "tiny.yaml"
    config.write_text("train:\n  epochs: 1\n")
    overrides = [*tiny_overrides(tiny_corpus, tmp_path / "run"), f"data.train_manifest={nan}",
                 "data.val_manifest=", "data.num_workers=1", "train.max_steps=2"]
    job = subprocess.run([sys.executable, "-m", "deepspeech", "train", "-c", str(config),
                          *overrides], cwd=ROOT, capture_output=True, text=True,
                         timeout=BOUND_S)
    assert job.returncode == 2
    assert f"{tmp_path / 'nan' / 'bad.wav'}: audio contains NaN" in job.stderr
    assert "Traceback" not in job.stderr


def _tensors(indices: list[int]) -> list[torch.Tensor]:
    count = len(indices)
    return [torch.arange(count, dtype=torch.int64), torch.full((count, 3), 0.5),
            torch.tensor(True), torch.arange(count * 2, dtype=torch.int32).reshape(2, count).t(),
            torch.ones(BY_VALUE_BYTES // 4 + 1), torch.zeros(0, 4, dtype=torch.float16)]


def test_workers_hand_over_small_tensors_by_value_and_large_ones_shared():
    loader = DataLoader(range(8), batch_size=4, num_workers=1, collate_fn=_tensors,
                        worker_init_fn=init_data_worker)
    for indices, batch in zip(([0, 1, 2, 3], [4, 5, 6, 7]), loader_batches(loader), strict=True):
        expected = _tensors(indices)
        for got, want in zip(batch, expected, strict=True):
            assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)
        assert [t.is_shared() for t in batch] == [False, False, False, True, True, False]
