#!/usr/bin/env bash
# Regenerates the lock (scripts/lock/) from pyproject.toml's ranges: uv.lock, then the
# files that scripts/venv.sh installs with pip (main, dev, voices), each package pinned with
# its hashes.
#   bash scripts/lock.sh                         keep every locked version that still fits
#   bash scripts/lock.sh --upgrade               the newest versions the ranges allow
#   bash scripts/lock.sh --upgrade-package NAME  one package (and what it needs) moves
# Run it after editing pyproject.toml's dependencies, and when moving to a new torch; then
# the README's test command on a fresh clone (docs/INSTALL.md: why uv, how to move torch).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOCK="$ROOT/scripts/lock"
UV_VERSION=0.13.9
TOOL="${TMPDIR:-/tmp}/deepspeech-lock-uv-$UV_VERSION"
if [ ! -x "$TOOL/bin/uv" ]; then
    python3 -m venv "$TOOL"
    "$TOOL/bin/pip" install --quiet "uv==$UV_VERSION"
fi
# uv locks the project whose pyproject.toml is in the folder it runs in; a copy keeps uv.lock
# out of the repository's top level, which holds only the project's own folders.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp "$ROOT/pyproject.toml" "$ROOT/README.md" "$work/"
[ -f "$LOCK/uv.lock" ] && cp "$LOCK/uv.lock" "$work/"
(cd "$work" && "$TOOL/bin/uv" lock --quiet "$@")
header="# Made by scripts/lock.sh from pyproject.toml (uv $UV_VERSION): do not edit by hand.
# scripts/venv.sh installs it with pip --require-hashes, then the project with --no-deps."
export_lock() {  # $1: the file, then uv export's options
    local out="$1"; shift
    { echo "$header"; (cd "$work" && "$TOOL/bin/uv" export --quiet --frozen --no-header \
        --no-emit-project --format requirements-txt "$@"); } > "$work/$out"
}
export_lock main.txt
export_lock dev.txt --extra dev
export_lock voices.txt --extra voices
cp "$work/uv.lock" "$work/main.txt" "$work/dev.txt" "$work/voices.txt" "$LOCK/"
grep -E '^(torch|torchaudio)==' "$LOCK/main.txt" | cut -d' ' -f1
