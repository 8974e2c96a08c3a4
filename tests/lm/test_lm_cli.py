"""``deepspeech lm build``: corpora (text, manifest), normalization and user errors."""

from __future__ import annotations

import argparse
import gzip
import json
import random
import unicodedata

import pytest

from deepspeech.cli import lm as lm_cli
from deepspeech.data.text import TextNormalizer
from deepspeech.errors import DeepSpeechError
from deepspeech.lm import BOS, ArpaModel, iter_sentences


def run_cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="deepspeech")
    lm_cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["lm", "build", *argv])
    return args.handler(args)


def test_build_from_text_writes_a_loadable_arpa(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("Hello, World!\nthe cat sat on the mat\n\nthe dog sat.\n", encoding="utf-8")
    output = tmp_path / "out" / "lm.arpa"
    assert run_cli("--text", str(corpus), "--order", "3", "-o", str(output)) == 0
    assert "3-grams" in capsys.readouterr().out
    model = ArpaModel.load(output)
    assert model.order == 3
    assert {"hello", "world", "cat"} <= set(model.vocabulary)  # normalized like transcripts
    assert ("the", "cat", "sat") in model.probs[2]
    assert output.read_text().startswith("\\data\\\nngram 1=")
    kenlm = pytest.importorskip("kenlm")
    assert kenlm.Model(str(output)).order == 3


def test_build_from_manifest_uses_the_text_field(tmp_path):
    manifest = tmp_path / "train.jsonl"
    rows = [{"audio_filepath": "a.wav", "text": "Go left", "duration": 1.0},
            {"audio_filepath": "b.wav", "text": "go right", "duration": 1.2}]
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    output = tmp_path / "lm.arpa"
    assert run_cli("--text", str(manifest), "--order", "2", "-o", str(output), "--prune") == 0
    assert ArpaModel.load(output).vocabulary == ["</s>", "<s>", "<unk>", "go", "left", "right"]


def test_several_corpora_count_as_one(tmp_path):
    """A general text brings the vocabulary, the training manifest the domain's wording."""
    general = tmp_path / "general.txt"
    general.write_text("the cat sat\nthe dog ran\n", encoding="utf-8")
    manifest = tmp_path / "train.jsonl"
    manifest.write_text(json.dumps({"audio_filepath": "a.wav", "text": "Mark sat",
                                    "duration": 1.0}) + "\n", encoding="utf-8")
    output = tmp_path / "lm.arpa"
    assert run_cli("--text", str(general), str(manifest), "--order", "2", "-o", str(output)) == 0
    model = ArpaModel.load(output)
    assert {"cat", "dog", "mark"} <= set(model.vocabulary)
    assert ("mark", "sat") in model.probs[1] and ("the", "cat") in model.probs[1]
    with pytest.raises(DeepSpeechError, match="missing.txt: corpus file not found"):
        run_cli("--text", str(general), str(tmp_path / "missing.txt"), "-o", str(output))


def test_vocab_limit_and_character_units(tmp_path):
    corpus = tmp_path / "corpus.txt.gz"
    with gzip.open(corpus, "wt", encoding="utf-8") as handle:
        handle.write("a b a\nc a\n")
    output = tmp_path / "lm.arpa"
    run_cli("--text", str(corpus), "--order", "2", "-o", str(output), "--vocab-limit", "1")
    assert ArpaModel.load(output).vocabulary == ["</s>", "<s>", "<unk>", "a"]
    run_cli("--text", str(corpus), "--order", "3", "-o", str(output), "--units", "char")
    chars = ArpaModel.load(output)
    assert ("a", "|", "b") in chars.probs[2]  # the space is spelled "|"
    assert set(chars.vocabulary) - {BOS} == {"</s>", "<unk>", "a", "b", "c", "|"}


@pytest.mark.parametrize(("content", "argv", "message"), [
    (None, [], "corpus file not found"),
    ("", [], "no sentences"),
    ("...\n  \n", [], "no sentences"),
    ("a b\n", ["--order", "0"], "--order must be from 1 to 6"),
    ("a b\n", ["--order", "9"], r"--order must be from 1 to 6 \(the highest the decoder's "
                                r"KenLM loads\), got 9"),
    ("a b\n", ["--vocab-limit", "-1"], "--vocab-limit"),
])
def test_user_errors_name_the_problem(tmp_path, content, argv, message):
    corpus = tmp_path / "corpus.txt"
    if content is not None:
        corpus.write_text(content, encoding="utf-8")
    with pytest.raises(DeepSpeechError, match=message) as error:
        run_cli("--text", str(corpus), "-o", str(tmp_path / "lm.arpa"), *argv)
    if content is not None and "order" not in message and "vocab" not in message:
        assert str(corpus) in str(error.value)
    assert not (tmp_path / "lm.arpa").exists()


def test_bad_manifest_line_is_named(tmp_path):
    manifest = tmp_path / "m.jsonl"
    manifest.write_text('{"text": "ok"}\n{"text": 3}\n', encoding="utf-8")
    with pytest.raises(DeepSpeechError, match=r"m.jsonl line 2: no string \"text\" field"):
        list(iter_sentences(manifest))
    manifest.write_text('{"text": "ok"}\nnot json\n', encoding="utf-8")
    with pytest.raises(DeepSpeechError, match="m.jsonl line 2: not valid JSON"):
        list(iter_sentences(manifest))


@pytest.mark.parametrize("rules", [
    TextNormalizer(), TextNormalizer(lowercase=False), TextNormalizer(strip_punctuation=False),
    TextNormalizer(keep="'-"),
])
def test_normalizer_matches_its_rules_character_by_character(rules):
    def reference(text: str) -> str:
        text = unicodedata.normalize("NFC", text)
        if rules.lowercase:
            text = text.lower()
        if rules.strip_punctuation:
            if "'" in rules.keep:  # typeset apostrophes are apostrophes
                text = text.replace("\u2019", "'").replace("\u02bc", "'")
            text = "".join(" " if unicodedata.category(ch).startswith("P")
                           and ch not in rules.keep else ch for ch in text)
        return " ".join(text.split())

    rng = random.Random(0)
    alphabet = "abcXYZ \t\u00a0\u2028\x1c.,;:!?'\"-\u2013()[]\u00ab\u00bb\u00bfE\u0301\u00c5\u00df" \
               "\u0130\u03a3\u2026\u2019\u201c/@#%&*_+=<>|~^0123\u4e2d\u3002"
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 25)))
        assert rules(text) == reference(text), repr(text)
