"""Shared preparer helpers: deterministic speaker splits, source links, summaries, registry."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from deepspeech.data.manifest import Utterance
from deepspeech.data.prepare import PREPARERS
from deepspeech.data.prepare.common import (
    comma_separated,
    link_source,
    speaker_count,
    split_speakers,
    write_splits,
)
from deepspeech.errors import DeepSpeechError


def test_speaker_count_takes_counts_and_fractions():
    assert speaker_count(2, 10) == 2
    assert speaker_count(0.1, 74) == 7
    assert speaker_count(0.01, 10) == 1  # a fraction never rounds a split away
    assert speaker_count(0, 10) == 0
    with pytest.raises(DeepSpeechError):
        speaker_count(1.5, 10)


def test_speaker_split_is_disjoint_deterministic_and_stable_when_speakers_are_added():
    speakers = [f"s{i:02d}" for i in range(20)]
    groups = split_speakers(speakers, dev=3, test=2, seed=0)
    assert [len(groups[k]) for k in ("train", "dev", "test")] == [15, 3, 2]
    assert set().union(*map(set, groups.values())) == set(speakers)
    assert split_speakers(reversed(speakers), dev=3, test=2, seed=0) == groups
    assert split_speakers(speakers, dev=3, test=2, seed=1) != groups
    # A new speaker never pushes an existing one from dev/test into train or back.
    grown = split_speakers([*speakers, "zz"], dev=3, test=2, seed=0)
    moved = [s for s in speakers if not any(s in grown[k] and s in groups[k] for k in groups)]
    assert len(moved) <= 2
    with pytest.raises(DeepSpeechError, match="leave some for training"):
        split_speakers(["a", "b"], dev=1, test=1)


def test_source_link_makes_paths_relative_to_the_output(tmp_path):
    corpus, output = tmp_path / "corpus", tmp_path / "out"
    (corpus / "sub").mkdir(parents=True)
    source = link_source(corpus, output)
    assert source == output.resolve() / "source" and (source / "sub").is_dir()
    assert link_source(corpus, output) == source  # idempotent
    inside = output / "download" / "x"
    inside.mkdir(parents=True)
    assert link_source(inside, output) == inside.resolve()  # no link for a corpus inside


def test_write_splits_sorts_skips_empty_splits_and_summarizes(tmp_path):
    a = Utterance(str(tmp_path / "b.wav"), "b", 1.5, speaker="x")
    b = Utterance(str(tmp_path / "a.wav"), "a", 2.0, speaker="y")
    result = write_splits("demo", tmp_path, {"train": [a, b], "dev": []}, left_out=1)
    assert list(result.manifests) == ["train"]
    lines = (tmp_path / "train.jsonl").read_text().splitlines()
    assert [line.split('"')[3] for line in lines] == ["a.wav", "b.wav"]
    summary = result.format()
    assert "demo: 2 utterances" in summary and "2 speakers" in summary and "left out 1" in summary


def test_every_preparer_takes_its_options_with_the_command_lines_defaults():
    assert list(PREPARERS) == ["librispeech", "an4", "commonvoice", "fsdd", "folder", "kaldi",
                               "speechocean762"]
    for name, preparer in PREPARERS.items():
        assert preparer.prepare.__name__ == f"prepare_{name}"
        parameters = inspect.signature(preparer.prepare).parameters
        assert list(parameters)[:2] == ["root", "output"] and "workers" in parameters
        for option in preparer.options:
            assert parameters[option.keyword].default == option.default, (name, option.flag)
            if option.download:
                assert option.keyword in inspect.signature(preparer.download).parameters
    assert [p.name for p in PREPARERS.values() if p.download is None] == ["commonvoice", "folder",
                                                                          "kaldi"]


def test_a_preparer_without_root_prepares_what_it_downloads(tmp_path):
    calls = []

    def download(target_dir, subsets=("default",)):
        calls.append(("download", target_dir, subsets))
        return tmp_path / "fetched"

    def prepare(root, output, subsets=("default",), seed=0, workers=8):
        calls.append(("prepare", root, output, subsets, seed, workers))
        return "prepared"

    preparer = dataclasses.replace(PREPARERS["librispeech"], download=download, prepare=prepare)
    assert preparer.run(None, "out", workers=3, subsets=["a", "b"], seed=1) == "prepared"
    assert calls == [("download", "out/download", ["a", "b"]),
                     ("prepare", tmp_path / "fetched", "out", ["a", "b"], 1, 3)]
    calls.clear()
    preparer.run("mine", "out", subsets=["a"])
    assert calls == [("prepare", "mine", "out", ["a"], 0, 8)]
    with pytest.raises(DeepSpeechError, match="folder: nothing to download; give its folder"):
        PREPARERS["folder"].run(None, tmp_path / "out")


def test_comma_separated_drops_empty_names():
    assert comma_separated("train-clean-100,,dev-clean,") == ["train-clean-100", "dev-clean"]
