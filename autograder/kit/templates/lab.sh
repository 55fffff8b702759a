#!/usr/bin/env bash
# Start JupyterLab on the assignments (run ./setup.sh once first). It opens in your browser; the
# terminal shows its address. Stop it with Ctrl+C in this terminal. Extra arguments go to
# jupyter lab, e.g. ./lab.sh --no-browser --port 8890
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
[ -x .venv/bin/python ] || { echo "lab.sh: error: no environment yet: run ./setup.sh first" >&2; exit 1; }
exec .venv/bin/python -m jupyter lab --ServerApp.root_dir="$(pwd)/assignments" "$@"
