"""Tuning lm_weight x word_bonus on precomputed log-probs picks the pair with the lowest WER."""

from __future__ import annotations

import math

import pytest
import torch

from deepspeech.config import DecodeConfig
from deepspeech.data.text import Vocabulary

pytest.importorskip("flashlight.lib.text")
from deepspeech.evaluation.decoder_tuning import TuneResult, tune_decoder  # noqa: E402
from deepspeech.lm import estimate, write_arpa  # noqa: E402

ENGLISH = Vocabulary.english()


def spelled(text: str, confused: dict[int, dict[str, float]]) -> torch.Tensor:
    rows = []
    for i, ch in enumerate(text):
        probs = confused.get(i, {"_" if ch == " " else ch: 0.9})
        for frame in (probs, {"-": 0.9}):
            row = torch.full((len(ENGLISH),), -12.0)
            for c, p in frame.items():
                row[0 if c == "-" else ENGLISH.encode(" " if c == "_" else c)[0]] = math.log(p)
            rows.append(row)
    return torch.log_softmax(torch.stack(rows), dim=1)


@pytest.fixture(scope="module")
def dev_set(tmp_path_factory):
    lm = tmp_path_factory.mktemp("lm") / "lm.arpa"
    write_arpa(estimate([s.split() for s in ["the cat sat", "a cat ran", "the dog ran"] * 5], 3),
               lm)
    # The acoustics say "cot" (not a word: the lexicon fixes it) and "dog", a word
    # that the LM never saw after "a" (only the LM's weight can fix it).
    first = spelled("the cat sat", {5: {"o": 0.5, "a": 0.4}})
    second = spelled("a cat ran", {2: {"d": 0.5, "c": 0.4}, 3: {"o": 0.5, "a": 0.4},
                                   4: {"g": 0.5, "t": 0.4}})
    batch = torch.zeros(2, max(len(first), len(second)), len(ENGLISH))
    batch[0, :len(first)], batch[1, :len(second)] = first, second
    lengths = torch.tensor([len(first), len(second)])
    single = spelled("the dog ran", {})
    return str(lm), [batch, single], [lengths, None], ["the cat sat", "a cat ran", "the dog ran"]


def test_grid_search_finds_the_lm_weight_that_fixes_the_errors(dev_set):
    lm, log_probs, lengths, references = dev_set
    result = tune_decoder(log_probs, lengths, references, ENGLISH,
                          DecodeConfig(mode="beam", lm=lm, beam=16),
                          lm_weights=[0.0, 1.0, 2.0], word_bonuses=[0.0, 1.0])
    assert isinstance(result, TuneResult)
    assert [(p.lm_weight, p.word_bonus) for p in result.table] == [
        (0.0, 0.0), (0.0, 1.0), (1.0, 0.0), (1.0, 1.0), (2.0, 0.0), (2.0, 1.0)]
    assert result.greedy_wer == pytest.approx(2 / 9)
    assert result.best.wer == 0.0 and result.lm_weight == 1.0 and result.word_bonus == 0.0
    assert result.table[0].wer == pytest.approx(1 / 9)  # without the LM: "a dog ran"
    assert "<- best" in result.format()


def test_mismatched_inputs_are_rejected(dev_set):
    lm, log_probs, lengths, references = dev_set
    config = DecodeConfig(mode="beam", lm=lm)
    with pytest.raises(ValueError, match="references"):
        tune_decoder(log_probs, lengths, references[:2], ENGLISH, config, [1.0], [0.0])
    with pytest.raises(ValueError, match="lengths"):
        tune_decoder(log_probs, lengths[:1], references, ENGLISH, config, [1.0], [0.0])
    with pytest.raises(ValueError, match="at least one"):
        tune_decoder(log_probs, lengths, references, ENGLISH, config, [], [0.0])
