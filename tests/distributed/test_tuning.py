"""All-reduce rules files: parsing, the errors that name the key, choosing from timings."""

from __future__ import annotations

import json

import pytest

from deepspeech.distributed.tuning import (
    FORMAT,
    Rule,
    Rules,
    TuningFileError,
    load_rules,
    parse_rules,
    rules_from_timings,
)

RULES = Rules(2, 1, (Rule(0, "hierarchical"), Rule(512 << 10, "ring", 256 << 10),
                     Rule(2 << 20, "ring")), "test machine")


def body(**changes: object) -> str:
    data = json.loads(RULES.to_json())
    data.update(changes)
    return json.dumps(data)


def test_rules_survive_a_round_trip_and_pick_the_last_rule_reached() -> None:
    again = parse_rules(RULES.to_json(), "rules.json")
    assert again == RULES
    assert again.rule_for(0).algorithm == "hierarchical"
    assert again.rule_for((512 << 10) - 1).algorithm == "hierarchical"
    assert again.rule_for(512 << 10) == Rule(512 << 10, "ring", 256 << 10)
    assert again.rule_for(1 << 30) == Rule(2 << 20, "ring")


@pytest.mark.parametrize(("text", "message"), [
    ("{", r"rules.json: not JSON \(line 1"),
    ("[]", "rules.json: expected a JSON object"),
    (body(format="other/1"), f"rules.json: format: expected '{FORMAT}'"),
    (body(world_size=1), "rules.json: world_size: must be an integer of at least 2"),
    (body(nodes=3), "rules.json: nodes: must be an integer from 1 to world_size"),
    (body(rules=[]), "rules.json: rules: must be a non-empty list"),
    (body(rules=[{"from_bytes": 0, "algorithm": "tree"}]),
     r"rules.json: rules\[0\].algorithm: must be one of hierarchical"),
    (body(rules=[{"from_bytes": 0, "algorithm": "ring", "segment": 4}]),
     r"rules.json: rules\[0\]: unknown keys \['segment'\]"),
    (body(rules=[{"from_bytes": 0, "algorithm": "ring"}, {"from_bytes": 0, "algorithm": "ring"}]),
     r"rules.json: rules\[1\].from_bytes: must grow from rule to rule"),
    (body(rules=[{"from_bytes": 8, "algorithm": "ring"}]),
     r"rules.json: rules\[0\].from_bytes: the first rule must start at 0"),
    (body(rules=[{"from_bytes": 0, "algorithm": "ring", "segment_bytes": 0}]),
     r"rules.json: rules\[0\].segment_bytes: must be a positive integer"),
    (body(nodes=2, rules=[{"from_bytes": 0, "algorithm": "hierarchical"}]),
     r"rules.json: rules\[0\].algorithm: hierarchical needs ranks that share a node"),
])
def test_bad_files_name_the_key(text: str, message: str) -> None:
    with pytest.raises(TuningFileError, match=message):
        parse_rules(text, "rules.json")


def test_a_missing_file_is_named(tmp_path) -> None:
    with pytest.raises(TuningFileError, match="absent.json: cannot read the all-reduce rules"):
        load_rules(tmp_path / "absent.json")


def test_the_fastest_candidate_wins_each_size_and_equal_neighbours_merge() -> None:
    candidates = {"rd": Rule(0, "recursive_doubling"), "ring@1M": Rule(0, "ring", 1 << 20),
                  "ring@64M": Rule(0, "ring", 64 << 20)}
    seconds = {4096: (1, 2, 3), 8192: (1, 2, 3), 16384: (3, 1, 2), 32768: (3, 2, 1),
               65536: (3, 2, 1)}
    timings = {(name, size): (t,) for size, row in seconds.items()
               for name, t in zip(candidates, row, strict=True)}
    rules = rules_from_timings(timings, candidates, 2, 1, "here")
    assert rules.rules == (Rule(0, "recursive_doubling"), Rule(16384, "ring", 1 << 20),
                           Rule(32768, "ring", 64 << 20))
    assert parse_rules(rules.to_json(), "x") == rules


def test_the_built_in_choice_stays_unless_beaten_in_every_pass() -> None:
    candidates = {"hier": Rule(0, "hierarchical"), "ring@1M": Rule(0, "ring", 1 << 20),
                  "ring@4M": Rule(0, "ring", 4 << 20)}
    # per size, (hier, ring@1M, ring@4M) seconds in three passes
    passes = {
        # one noisy pass makes hier the fastest by median: the incumbent ring@1M stays
        32 << 20: [(1.0, 2.0, 3.0), (1.0, 2.0, 3.0), (3.0, 2.0, 3.0)],
        # ring@4M wins every pass, hier only two: the incumbent gives way to ring@4M
        64 << 20: [(1.0, 3.0, 2.0), (1.0, 3.0, 2.0), (4.0, 3.0, 2.5)],
        # no incumbent measured here: the lowest median
        128 << 20: [(1.0, 3.0, 2.0), (1.0, 3.0, 2.0), (4.0, 3.0, 2.5)],
    }
    timings = {(name, size): tuple(row[i] for row in rows) for size, rows in passes.items()
               for i, name in enumerate(candidates)}
    incumbents = {32 << 20: "ring@1M", 64 << 20: "ring@1M"}
    rules = rules_from_timings(timings, candidates, 2, 1, "here", incumbents)
    assert rules.rules == (Rule(0, "ring", 1 << 20), Rule(64 << 20, "ring", 4 << 20),
                           Rule(128 << 20, "hierarchical"))
