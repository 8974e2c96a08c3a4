#!/usr/bin/env bash
# The AN4 recipe (configs/an4.yaml), scored on the speaker-disjoint dev split:
#   scripts/recipe_an4.sh ../shared/data/an4 [train.key=value ...]
exec "$(dirname "${BASH_SOURCE[0]}")/recipe.sh" an4 "$@"
