#!/usr/bin/env bash
# Set up (first time) and build the documentation with warnings as errors; extra arguments
# go to sphinx-build. The site lands in docs/_build/html (open index.html).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$ROOT"
exec "$VENV/bin/python" -m sphinx -W --keep-going -b html "$@" docs docs/_build/html
