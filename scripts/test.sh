#!/usr/bin/env bash
# Set up (first time) and run the test suite (extra arguments go to pytest).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$ROOT"
# --dist loadfile: each file's tests on one worker, so module-scoped fixtures (the fitted
# models of tests/test_pymc_conventions.py) are built once, not once per worker.
# --no-loadscope-reorder (pytest-xdist >= 3.8): files are handed out in collection order,
# which tests/conftest.py starts with the longest files (LONGEST_FIRST), rather than in
# order of their number of tests, which would leave the few long files for the end.
exec "$VENV/bin/python" -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=25 "$@"
