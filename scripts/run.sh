#!/usr/bin/env bash
# Set up (first time) and run the main job; with no arguments, on the bundled Pima data.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
exec "$VENV/bin/pymc-gpc" "$@"
