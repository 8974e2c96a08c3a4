"""What a resume must keep, checked against hand-made checkpoint states (no training)."""

from __future__ import annotations

import logging

import pytest

from deepspeech.config import load_config
from deepspeech.data.corpus import Corpus
from deepspeech.data.manifest import Utterance
from deepspeech.errors import CheckpointError
from deepspeech.training.checkpoint import Checkpoint, RunState
from deepspeech.training.resume import (
    best_wer_to_keep,
    check_resumable,
    check_same_data,
    kept_on_resume,
    rng_state_for_rank,
    training_data_digest,
    warn_if_not_exact,
    warn_if_optimization_changed,
)


def _state(*overrides: str, ranks: int = 1, **fields) -> Checkpoint:
    config = load_config(None, list(overrides), check_files=False)
    return Checkpoint(**{"config": config.to_dict(), "vocabulary": [], "model": {},
                         "optimizer": {}, "scaler": {},
                         "rng": [{"rank": rank} for rank in range(ranks)], **fields})


def _config(*overrides: str):
    return load_config(None, ["train.resume=run/last.pt", *overrides], check_files=False)


@pytest.mark.parametrize("change, message", [
    ("model.rnn.hidden=32", "the checkpoint's model config differs from this run's "
                            "(model.rnn.hidden)"),
    ("features.n_mels=40", "features config differs from this run's (features.n_mels)"),
    ("data.sample_rate=8000", "data.sample_rate was 16000 in the checkpoint and is 8000 now"),
    ("data.vocabulary=build", "data.vocabulary was 'english' in the checkpoint and is 'build'"),
    ("data.lowercase=false", "data.lowercase was True in the checkpoint and is False now"),
    ("train.seed=3", "train.seed was 0 in the checkpoint and is 3 now"),
    ("train.batch_seconds=120", "train.batch_seconds was 0.0 in the checkpoint and is 120.0 now"),
    ("optim.name=adamw", "optim.name was 'sgd' in the checkpoint and is 'adamw' now; a resumed "
                         "run must keep it (start a new run from its weights with "
                         "train.init_from)"),
])
def test_a_change_that_could_not_resume_exactly_is_refused_by_name(change, message):
    with pytest.raises(CheckpointError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_resumable(_state(), _config(change))


def test_batches_by_audio_resume_only_with_the_same_seconds():
    by_audio = _state("train.batch_seconds=120", "train.batch_size=64")
    check_resumable(by_audio, _config("train.batch_seconds=120", "train.batch_size=64"))
    with pytest.raises(CheckpointError, match="train.batch_seconds was 120.0 in the checkpoint "
                                              "and is 90.0 now"):
        check_resumable(by_audio, _config("train.batch_seconds=90", "train.batch_size=64"))
    older = _state()  # written before the key existed: its run had batches of a fixed size
    del older.config["train"]["batch_seconds"]
    check_resumable(older, _config())
    with pytest.raises(CheckpointError, match="train.batch_seconds was 0.0 in the checkpoint"):
        check_resumable(older, _config("train.batch_seconds=120"))


def test_the_shard_order_resumes_only_as_it_was():
    sequential = ("data.shards.order=sequential", "train.sortagrad=false")
    with pytest.raises(CheckpointError, match="the checkpoint's data.shards config differs "
                                              r"from this run's \(data.shards.order\)"):
        check_resumable(_state("train.sortagrad=false"), _config(*sequential))
    with pytest.raises(CheckpointError, match=r"\(data.shards.shuffle_buffer\)"):
        check_resumable(_state(*sequential), _config(*sequential,
                                                     "data.shards.shuffle_buffer=10"))
    older = _state()  # written before the section existed: its run read by offset
    del older.config["data"]["shards"]
    check_resumable(older, _config())


def test_what_a_resume_keeps_is_marked_on_the_config():
    kept = {".".join(path): section for path, section in kept_on_resume()}
    assert kept == {"data.sample_rate": False, "data.vocabulary": False, "data.lowercase": False,
                    "data.strip_punctuation": False, "data.shards": True,
                    "features": True, "model": True,
                    "optim.name": False, "optim.ema_decay": False, "train.seed": False,
                    "train.batch_size": False, "train.batch_seconds": False,
                    "train.micro_batch_size": False, "train.sortagrad": False}


@pytest.mark.parametrize("key, value", [("model.rnn.batch_norm", "false"),
                                        ("features.spec_augment.time_width", "0.1"),
                                        ("model.fc_hidden", "32")])
def test_a_key_added_to_a_kept_section_later_resumes_at_its_default(key, value):
    older = _state()  # written before the key existed: its run had the key's default
    section, *inner, name = key.split(".")
    stored = older.config[section]
    for part in inner:
        stored = stored[part]
    del stored[name]
    check_resumable(older, _config())
    with pytest.raises(CheckpointError, match=rf"the checkpoint's {section} config differs from "
                                              rf"this run's \({key}\)"):
        check_resumable(older, _config(f"{key}={value}"))


def test_what_may_change_on_a_resume_passes():
    check_resumable(_state(), _config("train.epochs=50", "optim.lr=1e-4", "train.num_threads=1",
                                      "data.num_workers=0", "train.output_dir=elsewhere"))


def _corpus(root: str, durations=(1.0, 2.5), labels=((1, 2), (3,))) -> Corpus:
    utterances = [Utterance(f"{root}/{i}.wav", "text", duration)
                  for i, duration in enumerate(durations)]
    return Corpus("m.jsonl", utterances, [list(label) for label in labels])


def test_the_data_digest_follows_durations_and_labels_not_paths():
    digest = training_data_digest(_corpus("/disk1"))
    assert training_data_digest(_corpus("/disk2")) == digest  # the corpus copied elsewhere
    assert training_data_digest(_corpus("/disk1", durations=(1.0, 2.6))) != digest
    assert training_data_digest(_corpus("/disk1", labels=((1, 2), (4,)))) != digest
    assert training_data_digest(_corpus("/disk1", labels=((1,), (2, 3)))) != digest


def test_a_resume_on_other_utterances_is_refused():
    then = {"utterances": 16, "hours": 0.012, "digest": "a"}
    now = {"utterances": 6, "hours": 0.002, "digest": "b"}
    with pytest.raises(CheckpointError, match=r"last.pt: the training data differ from the "
                                              r"checkpoint's \(6 utterances, 0.002 h now; 16, "
                                              r"0.012 h then\)"):
        check_same_data(_state(train_data=then), now, "last.pt")
    check_same_data(_state(train_data=then), {**now, "digest": "a"}, "last.pt")
    check_same_data(_state(train_data={"utterances": 16, "hours": 0.012}), now,
                    "last.pt")  # older


def test_another_thread_or_process_count_resumes_with_a_warning(caplog):
    caplog.set_level(logging.INFO, logger="deepspeech.training.resume")
    warn_if_not_exact(_state("train.num_threads=2"), _config("train.num_threads=2"), 1)
    assert not caplog.records
    warn_if_not_exact(_state("train.num_threads=2", ranks=2), _config("train.num_threads=1"), 1)
    text = caplog.text
    assert "trained with train.num_threads=2, this run uses 1" in text
    assert "written by 2 process(es), this run has 1" in text and "not bit for bit" in text
    caplog.clear()
    deterministic = ("distributed.deterministic=true", "train.micro_batch_size=4")
    warn_if_not_exact(_state(*deterministic, ranks=4), _config(*deterministic), 2)
    assert [r.levelname for r in caplog.records] == ["INFO"]
    assert "distributed.deterministic keeps the bits" in caplog.text


def test_each_rank_takes_its_own_rng_state_or_one_of_the_others():
    state = _state(ranks=2)
    assert [rng_state_for_rank(state, rank)["rank"] for rank in range(4)] == [0, 1, 0, 1]


def test_changed_optimization_settings_are_named_with_the_rate_they_give(caplog):
    state = _state("train.epochs=10", state=RunState(step=500),
                   optimizer={"param_groups": [{"lr": 3e-5}]})
    warn_if_optimization_changed(state, _config("train.epochs=10"), 3e-5)
    assert not caplog.records
    warn_if_optimization_changed(state, _config("train.epochs=20", "optim.weight_decay=0.01"),
                                 1.5e-4)
    assert caplog.records[0].levelname == "WARNING"
    assert ("optim.weight_decay, train.epochs changed; this run's settings apply from step 500 "
            "on, where the learning rate is 0.00015 (the checkpoint's run was at 3e-05)"
            in caplog.text)


def test_best_pt_is_chosen_afresh_when_the_validation_set_changes(caplog):
    state = _state(state=RunState(best_wer=0.25, validation={"manifest": "dev.jsonl",
                                                             "utterances": 86}))
    assert best_wer_to_keep(state, "dev.jsonl", 86, "last.pt") == 0.25
    assert best_wer_to_keep(state, "", 0, "last.pt") == 0.25  # no validation now
    older = _state(state=RunState(best_wer=0.25))
    assert best_wer_to_keep(older, "dev.jsonl", 86, "last.pt") == 0.25
    assert not caplog.records
    assert best_wer_to_keep(state, "other.jsonl", 86, "last.pt") == float("inf")
    assert best_wer_to_keep(state, "dev.jsonl", 20, "last.pt") == float("inf")  # val_limit
    assert ("last.pt was validated on dev.jsonl (86 utterances), this run validates on "
            "dev.jsonl (20): best.pt is chosen afresh" in caplog.text)
