"""The command line: numbers checked where they are parsed, errors in one readable line."""

from __future__ import annotations

import argparse
import errno
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from deepspeech.arguments import (
    finite_float,
    non_negative_float,
    non_negative_int,
    output_file,
    output_folder,
    positive_float,
    positive_int,
)
from deepspeech.cli import build_parser, main
from deepspeech.errors import AudioError, ResourceError, naming_resource_failures, own_message
from deepspeech.training.checkpoint import load_checkpoint


def test_the_types_take_their_range_and_refuse_the_rest():
    assert positive_int("3") == 3 and non_negative_int("0") == 0
    assert positive_float("0.5") == 0.5 and non_negative_float("0") == 0.0
    assert finite_float("-60") == -60.0
    for parse, bad in ((positive_int, "0"), (positive_int, "-2"), (positive_int, "1.5"),
                       (non_negative_int, "-1"), (positive_float, "0"), (positive_float, "nan"),
                       (non_negative_float, "-0.1"), (non_negative_float, "inf"),
                       (finite_float, "nan"), (finite_float, "-inf"), (finite_float, "x")):
        with pytest.raises(argparse.ArgumentTypeError, match=f"got '{bad}'"):
            parse(bad)


@pytest.mark.parametrize("argv, flag, what", [
    (["evaluate", "--checkpoint", "c.pt", "--manifest", "m.jsonl", "--batch-size", "0"],
     "--batch-size", "a positive integer"),
    (["evaluate", "--checkpoint", "c.pt", "--manifest", "m.jsonl", "--workers", "-1"],
     "--workers", "a non-negative integer"),
    (["decode", "tune", "--checkpoint", "c.pt", "--manifest", "m.jsonl", "--lm", "lm.arpa",
      "-o", "d.yaml", "--beam", "0"], "--beam", "a positive integer"),
    (["decode", "tune", "--checkpoint", "c.pt", "--manifest", "m.jsonl", "--lm", "lm.arpa",
      "-o", "d.yaml", "--batch-size", "-4"], "--batch-size", "a positive integer"),
    (["data", "stats", "m.jsonl", "--bins", "0"], "--bins", "a positive integer"),
    (["data", "check", "m.jsonl", "--workers", "0"], "--workers", "a positive integer"),
    (["data", "prepare", "an4", "--root", "an4", "-o", "out", "--workers", "-8"], "--workers",
     "a positive integer"),
    (["transcribe", "--checkpoint", "c.pt", "--window", "0", "a.wav"], "--window",
     "a positive number"),
    (["transcribe", "--checkpoint", "c.pt", "--overlap", "-1", "a.wav"], "--overlap",
     "a non-negative number"),
    (["transcribe", "--checkpoint", "c.pt", "--stream", "--chunk-ms", "0", "a.wav"],
     "--chunk-ms", "a positive number"),
    (["data", "prepare", "an4", "--root", "an4", "-o", "out", "--dev-speakers", "nan"],
     "--dev-speakers", "a non-negative number"),
    (["data", "prepare", "fsdd", "--root", "fsdd", "-o", "out", "--sequences", "-5"],
     "--sequences", "a non-negative integer"),
    (["data", "prepare", "folder", "--root", "mine", "-o", "out", "--test", "-0.1"],
     "--test", "a non-negative number"),
    (["data", "check", "m.jsonl", "--silence-db", "nan"], "--silence-db", "a finite number"),
])
def test_out_of_range_flags_are_refused_by_name(argv, flag, what, capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(argv)
    assert exit_info.value.code == 2
    assert f"argument {flag}: must be {what}" in capsys.readouterr().err


@pytest.mark.parametrize("argv, dest, expected", [
    (["train", "-c", "x.yaml", "a.b=1", "--overwrite", "c.d=2", "e.f=3"], "overrides",
     ["a.b=1", "c.d=2", "e.f=3"]),
    (["plot", "runA", "--compare", "out.png", "runB"], "run_dirs", ["runA", "runB"]),
    (["data", "stats", "a.jsonl", "--bins", "3", "b.jsonl"], "manifests", ["a.jsonl", "b.jsonl"]),
    (["transcribe", "--checkpoint", "c.pt", "a.wav", "--json", "b.wav"], "inputs",
     ["a.wav", "b.wav"]),
    (["evaluate", "--checkpoint", "c.pt", "decode.mode=beam", "--manifest", "m.jsonl",
      "decode.beam_size=8"], "overrides", ["decode.mode=beam", "decode.beam_size=8"]),
    (["transcribe", "--checkpoint", "c.pt", "--", "-x.wav", "b.wav"], "inputs",
     ["-x.wav", "b.wav"]),
])
def test_positional_arguments_may_sit_between_the_flags(argv, dest, expected):
    """Plain argparse refused the second run as 'unrecognized arguments'."""
    args = build_parser().parse_args(argv)
    assert getattr(args, dest) == expected


def test_an_unknown_flag_is_refused_with_the_commands_own_usage(capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["data", "stats", "a.jsonl", "--bogus"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "usage: deepspeech data stats" in err
    assert "deepspeech data stats: error: unrecognized arguments: --bogus" in err


def test_a_benchmark_still_gets_its_own_flags_untouched():
    args = build_parser().parse_args(["bench", "allreduce", "--sizes", "4K", "--json"])
    assert args.benchmark == "allreduce" and args.arguments == ["--sizes", "4K", "--json"]


@pytest.mark.parametrize("argv, flag, what", [
    (["bench", "train", "--steps", "0"], "--steps", "a positive integer"),
    (["bench", "decode", "--utterances", "0"], "--utterances", "a positive integer"),
    (["bench", "allreduce", "--repeats", "0"], "--repeats", "a positive integer"),
    (["bench", "data", "--seconds", "-5"], "--seconds", "a positive number"),
    (["bench", "data", "--sample-rate", "0"], "--sample-rate", "a positive integer"),
    (["bench", "decode", "--lm-weight", "inf"], "--lm-weight", "a finite number"),
    (["bench", "decode", "--peak", "-1"], "--peak", "a non-negative number"),
])
def test_benchmark_flags_are_refused_by_name_too(argv, flag, what, capsys):
    """Each benchmark parses its own options (``deepspeech bench NAME ...``)."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert f"argument {flag}: must be {what}" in capsys.readouterr().err


@pytest.mark.parametrize("argv, flag", [
    (["evaluate", "--checkpoint", "c.pt", "--manifest", "m.jsonl", "--report", "{folder}"],
     "--report"),
    (["decode", "tune", "--checkpoint", "c.pt", "--manifest", "m.jsonl", "--lm", "lm.arpa",
      "-o", "{folder}"], "-o/--output"),
    (["lm", "build", "--text", "t.txt", "-o", "{folder}"], "-o/--output"),
    (["export", "--checkpoint", "c.pt", "-o", "{folder}"], "-o/--output"),
    (["plot", "run", "--compare", "{folder}"], "--compare"),
])
def test_an_output_file_that_is_a_folder_is_refused_before_any_work(argv, flag, tmp_path,
                                                                     capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args([arg.format(folder=tmp_path) for arg in argv])
    assert f"argument {flag}: {tmp_path} is a folder; give a file name" in capsys.readouterr().err


def test_output_paths_below_a_file_or_a_folder_named_as_a_file_are_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("")
    with pytest.raises(argparse.ArgumentTypeError, match="notes.txt is a file, not a folder"):
        output_file(str(tmp_path / "notes.txt" / "deeper" / "lm.arpa"))
    with pytest.raises(argparse.ArgumentTypeError, match="notes.txt is a file; give a folder"):
        output_folder(str(tmp_path / "notes.txt"))
    assert output_file(str(tmp_path / "new" / "lm.arpa")) == str(tmp_path / "new" / "lm.arpa")
    assert output_folder(str(tmp_path)) == str(tmp_path)


def test_an_overlap_as_long_as_the_window_is_refused_before_loading_the_model(capsys):
    status = main(["transcribe", "--checkpoint", "absent.pt", "--window", "2", "a.wav"])
    assert status == 2
    assert "--overlap (2 s) must be shorter than --window (2 s)" in capsys.readouterr().err


class _Unreadable(Dataset):
    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int):
        raise AudioError("clip.wav: 3 samples are too few")


def test_an_error_from_a_loader_worker_is_shown_without_the_workers_traceback():
    with pytest.raises(AudioError) as wrapped:
        next(iter(DataLoader(_Unreadable(), num_workers=1)))
    assert "Traceback" in str(wrapped.value)
    assert own_message(wrapped.value) == "clip.wav: 3 samples are too few"
    assert own_message(AudioError("a.wav: missing\n  b.wav")) == "a.wav: missing\n  b.wav"


def test_a_killed_loader_worker_is_named_with_advice_and_where_to_resume(tmp_path, dying_loader):
    last = tmp_path / "last.pt"
    last.write_bytes(b"")
    with pytest.raises(ResourceError, match=r"^DataLoader worker \(pid.*\(most often the "
                                            r"out-of-memory killer\): use fewer workers; "
                                            rf"continue .* with train.resume={last}$"), \
            naming_resource_failures("use fewer workers", last):
        next(iter(dying_loader))
    with pytest.raises(RuntimeError, match="something else"), \
            naming_resource_failures("use fewer workers", last):
        raise RuntimeError("something else")


def test_a_connection_lost_inside_the_loader_counts_as_a_dead_worker():
    inside = str(Path(torch.utils.data.__file__).parent / "dataloader.py")
    with pytest.raises(ResourceError, match="vanished while handing over a batch"), \
            naming_resource_failures():
        exec(compile("raise ConnectionResetError(104, 'reset')", inside, "exec"))
    with pytest.raises(ConnectionResetError), naming_resource_failures():
        raise ConnectionResetError(104, "a socket of the user's own")


@pytest.mark.parametrize("error, told", [
    (RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't "
                  "allocate memory: you tried to allocate 412160041216 bytes."),
     "DefaultCPUAllocator: can't allocate memory: you tried to allocate 412160041216 bytes."),
    (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB.\nSee documentation"),
     "CUDA out of memory. Tried to allocate 2.00 GiB."),
    (MemoryError(), "MemoryError"),
])
def test_running_out_of_memory_is_one_line_with_what_to_lower(error, told, tmp_path):
    with pytest.raises(ResourceError) as raised, \
            naming_resource_failures("lower the batch", tmp_path / "last.pt"):
        raise error
    assert str(raised.value) == f"out of memory ({told}): lower the batch"  # no last.pt yet


def test_a_full_disk_is_one_line_with_the_file_and_where_to_resume(tmp_path):
    last = tmp_path / "last.pt"
    last.write_bytes(b"")
    with pytest.raises(ResourceError) as raised, \
            naming_resource_failures("lower the batch", last):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / ".last.pt.tmp"))
    assert str(raised.value) == (
        f"no space left for {tmp_path / '.last.pt.tmp'} (No space left on device): free some "
        f"or write elsewhere; what was written before is intact; continue from the last "
        f"checkpoint with train.resume={last}")
    with pytest.raises(PermissionError), naming_resource_failures("lower the batch", last):
        raise PermissionError(errno.EACCES, "Permission denied", "x")  # not a resource


@pytest.mark.parametrize("code, told", [(errno.EACCES, "Permission denied"),
                                         (errno.EROFS, "Read-only file system")])
def test_a_place_that_cannot_be_written_is_one_line(code, told, monkeypatch, capsys):
    def refused(args):
        raise OSError(code, told, "/srv/runs/lm.arpa")

    monkeypatch.setattr("deepspeech.cli.lm._build", refused)
    assert main(["lm", "build", "--text", "t.txt", "-o", "lm.arpa"]) == 2
    assert capsys.readouterr().err.strip() == f"deepspeech lm: error: /srv/runs/lm.arpa: {told}"


def test_other_os_errors_keep_their_traceback(monkeypatch):
    def broken(args):
        raise OSError(errno.EIO, "Input/output error", "/dev/sdz")

    monkeypatch.setattr("deepspeech.cli.lm._build", broken)
    with pytest.raises(OSError, match="Input/output error"):
        main(["lm", "build", "--text", "t.txt", "-o", "lm.arpa"])


def test_training_without_a_manifest_names_the_key(tmp_path, capsys):
    config = tmp_path / "empty.yaml"
    config.write_text("")
    assert main(["train", "-c", str(config)]) == 2
    assert "data.train_manifest: training needs a manifest" in capsys.readouterr().err


def test_a_reader_that_leaves_early_gets_no_traceback():
    # `deepspeech ... | head -1`: the pipe closes while the command still prints.
    script = ("import deepspeech.cli.transcribe as t\n"
              "t._transcribe = lambda args: [print('line', n) for n in range(10**6)]\n"
              "from deepspeech.cli import main\n"
              "raise SystemExit(main(['transcribe', '--checkpoint', 'c.pt', '--info']))\n")
    reader = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert reader.stdout.readline() == b"line 0\n"
    reader.stdout.close()
    assert reader.wait(timeout=60) == 141
    assert reader.stderr.read() == b""


@pytest.mark.slow
def test_audio_that_fails_only_when_decoded_is_named_then_skipped(
        tiny_corpus, tiny_overrides, with_nan_audio, tmp_path, capsys):
    # The header is fine, so the check before step one passes; a loader meets the NaN.
    manifest = with_nan_audio(tiny_corpus["train"], 3, tmp_path)
    config = tmp_path / "empty.yaml"
    config.write_text("")
    run = tmp_path / "run"
    argv = ["train", "-c", str(config), *tiny_overrides(tiny_corpus, run),
            f"data.train_manifest={manifest}"]
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert f"{tmp_path / 'bad.wav'}: audio contains NaN or infinite samples" in error
    assert f"met while training: `deepspeech data check {manifest}` decodes every file" in error
    assert "data.bad_input=skip" in error
    # Skipped as training meets it, in every epoch; with one utterance per micro-batch, the
    # one it was alone in contributes nothing and the step still happens. The validation
    # set is decoded once before training: every validation scores the same 11 of 12.
    val = with_nan_audio(tiny_corpus["val"], 0, tmp_path / "val")
    assert main([*argv, "--overwrite", "data.bad_input=skip", "train.micro_batch_size=1",
                 f"data.val_manifest={val}"]) == 0
    error = capsys.readouterr().err
    skips = f"skipping an utterance (data.bad_input: skip): {tmp_path / 'bad.wav'}: audio contains"
    assert error.count(skips) == 2
    assert f"{val}: skipping 1 unusable utterance(s):\n  {val} line 1 ({val.parent / 'bad.wav'})" in error
    report = (run / "unusable_utterances.txt").read_text()
    assert report.startswith(f"{val} line 1 ({val.parent / 'bad.wav'}): ") and report.count("\n") == 1
    checkpoint = load_checkpoint(run / "last.pt")
    assert checkpoint.state.step == 12 and checkpoint.state.validation["utterances"] == 11
    assert all(torch.isfinite(value).all() for value in checkpoint.model.values()
               if value.is_floating_point())
