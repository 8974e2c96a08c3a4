# Sourced by the README's commands: create .venv if missing and install into it the locked
# dependencies (scripts/lock/, exact versions with hashes), then the project itself without
# resolving anything again; both again only when the lock or pyproject.toml changed.
# Needs only python3 (3.11 or newer).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
EXTRAS="${1:-}"
PYTHON="${PYTHON:-python3}"
case "$EXTRAS" in
    "") LOCKFILE="$ROOT/scripts/lock/main.txt" ;;
    dev) LOCKFILE="$ROOT/scripts/lock/dev.txt" ;;
    voices) LOCKFILE="$ROOT/scripts/lock/voices.txt" ;;
    *) echo "scripts/venv.sh: no lock for the extra '$EXTRAS' (locked: none, dev, voices)" >&2
       exit 2 ;;
esac
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "scripts/venv.sh: $PYTHON is $("$PYTHON" --version 2>&1 || echo missing); deepspeech needs" \
        "Python 3.11 or newer (PYTHON=python3.12 bash ... picks another)" >&2
    exit 2
fi
if [ ! -x "$ROOT/.venv/bin/python" ]; then
    echo "creating $ROOT/.venv"
    "$PYTHON" -m venv "$ROOT/.venv"
    "$ROOT/.venv/bin/pip" install --quiet --upgrade pip
fi
STAMP="$ROOT/.venv/.installed${EXTRAS:+-$EXTRAS}"
WANT="$(cat "$ROOT/pyproject.toml" "$LOCKFILE" | sha256sum | cut -d' ' -f1)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
    echo "installing the locked dependencies${EXTRAS:+ with [$EXTRAS]} into .venv" \
        "(torch is large: a few minutes the first time)"
    # The distribution was called "deepspeech" before, the name of Mozilla's DeepSpeech on
    # PyPI; either would shadow this package's import name, so neither stays installed.
    "$ROOT/.venv/bin/pip" uninstall --quiet --yes deepspeech 2>/dev/null || true
    "$ROOT/.venv/bin/pip" install --quiet --require-hashes --no-deps -r "$LOCKFILE"
    # The lock holds setuptools (torch needs it), so the project builds with it, offline.
    "$ROOT/.venv/bin/pip" install --quiet --no-deps --no-build-isolation -e "$ROOT"
    echo "$WANT" > "$STAMP"
fi
export PATH="$ROOT/.venv/bin:$PATH"
# Open MPI: skip the libfabric transport (slow start-up on machines without it).
export OMPI_MCA_btl="${OMPI_MCA_btl:-^ofi}"
cd "$ROOT"
