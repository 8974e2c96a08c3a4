"""A new run never mixes with, or silently replaces, the run already in train.output_dir."""

from __future__ import annotations

import pytest

from deepspeech.config import load_config
from deepspeech.errors import ConfigError
from deepspeech.training.checkpoint import load_checkpoint
from deepspeech.training.determinism import state_dict_digest
from deepspeech.training.metrics import read_metrics
from deepspeech.training.trainer import train

pytestmark = pytest.mark.slow


def _config(tiny_corpus, tiny_overrides, output_dir, *extra):
    return load_config(None, [*tiny_overrides(tiny_corpus, output_dir), "train.epochs=1",
                              "train.max_steps=2", *extra])


def test_a_used_output_dir_is_refused_and_kept(tiny_corpus, tiny_overrides, tmp_path):
    train(_config(tiny_corpus, tiny_overrides, tmp_path))
    before = {name: (tmp_path / name).read_bytes()
              for name in ("best.pt", "last.pt", "metrics.jsonl", "config.yaml")}
    with pytest.raises(ConfigError, match=r"already holds a run \(last.pt, best.pt, "
                                          r"metrics.jsonl\).*train.resume=.*--overwrite"):
        train(_config(tiny_corpus, tiny_overrides, tmp_path, "train.seed=1"))
    assert {name: (tmp_path / name).read_bytes() for name in before} == before


def test_overwrite_replaces_the_whole_run(tiny_corpus, tiny_overrides, tmp_path):
    train(_config(tiny_corpus, tiny_overrides, tmp_path))
    # Event files are named by second and process: mark the old folder's contents instead.
    stale = tmp_path / "tensorboard" / "events.out.tfevents.old"
    stale.write_bytes(b"")
    first = state_dict_digest(load_checkpoint(tmp_path / "best.pt").model)
    # Starting from the run that is being replaced reads its weights before they go.
    result = train(_config(tiny_corpus, tiny_overrides, tmp_path, "train.seed=1",
                           f"train.init_from={tmp_path / 'best.pt'}"), overwrite=True)
    assert result.steps == 2
    assert state_dict_digest(load_checkpoint(tmp_path / "best.pt").model) != first
    assert not stale.exists() and len(list((tmp_path / "tensorboard").iterdir())) == 1
    steps = [record["step"] for record in read_metrics(tmp_path / "metrics.jsonl")]
    assert steps == sorted(steps) and max(steps) == 2


def test_a_folder_without_results_needs_no_overwrite(tiny_corpus, tiny_overrides, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "config.yaml").write_text("left by a run that failed before its first step")
    assert train(_config(tiny_corpus, tiny_overrides, tmp_path)).steps == 2
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert "train:" in (tmp_path / "config.yaml").read_text()


def test_a_resume_into_another_runs_folder_is_refused_and_keeps_it(tiny_corpus, tiny_overrides,
                                                                   tmp_path):
    k1, base = tmp_path / "k1", tmp_path / "base"
    train(_config(tiny_corpus, tiny_overrides, k1, "train.max_steps=1"))
    train(_config(tiny_corpus, tiny_overrides, base, "train.seed=1"))
    before = {name: (base / name).read_bytes() for name in ("last.pt", "metrics.jsonl")}
    resume = _config(tiny_corpus, tiny_overrides, base, f"train.resume={k1 / 'last.pt'}")
    with pytest.raises(ConfigError, match=rf"{base} already holds a run \(last.pt, best.pt, "
                                          rf"metrics.jsonl\), not the one train.resume="
                                          rf"{k1 / 'last.pt'} continues; resume into {k1}"):
        train(resume)
    assert {name: (base / name).read_bytes() for name in before} == before
    # --overwrite replaces the other run, so the two histories never mix.
    assert train(resume, overwrite=True).steps == 2
    assert [r["step"] for r in read_metrics(base / "metrics.jsonl") if "train/loss" in r] == [2]
    # Into an empty folder, or its own, a resume needs no --overwrite.
    assert train(_config(tiny_corpus, tiny_overrides, tmp_path / "empty",
                         f"train.resume={k1 / 'last.pt'}")).steps == 2
    assert train(_config(tiny_corpus, tiny_overrides, k1,
                         f"train.resume={k1 / 'last.pt'}")).steps == 2


def test_writes_cut_short_by_a_kill_are_removed(tiny_corpus, tiny_overrides, tmp_path):
    train(_config(tiny_corpus, tiny_overrides, tmp_path, "train.max_steps=1"))
    left = [tmp_path / ".last.pt.k9x2_a1.tmp", tmp_path / ".metrics.jsonl.0q7zr.tmp"]
    for path in left:
        path.write_bytes(b"half a checkpoint")
    mine = tmp_path / ".notes.tmp"
    mine.write_text("not a write of a run")
    train(_config(tiny_corpus, tiny_overrides, tmp_path, f"train.resume={tmp_path / 'last.pt'}"))
    assert not any(path.exists() for path in left) and mine.exists()
    left[0].write_bytes(b"half a checkpoint")
    train(_config(tiny_corpus, tiny_overrides, tmp_path), overwrite=True)
    assert not left[0].exists()
