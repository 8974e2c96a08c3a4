"""``deepspeech bench decode`` runs end to end on a small synthetic batch."""

from __future__ import annotations

import argparse
import json
import random

import pytest
import torch

from deepspeech.data.text import Vocabulary

pytest.importorskip("flashlight.lib.text")
from deepspeech.bench.decode import add_arguments, run, synthetic_log_probs  # noqa: E402
from deepspeech.decoding.greedy import greedy_decode  # noqa: E402


def test_synthetic_outputs_are_peaked_and_spell_words():
    vocabulary = Vocabulary.english()
    log_probs, text = synthetic_log_probs(vocabulary, ["hello", "world"], 200, random.Random(0))
    assert log_probs.shape == (200, len(vocabulary))
    assert torch.allclose(log_probs.exp().sum(dim=1), torch.ones(200))
    decoded = greedy_decode(log_probs[None], None, vocabulary)[0].split()
    # The last word may be cut by the end of the utterance.
    assert len(decoded) > 5 and text.startswith(" ".join(decoded[:-1]))


def test_run_reports_three_decoders(capsys):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--utterances", "2", "--seconds", "2", "--repeats", "1", "--json"])
    assert run(args) == 0
    results = json.loads(capsys.readouterr().out)
    assert [r["decoder"].split(",")[0].split(" +")[0] for r in results] == [
        "greedy", "beam 50", "beam 50"]
    assert all(r["audio_seconds"] == 4.0 and r["rtf"] > 0 for r in results)
