# Sourced by the README's commands: create .venv if missing and install the
# package into it (again only when pyproject.toml changed). Needs only python3.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
EXTRAS="${1:-}"
PYTHON="${PYTHON:-python3}"
if [ ! -x "$ROOT/.venv/bin/python" ]; then
    echo "creating $ROOT/.venv"
    "$PYTHON" -m venv "$ROOT/.venv"
    "$ROOT/.venv/bin/pip" install --quiet --upgrade pip
fi
STAMP="$ROOT/.venv/.installed${EXTRAS:+-$EXTRAS}"
WANT="$(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
    echo "installing deepspeech2${EXTRAS:+[$EXTRAS]} into .venv (torch is large: a few minutes the first time)"
    # The distribution was called "deepspeech" before, the name of Mozilla's DeepSpeech on
    # PyPI; either would shadow this package's import name, so neither stays installed.
    "$ROOT/.venv/bin/pip" uninstall --quiet --yes deepspeech 2>/dev/null || true
    "$ROOT/.venv/bin/pip" install --quiet -e "$ROOT${EXTRAS:+[$EXTRAS]}"
    echo "$WANT" > "$STAMP"
fi
export PATH="$ROOT/.venv/bin:$PATH"
# Open MPI: skip the libfabric transport (slow start-up on machines without it).
export OMPI_MCA_btl="${OMPI_MCA_btl:-^ofi}"
cd "$ROOT"
