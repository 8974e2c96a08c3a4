#!/usr/bin/env bash
# The FSDD connected-digits recipe (configs/fsdd.yaml), scored on the held-out test speaker:
#   scripts/recipe_fsdd.sh ../shared/data/fsdd [train.key=value ...]
exec "$(dirname "${BASH_SOURCE[0]}")/recipe.sh" fsdd "$@"
