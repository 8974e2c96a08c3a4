#!/usr/bin/env bash
# The FSDD connected-digits recipe (configs/fsdd.yaml): speakers disjoint between
# train, dev (tuning) and test (scored).
#   scripts/recipe_fsdd.sh ../shared/data/fsdd [train.key=value ...]
set -euo pipefail
CORPUS=fsdd
CORPUS_ROOT="$(realpath "${1:?usage: scripts/recipe_fsdd.sh FSDD_ROOT [train overrides...]}")"
shift
PREPARE="--sequences 3000 --max-digits 7"
SYNTH_HOURS=2
DEV=data/fsdd/dev.jsonl
EVAL=data/fsdd/test.jsonl
source "$(dirname "${BASH_SOURCE[0]}")/recipe_common.sh"
