#!/usr/bin/env bash
# Create .venv with a Python >= 3.12 and install pymc-gpc with its test, plot and docs extras.
# Sourced by scripts/run.sh and scripts/test.sh; does nothing when already up to date.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
STAMP="$VENV/.pymc-gpc-installed"

is_312() {  # is "$1" a Python >= 3.12?
    "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1
}

find_python() {
    local c v
    for c in "${PYTHON:-}" python3.14 python3.13 python3.12 python3 python; do
        [ -n "$c" ] || continue
        if command -v "$c" >/dev/null 2>&1 && is_312 "$(command -v "$c")"; then
            command -v "$c"; return 0
        fi
    done
    if command -v pyenv >/dev/null 2>&1; then  # pyenv-installed versions, newest first
        for v in $(pyenv versions --bare 2>/dev/null | grep -E '^3\.(1[2-9])(\.[0-9]+)?$' | sort -t. -k2,2nr -k3,3nr); do
            c="$(PYENV_VERSION="$v" pyenv which python 2>/dev/null || true)"
            if [ -n "$c" ] && is_312 "$c"; then echo "$c"; return 0; fi
        done
    fi
    for c in /usr/local/bin/python3.1[2-9] /usr/bin/python3.1[2-9] "$HOME"/.pyenv/versions/3.1[2-9]*/bin/python; do
        if [ -x "$c" ] && is_312 "$c"; then echo "$c"; return 0; fi
    done
    return 1
}

if [ ! -x "$VENV/bin/python" ] || ! is_312 "$VENV/bin/python"; then
    if ! PY="$(find_python)"; then
        cat >&2 <<'MSG'
pymc-gpc needs Python 3.12 or newer (PyMC 6 does), and none was found on PATH,
through pyenv, or in the usual places. Install one, for example
    pyenv install 3.12        (then run this command again), or
    apt-get install python3.12 python3.12-venv,
or point to it explicitly:  PYTHON=/path/to/python3.12 bash scripts/run.sh
MSG
        exit 1
    fi
    echo "setup: creating .venv with $PY ($("$PY" --version))" >&2
    rm -rf "$VENV"
    "$PY" -m venv "$VENV"
fi

if [ ! -f "$STAMP" ] || [ "$ROOT/pyproject.toml" -nt "$STAMP" ]; then
    echo "setup: installing pymc-gpc and its test, plot and docs extras into .venv" >&2
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet -e "$ROOT[test,plot,docs]"
    # The docs test drives a headless Chromium (scripts/check_site.py); Playwright's own
    # browser download needs a CDN, so take Debian's where we may install packages. Best
    # effort: without it the browser test skips and says why.
    if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
            echo "setup: installing Debian's chromium for the docs site check" >&2
            { timeout 300 apt-get update -qq && DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq chromium; } \
                >/dev/null 2>&1 || echo "setup: chromium could not be installed; the browser check of the docs will skip" >&2
        else
            echo "setup: no chromium found; the browser check of the docs will skip (apt-get install chromium)" >&2
        fi
    fi
    touch "$STAMP"
fi

export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"
export MKL_NUM_THREADS="${MKL_NUM_THREADS:-1}"
