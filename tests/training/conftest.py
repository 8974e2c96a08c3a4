"""Training tests keep their probe caches in their own folders, not the user's."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def probe_cache_folder(tmp_path_factory, monkeypatch):
    """A fresh ``DEEPSPEECH_CACHE_DIR`` per test."""
    folder = tmp_path_factory.mktemp("probe-cache")
    monkeypatch.setenv("DEEPSPEECH_CACHE_DIR", str(folder))
    return folder
