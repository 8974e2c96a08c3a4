"""A run whose pre-flight comes from the probe cache trains the same bits as a cold one."""

from __future__ import annotations

import pytest

from deepspeech.config import load_config
from deepspeech.data import probe
from deepspeech.training.checkpoint import load_checkpoint
from deepspeech.training.determinism import state_dict_digest
from deepspeech.training.trainer import train

pytestmark = pytest.mark.slow


def test_warm_pre_flight_trains_bitwise_the_same(tiny_corpus, tiny_overrides, tmp_path,
                                                 monkeypatch, probe_cache_folder):
    checkpoints = []
    for name in ("cold", "warm"):
        if name == "warm":
            assert list(probe_cache_folder.glob("*.json"))

            def no_probing(path, *args, **kwargs):
                raise AssertionError(f"{path} probed although the cache holds it")

            monkeypatch.setattr(probe, "probe_audio", no_probing)
        config = load_config(None, [*tiny_overrides(tiny_corpus, tmp_path / name),
                                    "train.epochs=1"])
        train(config)
        checkpoints.append(load_checkpoint(tmp_path / name / "last.pt"))
    cold, warm = checkpoints
    assert cold.train_data["digest"] == warm.train_data["digest"]
    assert state_dict_digest(cold.model) == state_dict_digest(warm.model)
