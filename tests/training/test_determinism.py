"""Bitwise reproducibility: same seed, same bits; killed and resumed, same bits."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import time

import pytest
import torch

from deepspeech.config import load_config
from deepspeech.errors import CheckpointError
from deepspeech.training.checkpoint import load_checkpoint
from deepspeech.training.determinism import state_dict_digest
from deepspeech.training.optim import lr_factor
from deepspeech.training.trainer import train

pytestmark = pytest.mark.slow


def weights_digest(path) -> str:
    return state_dict_digest(load_checkpoint(path).model)


@pytest.mark.parametrize("rnn", ["gru", "lstm"])  # the CPU LSTM runs through oneDNN
def test_same_seed_gives_bitwise_identical_weights(tiny_corpus, tiny_overrides, tmp_path, rnn):
    digests = []
    for name in ("a", "b"):
        config = load_config(None, [*tiny_overrides(tiny_corpus, tmp_path / name),
                                    f"model.rnn.kind={rnn}"])
        result = train(config)
        assert result.steps == 12
        digests.append(weights_digest(tmp_path / name / "last.pt"))
    assert digests[0] == digests[1]
    other = load_config(None, [*tiny_overrides(tiny_corpus, tmp_path / "c"),
                               f"model.rnn.kind={rnn}", "train.seed=1"])
    train(other)
    assert weights_digest(tmp_path / "c" / "last.pt") != digests[0]


def _command(config, overrides: list[str]) -> list[str]:
    return [sys.executable, "-m", "deepspeech", "train", "-c", str(config), *overrides]


@pytest.mark.parametrize(("kill_after_checkpoints", "extra"),
                         [(1, []), (3, []), (2, ["optim.ema_decay=0.9"]),
                          (2, ["model.rnn.kind=lstm"])])
def test_killed_and_resumed_run_matches_the_uninterrupted_one(
        tiny_corpus, tiny_overrides, tmp_path, kill_after_checkpoints, extra):
    overrides = [*tiny_overrides(tiny_corpus, tmp_path / "whole"), "train.checkpoint_every=1",
                 *extra]
    reference = load_config(None, overrides)
    train(reference)
    expected_state = load_checkpoint(tmp_path / "whole" / "last.pt")

    run_dir = tmp_path / "killed"
    killed = [*tiny_overrides(tiny_corpus, run_dir), "train.checkpoint_every=1", *extra]
    config = tmp_path / "empty.yaml"
    config.write_text("{}\n")
    log = (tmp_path / "killed.log").open("w")
    process = subprocess.Popen(_command(config, killed), stdout=log, stderr=log)
    last = run_dir / "last.pt"
    seen, deadline = set(), time.time() + 120
    while len(seen) < kill_after_checkpoints and process.poll() is None and time.time() < deadline:
        if last.exists():
            seen.add(last.stat().st_mtime_ns)
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait()
    if process.returncode == 0:
        pytest.skip("the run finished before it could be killed")
    assert process.returncode == -signal.SIGKILL, (tmp_path / "killed.log").read_text()[-2000:]
    step = load_checkpoint(last).state.step
    assert 0 < step < 12
    resumed = subprocess.run(_command(config, [*killed, f"train.resume={last}"]),
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    resumed_state = load_checkpoint(last)
    assert state_dict_digest(resumed_state.model) == state_dict_digest(expected_state.model)
    assert resumed_state.state.step == 12
    if expected_state.training_model is not None:  # weight averaging: the trained weights too
        assert (state_dict_digest(resumed_state.training_model)
                == state_dict_digest(expected_state.training_model))


def test_the_checkpoint_holds_the_whole_state(tiny_corpus, tiny_overrides, tmp_path):
    mix = f"data.mix=[{{manifest: {tiny_corpus['val']}, weight: 0.5}}]"
    config = load_config(None, [*tiny_overrides(tiny_corpus, tmp_path), mix])
    train(config)
    state = torch.load(tmp_path / "last.pt", weights_only=True)
    for key in ("model", "optimizer", "scheduler", "scaler", "rng", "step", "epoch",
                "step_in_epoch", "config", "vocabulary", "best_wer"):
        assert key in state, key
    assert state["config"] == config.to_dict()
    assert set(state["rng"][0]) >= {"python", "numpy", "torch"}
    assert (tmp_path / "best.pt").is_file() and (tmp_path / "config.yaml").is_file()
    assert (tmp_path / "metrics.jsonl").read_text().count("val/wer") == 2
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    waits = [r["train/data_wait_fraction"] for r in records if "train/data_wait_fraction" in r]
    assert waits and all(0.0 <= wait <= 1.0 for wait in waits)
    card = json.loads((tmp_path / "model_card.json").read_text())
    best = torch.load(tmp_path / "best.pt", weights_only=True)
    assert card["step"] == best["step"] and card["parameters"] == best["parameters"] > 0
    assert card["train_data"]["utterances"] == 48 + 6
    assert card["validation"]["wer"] == best["best_wer"]
    assert card["config_digest"] == config.digest()


def test_without_validation_the_model_card_describes_last_pt(tiny_corpus, tiny_overrides,
                                                              tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="deepspeech.training.trainer")
    train(load_config(None, [*tiny_overrides(tiny_corpus, tmp_path), "data.val_manifest=",
                             "train.max_steps=2"]))
    assert not (tmp_path / "best.pt").exists()
    card = json.loads((tmp_path / "model_card.json").read_text())
    assert card["step"] == load_checkpoint(tmp_path / "last.pt").state.step == 2
    assert card["validation"] is None
    assert "no validation set, so no best.pt: use last.pt" in caplog.text


def test_a_resume_with_another_batch_size_is_refused(tiny_corpus, tiny_overrides, tmp_path):
    train(load_config(None, [*tiny_overrides(tiny_corpus, tmp_path), "train.max_steps=2"]))
    changed = load_config(None, [*tiny_overrides(tiny_corpus, tmp_path / "again"),
                                 f"train.resume={tmp_path / 'last.pt'}", "train.batch_size=4"])
    with pytest.raises(CheckpointError, match="train.batch_size was 8 in the checkpoint and "
                                              "is 4 now; a resumed run must keep it"):
        train(changed)


def test_a_resume_follows_this_runs_optimizer_settings_not_the_checkpoints(
        tiny_corpus, tiny_overrides, tmp_path):
    train(load_config(None, [*tiny_overrides(tiny_corpus, tmp_path / "first"),
                             "train.max_steps=2"]))
    changed = load_config(None, [*tiny_overrides(tiny_corpus, tmp_path / "resumed"),
                                 f"train.resume={tmp_path / 'first' / 'last.pt'}",
                                 "train.max_steps=4", "optim.lr=1e-4",
                                 "optim.weight_decay=0.25", "optim.warmup_steps=0"])
    train(changed)
    group = load_checkpoint(tmp_path / "resumed" / "last.pt").optimizer["param_groups"][0]
    # torch's load_state_dict alone would have kept the first run's decay and rate.
    assert group["weight_decay"] == 0.25
    assert group["lr"] == pytest.approx(1e-4 * lr_factor(4, changed.optim, 0, 4))


def test_resuming_a_finished_run_trains_nothing_and_writes_nothing(
        tiny_corpus, tiny_overrides, tmp_path, caplog):
    train(load_config(None, [*tiny_overrides(tiny_corpus, tmp_path / "first"),
                             "train.max_steps=2"]))
    last = tmp_path / "first" / "last.pt"
    before = last.read_bytes()
    result = train(load_config(None, [*tiny_overrides(tiny_corpus, tmp_path / "again"),
                                      f"train.resume={last}", "train.max_steps=2"]))
    assert result.steps == 2 and not (tmp_path / "again").exists()
    assert last.read_bytes() == before
    assert ("has trained 2 steps (0 epochs), all that this run's train.max_steps=2 allows: "
            "nothing is left to train; raise train.max_steps to train on" in caplog.text)


def test_a_resume_on_other_training_data_is_refused_before_anything_is_written(
        tiny_corpus, tiny_overrides, tmp_path):
    train(load_config(None, [*tiny_overrides(tiny_corpus, tmp_path), "train.max_steps=2"]))
    config_before = (tmp_path / "config.yaml").read_bytes()
    other_data = load_config(None, [*tiny_overrides(tiny_corpus, tmp_path),
                                    f"train.resume={tmp_path / 'last.pt'}",
                                    f"data.train_manifest={tiny_corpus['val']}"])
    with pytest.raises(CheckpointError, match=r"the training data differ from the checkpoint's "
                                              r"\(12 utterances, .* h now; 48, .* h then\)"):
        train(other_data)
    assert (tmp_path / "config.yaml").read_bytes() == config_before
    assert load_checkpoint(tmp_path / "last.pt").state.step == 2
