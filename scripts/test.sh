#!/usr/bin/env bash
# Set up (first time) and run the test suite (extra arguments go to pytest).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$ROOT"
exec "$VENV/bin/python" -m pytest -q -n 2 "$@"
