"""Which voices speak the corpus, and which split each one belongs to.

A speaker is a base voice (accent: ``en-us``, ``en-gb-scotland`` ...) combined
with a voice variant from ``espeak-ng-data/voices/!v`` (``m3``, ``f2``,
``klatt4`` ...). The variant carries most of the voice identity (pitch,
formants, synthesizer), so the splits are cut by variant: the test set only has
variants never heard in training and measures generalization to new voices.

Variants that make the task unlearnable are dropped by rules read from their
files: whispered or breathy ones (little voicing, strong breath noise), strong
echo or comb filtering ("robot" voices), heavy roughness, very low pitch, the
speed-test variant, and variants that move or remove the first three formants,
which carry the vowel identity.

The other engines' voices are recordings of people (or models trained on
them); those are split by person (:func:`split_voices`), so that a person
heard in training, through any engine, is never in dev or test.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from deepspeech.data.synth.espeak import data_path

if TYPE_CHECKING:
    from deepspeech.data.synth.engine import Voice

# Base voices and how often they speak; all are espeak-ng 1.52 voices.
BASE_VOICES = {
    "en": (
        ("en-us", 4.0), ("en", 3.0), ("en-gb-x-rp", 1.0), ("en-us-nyc", 1.0),
        ("en-gb-scotland", 1.0), ("en-029", 1.0), ("en-gb-x-gbclan", 0.5),
        ("en-gb-x-gbcwmd", 0.5),
    ),
    "cmn": (("cmn", 1.0),),
}
SPLITS = ("train", "dev", "test")


@dataclass(frozen=True)
class Variant:
    """A voice variant file and the family it is split within."""

    name: str
    group: str  # "klatt" (Klatt synthesizer), "high" (high-pitched) or "low"


def _read_settings(path: Path) -> tuple[dict[str, list[int]], dict[int, list[int]]]:
    settings: dict[str, list[int]] = {}
    formants: dict[int, list[int]] = {}
    for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
        line = raw.split("//")[0].strip()
        if not line or line.startswith("#"):
            continue
        key, *values = line.split()
        try:
            numbers = [int(value) for value in values]
        except ValueError:
            numbers = []
        if key == "formant" and numbers:
            formants[numbers[0]] = numbers[1:]
        else:
            settings[key.lower()] = numbers
    return settings, formants


def rejection_reason(path: Path) -> str | None:
    """Why a variant file is unfit for training data, or None if it is fine."""
    settings, formants = _read_settings(path)
    if " " in path.name:
        return "name has a space"
    if settings.get("voicing", [64])[0] < 30:
        return "whispered (voicing < 30)"
    if max(settings.get("breath", [0]) or [0]) > 50:
        return "breathy (breath > 50)"
    if len(settings.get("echo", [])) > 1 and settings["echo"][1] >= 50:
        return "echo or robot comb (echo amplitude >= 50)"
    if settings.get("roughness", [0])[0] > 10:
        return "rough (roughness > 10)"
    if min(settings.get("pitch", [82]) or [82]) < 50:
        return "pitch below 50 Hz"
    if "fast_test2" in settings:
        return "speed-test variant"
    for number in (1, 2, 3):
        values = formants.get(number)
        if values and len(values) >= 2 and (values[1] == 0 or not 50 <= values[0] <= 160):
            return f"formant {number} moved or removed"
    return None


def usable_variants(folder: Path | None = None) -> list[Variant]:
    """The variants that pass :func:`rejection_reason`, sorted by name."""
    folder = folder or data_path() / "voices" / "!v"
    variants = []
    for path in sorted(folder.iterdir()):
        if not path.is_file() or rejection_reason(path) is not None:
            continue
        settings, _ = _read_settings(path)
        pitch = settings.get("pitch", [82])
        if "klatt" in settings:
            group = "klatt"
        elif (pitch[0] if pitch else 82) >= 120:
            group = "high"
        else:
            group = "low"
        variants.append(Variant(path.name, group))
    return variants


def split_variants(
    variants: list[Variant], seed: int, dev_fraction: float, test_fraction: float
) -> dict[str, list[str]]:
    """Disjoint variant names per split, stratified by group, deterministic for the seed.

    Each group gives about its share to dev and test, so that every split hears
    Klatt, high- and low-pitched voices; a split with a non-zero fraction gets at
    least one variant.
    """
    fractions = {"dev": dev_fraction, "test": test_fraction}
    chosen: dict[str, list[str]] = {split: [] for split in SPLITS}
    pools: dict[str, list[str]] = {}
    for variant in variants:
        pools.setdefault(variant.group, []).append(variant.name)
    for group in sorted(pools):
        names = sorted(pools[group])
        digest = hashlib.sha256(f"{seed}/voices/{group}".encode()).digest()
        random.Random(int.from_bytes(digest[:8], "little")).shuffle(names)
        for split in ("test", "dev"):
            take = round(fractions[split] * len(pools[group]))
            chosen[split] += names[:take]
            names = names[take:]
        chosen["train"] += names
    # A split asked for but too small to get a variant from any group takes one from
    # the largest split that can spare it.
    for split in ("test", "dev", "train"):
        wanted = split == "train" or fractions[split] > 0
        if wanted and not chosen[split]:
            donor = max(SPLITS, key=lambda name: len(chosen[name]))
            if len(chosen[donor]) < 2:
                raise ValueError("not enough usable voice variants for three splits")
            chosen[split].append(chosen[donor].pop())
    return {split: sorted(names) for split, names in chosen.items()}


def split_voices(
    voices: Mapping[str, Sequence[Voice]], seed: int, dev_fraction: float, test_fraction: float
) -> dict[str, dict[str, list[str]]]:
    """Voice names per split and engine: ``{split: {engine: [voice, ...]}}``, disjoint by person.

    ``voices`` maps each engine but espeak to its voices (espeak's variants are
    split by :func:`split_variants`). The people are shared out as the variants
    are; too few of them for every split asked for, and they all train (dev and
    test then hear only espeak-ng, or nobody: the caller says so). An engine
    absent from a split's mapping has no voice there.
    """
    people = sorted({voice.person for engine_voices in voices.values() for voice in engine_voices})
    wanted = 1 + (dev_fraction > 0) + (test_fraction > 0)
    if len(people) >= wanted:
        # one group: too few people to stratify
        split_of = {person: split for split, names in split_variants(
            [Variant(person, "recorded") for person in people], seed, dev_fraction, test_fraction
        ).items() for person in names}
    else:
        split_of = dict.fromkeys(people, "train")
    chosen: dict[str, dict[str, list[str]]] = {split: {} for split in SPLITS}
    for engine, engine_voices in voices.items():
        for voice in engine_voices:
            chosen[split_of[voice.person]].setdefault(engine, []).append(voice.name)
    return chosen
