"""``deepspeech bench allreduce`` without mpirun: sizes, bandwidths and option checks."""

from __future__ import annotations

import argparse

import pytest

from deepspeech.bench.allreduce import add_arguments
from deepspeech.bench.allreduce.sizes import bus_bandwidth, format_size, parse_size, parse_sizes


def test_sizes_parse_like_the_documentation() -> None:
    assert parse_size("4K") == 4096 and parse_size("64M") == 64 << 20
    assert parse_size("1G") == 1 << 30 and parse_size("3000") == 3000
    assert parse_size("256MiB") == 256 << 20
    assert parse_sizes("4K-32K") == [4096, 8192, 16384, 32768]
    assert parse_sizes("3000-8K") == [3000, 4096, 8192]
    assert parse_sizes("4K,1M,3000") == [4096, 1 << 20, 3000]
    for bad in ("", "4X", "8K-4K", "0-4K", "4K,,-1"):
        with pytest.raises(ValueError):
            parse_sizes(bad)
    assert format_size(4096) == "4K" and format_size(256 << 20) == "256M"
    assert format_size(3000) == "3000"


def test_bus_bandwidth_follows_nccl_tests() -> None:
    algbw, busbw = bus_bandwidth(8 * 10**9, 2.0, 8)
    assert algbw == pytest.approx(4.0) and busbw == pytest.approx(7.0)


def test_benchmark_options() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--sizes", "4K,8K", "--backends", "ring,mpi", "--json"])
    assert args.sizes == [4096, 8192] and args.backends == ["ring", "mpi"]
    assert args.json and args.repeats == 20
    assert parser.parse_args([]).sizes == parse_sizes("4K-256M")


@pytest.mark.parametrize("argv, message", [
    (["--sizes", "abc"], "argument --sizes: not a size: 'abc'"),
    (["--backends", "ring,foo"], "argument --backends: unknown backend 'foo'"),
    (["--backends", "ring@abc"], "argument --backends: 'ring@abc': not a size"),
    (["--backends", "ring-only@0"], "'ring-only@0': the segment must be positive"),
    (["--backends", "mpi@4K"], "'mpi@4K': only our own backends take @SEGMENT"),
    (["--backends", ","], "argument --backends: no backend named"),
])
def test_benchmark_names_and_sizes_are_checked_before_any_rank_starts(argv, message, capsys):
    """A typo used to surface as a traceback on every rank, or as 1-element segments."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
