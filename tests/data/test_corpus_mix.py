"""Weighted mixing of training manifests (real plus synthetic speech)."""

from __future__ import annotations

import pytest

from deepspeech.config import load_config
from deepspeech.data.corpus import Corpus, mix_corpora
from deepspeech.data.manifest import Utterance
from deepspeech.errors import ConfigError


def corpus(name: str, count: int) -> Corpus:
    utterances = [Utterance(f"{name}{i}.wav", f"{name} {i}", 1.0) for i in range(count)]
    return Corpus(f"{name}.jsonl", utterances, [[i] for i in range(count)])


def names(mixed: Corpus) -> list[str]:
    return [u.audio_filepath for u in mixed.utterances]


def test_weights_repeat_whole_copies_and_a_seeded_share():
    real, synthetic = corpus("real", 10), corpus("synth", 40)
    mixed = mix_corpora([(real, 1.0), (synthetic, 1.25)], seed=0)
    chosen = names(mixed)
    assert chosen[:10] == names(real)
    assert len(chosen) == 10 + 40 + 10
    extra = chosen[50:]
    assert len(set(extra)) == 10 and set(extra) <= set(names(synthetic))
    assert list(mixed.labels[10:50]) == list(synthetic.labels)
    assert names(mix_corpora([(real, 1.0), (synthetic, 1.25)], seed=0)) == chosen
    assert names(mix_corpora([(real, 1.0), (synthetic, 1.25)], seed=1))[50:] != extra


def test_a_small_weight_keeps_a_fraction():
    mixed = mix_corpora([(corpus("real", 10), 1.0), (corpus("synth", 40), 0.25)], seed=3)
    assert len(mixed.utterances) == 20
    assert mixed.manifest == "real.jsonl + synth.jsonl"


def test_mix_entries_are_validated(tmp_path):
    manifest = tmp_path / "synth.jsonl"
    manifest.write_text("")
    with pytest.raises(ConfigError, match=r"data\.mix\[0\]\.weight: must be positive"):
        load_config(None, [f"data.mix=[{{manifest: {manifest}, weight: 0}}]"])
    with pytest.raises(ConfigError, match=r"data\.mix\[0\]\.manifest: file not found"):
        load_config(None, ["data.mix=[{manifest: missing.jsonl}]"])
    with pytest.raises(ConfigError, match=r"data\.mix\[0\]\.wieght: unknown key"):
        load_config(None, [f"data.mix=[{{manifest: {manifest}, wieght: 1}}]"])
