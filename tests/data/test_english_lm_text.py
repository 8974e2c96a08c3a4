"""scripts/english_lm_text.py: raw passages become sentences the acoustic model can spell."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "english_lm_text.py"


def load_script():
    spec = importlib.util.spec_from_file_location("english_lm_text", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_passages_split_into_normalized_sentences():
    script = load_script()
    passages = iter([
        "In the beginning God created the heavens. And the earth was formless!",
        "He said, \u201cDon\u2019t go\u201d (quietly) -- and left; 'twas late",
        "Chapter 12: the 3 bears",  # digits: both sentences go whole, not cut
        "Caf\u00e9 au lait",  # a letter outside a-z: dropped too
    ])
    assert list(script.sentences(passages)) == [
        "in the beginning god created the heavens", "and the earth was formless",
        "he said", "don't go", "quietly", "and left", "twas late",
    ]
