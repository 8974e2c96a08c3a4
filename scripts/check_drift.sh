#!/usr/bin/env bash
# Would the registry hand a user a working install today? Resolves pyproject.toml's ranges
# afresh, without the lock, into a throwaway venv (as `pip install deepspeech2` would), then
# runs `deepspeech doctor` there: torch, torchaudio's library, the beam decoder
# (flashlight-text), MPI (mpi4py, two ranks), soundfile, safetensors. Exit status 1 names
# the broken pair and the fix. CI runs it before the tests (pip's cache is warm there).
#   bash scripts/check_drift.sh                               pyproject's ranges as they are
#   bash scripts/check_drift.sh torch==2.11.0 torchaudio==2.11.1   those versions forced on top
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
venv="$(mktemp -d "${TMPDIR:-/tmp}/deepspeech-drift-XXXXXX")"
trap 'rm -rf "$venv"' EXIT
"$PYTHON" -m venv "$venv"
install() {  # pip install, its output shown only when it fails
    if ! "$venv/bin/pip" install --quiet "$@" >"$venv/pip.log" 2>&1; then
        cat "$venv/pip.log" >&2
        echo "scripts/check_drift.sh: pip install $* failed (above)" >&2
        exit 1
    fi
}
install --upgrade pip
# Built from a copy of what the distribution holds: building in the tree would leave build/
# and *.egg-info there.
mkdir "$venv/src"
cp -r "$ROOT/pyproject.toml" "$ROOT/README.md" "$ROOT/deepspeech" "$venv/src/"
install "$venv/src"
# Versions forced on top of the resolution: pip then warns that they break deepspeech2's
# own requirements, which is the point of trying them.
if [ "$#" -gt 0 ]; then
    install "$@"
fi
echo "scripts/check_drift.sh: resolved without the lock:" \
    "$("$venv/bin/pip" list 2>/dev/null | awk '$1=="torch"||$1=="torchaudio"{printf "%s %s  ", $1, $2}')"
cd "$venv"  # away from the tree, so that the installed copy is the one imported
if ! OMPI_MCA_btl="${OMPI_MCA_btl:-^ofi}" "$venv/bin/deepspeech" doctor; then
    echo "scripts/check_drift.sh: a fresh install from pyproject.toml's ranges is broken" \
        "(above). Pin a pair that loads in pyproject.toml (docs/INSTALL.md), then" \
        "bash scripts/lock.sh and the tests" >&2
    exit 1
fi
