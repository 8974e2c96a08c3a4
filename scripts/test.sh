#!/usr/bin/env bash
# README command 2: create .venv if missing, install with the dev extras, run the
# tests: fast ones first, then the slow and multi-process (mpirun) ones.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/venv.sh" dev
ruff check .
# The serve page's tests drive Debian's chromium: install it where that can be done (as root,
# with apt-get, quietly); without it those tests skip with the reason, and nothing fails here.
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; } \
        >/dev/null 2>&1 || echo "scripts/test.sh: chromium could not be installed; the serve page tests will skip" >&2
fi
pytest -q -m "not slow and not mpi" "$@"
pytest -q -m "slow or mpi" "$@"
