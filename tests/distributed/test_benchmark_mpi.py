"""The benchmark runs under mpirun and prints one JSON object per backend and size."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.mpi


def test_benchmark_json(run_job) -> None:
    # ipc on CPU buffers falls back (and says why); with 2 ranks every backend's sum of a
    # random buffer has the same bits (a + b = b + a)
    job = run_job("-m deepspeech", 2, "bench", "allreduce", "--sizes", "4K,1M",
                  "--backends", "ring,ring-only@256K,hierarchical,ipc,mpi,gloo", "--repeats", "2",
                  "--json", "--model", "--check-bitwise", timeout=180)
    assert job.returncode == 0, job.output[-3000:]
    rows = [json.loads(line) for line in job.output.splitlines() if line.startswith("{")]
    table = {(r["backend"], r["bytes"]) for r in rows if "backend" in r}
    for backend in ("ring", "ring-only@256K", "hierarchical", "ipc", "mpi", "gloo"):
        assert {(backend, 4096), (backend, 1 << 20)} <= table, table
    assert ("sendrecv", 1 << 19) in table
    for row in rows:
        if "backend" in row:
            assert row["seconds"] > 0
            assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"])  # 2 ranks: factor 1
    assert any("model" in row for row in rows)
    verdicts = {row["bitwise"]["bytes"]: row["bitwise"]["equal"] for row in rows
                if "bitwise" in row}
    assert verdicts == {4096: True, 1 << 20: True}, verdicts
    assert "no CUDA IPC for cpu tensors" in job.output
