"""Files are written whole or not at all, and a failed write names its file."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from deepspeech.files import atomic_write, files_under, unfinished_writes


def test_a_failed_write_keeps_the_old_file_and_names_the_new_one(tmp_path):
    path = tmp_path / "last.pt"
    path.write_bytes(b"before")
    with pytest.raises(OSError) as raised, atomic_write(path, "wb") as handle:
        handle.write(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")  # as a full disk's write()
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(path)
    assert path.read_bytes() == b"before"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]  # no temporary left


def test_a_finished_write_replaces_the_file(tmp_path):
    path = tmp_path / "sub" / "card.json"
    with atomic_write(path, "w", encoding="utf-8") as handle:
        handle.write("{}")
    assert path.read_text() == "{}"
    assert sorted(p.name for p in path.parent.iterdir()) == ["card.json"]


def test_files_under_a_folder_follow_links_and_end_at_a_loop(tmp_path):
    root, elsewhere = tmp_path / "root", tmp_path / "elsewhere"
    (root / "alice").mkdir(parents=True)
    elsewhere.mkdir()
    (root / "alice" / "a.wav").write_bytes(b"")
    (elsewhere / "b.wav").write_bytes(b"")
    (root / "bob").symlink_to(elsewhere)             # a speaker's folder kept elsewhere
    (root / "alice" / "again").symlink_to(root)      # a loop
    (root / "carol").symlink_to(root / "alice")      # a folder reached twice
    assert [p.relative_to(root) for p in files_under(root)] == [
        Path("alice/a.wav"), Path("bob/b.wav")]


def test_a_folder_that_cannot_be_listed_is_named_not_skipped(tmp_path, monkeypatch):
    (tmp_path / "a" / "locked").mkdir(parents=True)
    (tmp_path / "a" / "one.wav").write_bytes(b"")
    locked = str(tmp_path / "a" / "locked")
    scandir = os.scandir

    def refusing(path="."):  # chmod 0 stops no root user (CI's)
        if os.fspath(path) == locked:
            raise PermissionError(errno.EACCES, "Permission denied", locked)
        return scandir(path)

    monkeypatch.setattr(os, "scandir", refusing)
    with pytest.raises(PermissionError) as error:
        list(files_under(tmp_path))
    assert error.value.filename == locked


def test_unfinished_writes_are_the_temporary_files_of_that_name_only(tmp_path):
    for name in (".last.pt.abc123.tmp", ".last.pt.tmp", ".best.pt.x.tmp", "last.pt"):
        (tmp_path / name).write_bytes(b"")
    assert unfinished_writes(tmp_path / "last.pt") == [tmp_path / ".last.pt.abc123.tmp"]
