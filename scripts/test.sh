#!/usr/bin/env bash
# README command 2: create .venv if missing, install with the dev extras, run the
# tests: fast ones first, then the slow and multi-process (mpirun) ones.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/venv.sh" dev
ruff check .
pytest -q -m "not slow and not mpi" "$@"
pytest -q -m "slow or mpi" "$@"
