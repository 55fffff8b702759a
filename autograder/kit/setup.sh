#!/usr/bin/env bash
# Set up the course on this computer, in this folder only: a Python environment in .venv/ with the
# course library (wheels/), PyTorch (the CPU build) and JupyterLab, at the versions in requirements.txt.
#
#   ./setup.sh                 run it again after an interruption: it continues where it stopped
#   PYTHON=python3.12 ./setup.sh    use that Python (3.11 or newer) instead of the first one found
#   TORCH_INDEX=URL ./setup.sh      where PyTorch comes from. On Linux the default is PyTorch's CPU-only
#                                   index (PyPI's Linux build carries several GB of GPU libraries the
#                                   course does not use); TORCH_INDEX= (empty) uses pip's own settings.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
KIT="$(pwd)"

fail() { echo "setup.sh: error: $*" >&2; exit 1; }

find_python() {
    local candidates=("${PYTHON:-}")
    [ -n "${PYTHON:-}" ] || candidates=(python3.13 python3.12 python3.11 python3 python)
    for py in "${candidates[@]}"; do
        if command -v "$py" >/dev/null 2>&1 &&
           "$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
            echo "$py"; return 0
        fi
    done
    return 1
}

PY="$(find_python)" || fail "no Python 3.11 or newer found${PYTHON:+ (PYTHON=$PYTHON)}. Install one (python.org, \
or your system's package manager), then run ./setup.sh again, or name it: PYTHON=/path/to/python3 ./setup.sh"
"$PY" -c 'import venv, ensurepip' 2>/dev/null ||
    fail "$PY has no venv module. On Debian or Ubuntu: sudo apt install python3-venv (for your Python version)"

shopt -s nullglob
wheels=(wheels/llmrl-*.whl)
shopt -u nullglob
[ ${#wheels[@]} -eq 1 ] || fail "wheels/ must hold one llmrl-*.whl, found ${#wheels[@]}: unpack the whole kit again"
WHEEL="${wheels[0]}"
TORCH="$(grep -E '^torch==' requirements.txt)" || fail "requirements.txt names no torch version"

if [ ! -x .venv/bin/python ]; then
    echo "== creating the environment .venv/ with $("$PY" --version 2>&1)"
    "$PY" -m venv .venv || fail "could not create .venv/ (see the message above)"
fi
pip() { "$KIT/.venv/bin/python" -m pip --disable-pip-version-check "$@"; }

if [ -z "${TORCH_INDEX+set}" ] && [ "$(uname -s)" = Linux ]; then
    TORCH_INDEX="https://download.pytorch.org/whl/cpu"
fi
if [ -n "${TORCH_INDEX:-}" ]; then
    echo "== installing $TORCH (CPU build, from $TORCH_INDEX)"
    pip install "$TORCH" --index-url "$TORCH_INDEX" ||
        fail "could not install $TORCH from $TORCH_INDEX (no network? run ./setup.sh again when online)"
fi
echo "== installing the course library and JupyterLab (requirements.txt)"
pip install -r requirements.txt "$WHEEL" ||
    fail "pip could not install the course's packages (no network? run ./setup.sh again when online)"

.venv/bin/python -c 'import llmrl, torch, jupyterlab, ipywidgets, matplotlib
print(f"llmrl {llmrl.__version__}, torch {torch.__version__}, jupyterlab {jupyterlab.__version__}")' ||
    fail "the environment does not import the course library; delete .venv/ and run ./setup.sh again"
echo
echo "Done. Start JupyterLab with:  ./lab.sh"
