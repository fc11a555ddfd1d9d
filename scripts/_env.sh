# Sourced by scripts/*.sh: make .venv with the project installed (editable) and its extras.
# Idempotent and quick when nothing changed: reinstalls only when pyproject.toml is newer
# than the stamp. Nothing is installed outside the repository except apt packages that
# a script asks for explicitly.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "Longboat needs Python >= 3.11 (found: $("$PY" --version 2>&1))" >&2
    exit 1
fi
VENV="$ROOT/.venv"
EXTRAS="${LONGBOAT_EXTRAS:-dev}"
STAMP="$VENV/.installed-$(echo "$EXTRAS" | tr ',' '-')"
if [ ! -x "$VENV/bin/python" ]; then
    echo "==> creating $VENV" >&2
    "$PY" -m venv "$VENV"
fi
if [ ! -f "$STAMP" ] || [ "$ROOT/pyproject.toml" -nt "$STAMP" ]; then
    echo "==> installing longboat[$EXTRAS] into $VENV" >&2
    LOG="$VENV/install.log"
    if ! { "$VENV/bin/python" -m pip install --upgrade pip &&
           "$VENV/bin/python" -m pip install -e ".[$EXTRAS]"; } >"$LOG" 2>&1; then
        tail -40 "$LOG" >&2
        echo "pip install failed; full log in $LOG" >&2
        exit 1
    fi
    touch "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
