"""``deepspeech decode tune``: one model pass over a dev set, a grid, a decode config out."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from deepspeech.cli import main
from deepspeech.cli.decode import parse_grid
from deepspeech.config import Config, load_config, load_decode_file
from deepspeech.errors import ConfigError


def test_decode_files_resolve_relative_paths_against_their_folder(tmp_path):
    (tmp_path / "lm").mkdir()
    (tmp_path / "tuned").mkdir()
    decode = tmp_path / "tuned" / "decode.yaml"
    decode.write_text("decode:\n  mode: beam\n  lm: ../lm/lm.arpa\n  lexicon: ''\n")
    assert load_decode_file(decode)["lm"] == str((tmp_path / "lm" / "lm.arpa").resolve())
    assert load_decode_file(decode)["lexicon"] == ""
    # Files written before paths were relative name them absolutely: kept as they are.
    decode.write_text(f"decode:\n  mode: beam\n  lm: {tmp_path}/lm/lm.arpa\n")
    assert load_decode_file(decode)["lm"] == f"{tmp_path}/lm/lm.arpa"


def test_a_decode_file_moved_with_its_lm_still_finds_it(tmp_path, monkeypatch):
    from deepspeech.evaluation.decoder_tuning import relative_paths

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "lm.arpa").write_text("\\data\\\n")
    decode = tmp_path / "a" / "out" / "decode.yaml"
    section = relative_paths({"mode": "beam", "lm": str(tmp_path / "a" / "lm.arpa"),
                              "lexicon": ""}, decode)
    assert section == {"mode": "beam", "lm": "../lm.arpa", "lexicon": ""}
    decode.parent.mkdir()
    decode.write_text(yaml.safe_dump({"decode": section}))
    shutil.move(tmp_path / "a", tmp_path / "b")
    monkeypatch.chdir(tmp_path / "b" / "out")
    moved = tmp_path / "b" / "out" / "decode.yaml"
    config = Config.from_dict({"decode": load_decode_file(moved)}, check_files=True)
    assert Path(config.decode.lm).resolve() == (tmp_path / "b" / "lm.arpa").resolve()


def test_grids_parse_and_bad_values_name_the_flag():
    assert parse_grid("0, 0.25,1,", "--lm-weights") == [0.0, 0.25, 1.0]
    with pytest.raises(ConfigError, match="--word-bonuses"):
        parse_grid("0,x", "--word-bonuses")
    with pytest.raises(ConfigError, match="at least one"):
        parse_grid(",", "--lm-weights")
    with pytest.raises(ConfigError, match="--lm-weights: expected finite numbers, got 'nan,1'"):
        parse_grid("nan,1", "--lm-weights")


@pytest.mark.parametrize(("override", "owner"), [("decode.mode=greedy", "beam, always"),
                                                 ("decode.lm_weight=3", "--lm-weights"),
                                                 ("decode.beam=8", "--beam")])
def test_overrides_of_what_tune_sets_itself_are_refused(override, owner, capsys):
    argv = ["decode", "tune", "--checkpoint", "c.pt", "--manifest", "m.jsonl", "--lm", "lm.arpa",
            override]
    assert main(argv) == 2
    key = override.partition("=")[0]
    assert f"{override}: decode tune sets {key} itself ({owner})" in capsys.readouterr().err


@pytest.mark.slow
def test_tune_writes_the_best_pair_as_a_decode_config(tiny_corpus, tiny_overrides,
                                                      tmp_path_factory, capsys):
    pytest.importorskip("flashlight.lib.text")
    from deepspeech.lm import build_lm
    from deepspeech.training.trainer import train

    run = tmp_path_factory.mktemp("tune-run")
    train(load_config(None, [*tiny_overrides(tiny_corpus, run), "train.epochs=5",
                             "model.rnn.bidirectional=false", "model.rnn.lookahead=2",
                             "features.normalize=global"]))
    lm = run / "lm.arpa"
    build_lm(tiny_corpus["train"], lm, order=2)
    output = run / "tuned" / "decode.yaml"
    common = ["decode", "tune", "--checkpoint", str(run / "best.pt"), "--manifest",
              str(tiny_corpus["val"]), "--lm", str(lm), "--lm-weights", "0,1,2",
              "--word-bonuses=-1,0", "--beam", "8", "--batch-size", "5"]

    # Refused like a config file, before the acoustic pass (the last --beam counts).
    assert main([*common, "--beam", "100000"]) == 2
    assert "decode.beam: must lie in [1, 5000], got 100000" in capsys.readouterr().err
    assert main([*common, "-o", str(output), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    table = summary["table"]
    assert [(p["lm_weight"], p["word_bonus"]) for p in table] == [
        (0, -1), (0, 0), (1, -1), (1, 0), (2, -1), (2, 0)]
    best = min(table, key=lambda p: (p["wer"], p["cer"]))
    assert summary["best"] == best and summary["utterances"] == 12

    # The file is a decode: section that holds the best pair, its LM named relative to it
    # (and resolved against its folder when read).
    written = yaml.safe_load(output.read_text())
    assert list(written) == ["decode"] and written["decode"]["lm"] == "../lm.arpa"
    decode = Config.from_dict({"decode": load_decode_file(output)}, check_files=True).decode
    assert (decode.mode, decode.beam) == ("beam", 8)
    assert (decode.lm_weight, decode.word_bonus) == (best["lm_weight"], best["word_bonus"])
    assert decode.lm == str(lm.resolve())
    assert summary["decode"]["lm"] == str(lm.resolve())  # absolute where no file anchors it
    # The model card beside best.pt now hands the tuned settings on.
    card = json.loads((run / "model_card.json").read_text())
    assert summary["model_card"] == str(run / "model_card.json")
    assert card["decode"] == summary["decode"]
    assert card["decode_tuned_on"]["wer"] == best["wer"]

    # Greedy WER matches `evaluate` (same model pass); the tuned pair's WER does too.
    assert main(["evaluate", "--checkpoint", str(run / "best.pt"), "--manifest",
                 str(tiny_corpus["val"]), "--workers", "0", "--json"]) == 0
    greedy = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert greedy["wer"] == pytest.approx(summary["greedy_wer"])
    overrides = [f"decode.{key}={value}" for key, value in summary["decode"].items() if value != ""]
    assert main(["evaluate", "--checkpoint", str(run / "best.pt"), "--manifest",
                 str(tiny_corpus["val"]), "--workers", "0", "--json", *overrides]) == 0
    tuned = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert tuned["wer"] == pytest.approx(best["wer"])
    # The file itself hands them on, and --info names them beside the ones in use.
    assert main(["evaluate", "--checkpoint", str(run / "best.pt"), "--manifest",
                 str(tiny_corpus["val"]), "--workers", "0", "--json",
                 "--decode-config", str(output)]) == 0
    from_file = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert from_file["wer"] == tuned["wer"]
    assert main(["transcribe", "--checkpoint", str(run / "best.pt"), "--info"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["decode"]["mode"] == "greedy" and info["decode_tuned"] == summary["decode"]
    assert info["decode_tuned_on"]["wer"] == best["wer"]
    assert main(["transcribe", "--checkpoint", str(run / "best.pt"), "--info",
                 "--decode-config", str(output)]) == 0
    assert json.loads(capsys.readouterr().out)["decode"] == summary["decode"]

    assert main(common) == 0
    text = capsys.readouterr().out
    assert "<- best" in text and "greedy" in text
    assert f"decode.lm_weight={best['lm_weight']:g}" in text

    # With inference VTLN the model pass is evaluate's with the same override, and the
    # printed overrides carry it on.
    vtln = ["decode.vtln=[0.9,1.1]", "decode.vtln_step=0.1"]
    assert main([*common, "--json", *vtln]) == 0
    warped = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert warped["decode"]["vtln"] == [0.9, 1.1]
    assert main(["evaluate", "--checkpoint", str(run / "best.pt"), "--manifest",
                 str(tiny_corpus["val"]), "--workers", "0", "--json", *vtln]) == 0
    greedy = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert greedy["wer"] == pytest.approx(warped["greedy_wer"])
    assert main([*common, *vtln]) == 0
    assert "decode.vtln=[0.9,1.1] decode.vtln_step=0.1" in capsys.readouterr().out
