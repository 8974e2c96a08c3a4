#!/usr/bin/env bash
# The AN4 recipe (configs/an4.yaml): train + speaker-disjoint dev split, scored on dev.
#   scripts/recipe_an4.sh ../shared/data/an4 [train.key=value ...]
set -euo pipefail
CORPUS=an4
CORPUS_ROOT="$(realpath "${1:?usage: scripts/recipe_an4.sh AN4_ROOT [train overrides...]}")"
shift
PREPARE=""
SYNTH_HOURS=1
DEV=data/an4/dev.jsonl
EVAL=data/an4/dev.jsonl
source "$(dirname "${BASH_SOURCE[0]}")/recipe_common.sh"
