#!/usr/bin/env bash
# Set up the course on this computer, in this folder only: a Python environment in .venv/ with the
# course library (wheels/), PyTorch (the CPU build) and JupyterLab, at the versions in requirements.txt.
#
#   ./setup.sh                      run it again after an interruption: it continues where it stopped
#   PYTHON=python3.12 ./setup.sh    use that Python (3.11 or newer) instead of the first one found
#   TORCH_INDEX=URL ./setup.sh      where PyTorch comes from. On Linux the default is PyTorch's CPU-only
#                                   index when it answers within a few seconds (PyPI's Linux build carries
#                                   several GB of GPU libraries the course does not use), else pip's own
#                                   index; TORCH_INDEX= (empty) always uses pip's own settings.
#   TORCH_CPU_INDEX=URL ./setup.sh  the CPU index tried first (a mirror of PyTorch's)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
KIT="$(pwd)"
START=$SECONDS
CPU_INDEX="${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"

fail() { echo "setup.sh: error: $*" >&2; exit 1; }
say() { echo "== $*"; }

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

# Does the index page URL answer within 5 s? (only a page counts, not a proxy's error page)
answers() {
    "$PY" - "$1" <<'EOF' >/dev/null 2>&1
import sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=5) as r:
        sys.exit(0 if r.status == 200 else 1)
except Exception:
    sys.exit(1)
EOF
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
COUNT="$(grep -cvE '^(#|$)' requirements.txt)"

echo "Setting up the course in $KIT/.venv (nothing outside this folder changes)."
if [ -x .venv/bin/python ]; then
    say "1/4 the environment .venv/ is already there ($(.venv/bin/python --version 2>&1)): completing it"
else
    say "1/4 creating the environment .venv/ with $("$PY" --version 2>&1) ($(command -v "$PY"))"
    "$PY" -m venv .venv || fail "could not create .venv/ (see the message above)"
fi
# --no-compile: pip would write bytecode for every .py file it installs (about 27 s of CPU here, most of it
# for the parts of torch and JupyterLab a notebook never imports); Python writes it on first import instead.
pip() { "$KIT/.venv/bin/python" -m pip --disable-pip-version-check "$@"; }

# Where PyTorch comes from: chosen before anything is downloaded, so an index this computer cannot reach
# costs five seconds, not pip's minute of retries.
have_torch="$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("torch").split("+")[0])' 2>/dev/null || true)"
if [ "$have_torch" = "${TORCH#torch==}" ]; then
    say "2/4 PyTorch $have_torch is already installed"
    TORCH_INDEX=""
else
    if [ -z "${TORCH_INDEX+set}" ]; then
        if [ "$(uname -s)" = Linux ]; then
            if answers "$CPU_INDEX/torch/"; then
                TORCH_INDEX="$CPU_INDEX"
            else
                TORCH_INDEX=""
                echo "   (PyTorch's CPU index $CPU_INDEX does not answer from here: PyTorch comes from pip's index instead)"
            fi
        else
            TORCH_INDEX=""  # macOS and Windows: PyPI's build is the CPU build
        fi
    fi
    if [ -n "$TORCH_INDEX" ]; then
        say "2/4 downloading PyTorch ${TORCH#torch==}, CPU build (about 200 MB), from $TORCH_INDEX"
        pip install --quiet --no-compile "$TORCH" --index-url "$TORCH_INDEX" ||
            fail "could not install $TORCH from $TORCH_INDEX (no network? run ./setup.sh again when online, or TORCH_INDEX= ./setup.sh)"
    else
        say "2/4 PyTorch ${TORCH#torch==} comes with the next step, from pip's index"
    fi
fi

# A new environment whose PyTorch comes with this step uses both cores of a small computer: one pip
# resolves everything (a dry run that writes what it chose into a report) while a second one unpacks
# PyTorch, by far the largest wheel; then two more install the rest, half each, from exactly the files
# the resolution chose (--no-deps and disjoint halves: no second search of the index, no package twice).
# pip check confirms that nothing is missing. Any trouble, and the plain install below completes it.
split_install() {
    local log=.venv/setup-log torch_pid half_pid ok=0
    pip install --quiet --no-deps --no-compile "$TORCH" > $log.torch 2>&1 &
    torch_pid=$!
    if ! pip install --quiet --dry-run --ignore-installed --report $log.report.json -r requirements.txt "$WHEEL" \
            > $log.resolve 2>&1; then
        wait "$torch_pid"; return 1
    fi
    .venv/bin/python - $log.report.json $log.half <<'PYEOF' || { wait "$torch_pid"; return 1; }
import json, re, sys
files = [item["download_info"]["url"] for item in json.load(open(sys.argv[1]))["install"]
         if re.sub(r"[-_.]+", "-", item["metadata"]["name"]).lower() != "torch"]  # being installed beside
for k in (0, 1):
    with open(f"{sys.argv[2]}{k}.txt", "w") as f:
        f.write("".join(url + "\n" for url in files[k::2]))
PYEOF
    pip install --quiet --no-deps --no-compile -r $log.half1.txt > $log.install1 2>&1 &
    half_pid=$!
    pip install --quiet --no-deps --no-compile -r $log.half0.txt > $log.install0 2>&1 || ok=1
    wait "$half_pid" || ok=1
    wait "$torch_pid" || ok=1
    [ "$ok" = 0 ] && pip check > $log.check 2>&1
}

source_of_pip="$(pip config list 2>/dev/null | sed -n "s/^[a-z:.]*index-url='\(.*\)'$/\1/p" | head -1)"
say "3/4 installing the course library and $COUNT pinned packages (JupyterLab, numpy, matplotlib...) from ${source_of_pip:-PyPI}"
plain_install() {
    pip install --quiet --no-compile -r requirements.txt "$WHEEL" ||
        fail "pip could not install the course's packages (no network? run ./setup.sh again when online)"
}
if [ -z "$have_torch" ] && [ -z "$TORCH_INDEX" ]; then
    split_install || {
        echo "   (the quicker install stopped; pip's plain install completes what it left. pip said:)"
        for f in .venv/setup-log.{torch,resolve,install0,install1,check}; do
            [ -s "$f" ] && tail -n 3 "$f" | sed 's/^/     /'
        done
        plain_install
    }
else
    plain_install
fi
rm -f .venv/setup-log*

# JupyterLab: no "Would you like to receive official Jupyter news?" pop-up over the notebook, no update checks.
settings=".venv/share/jupyter/lab/settings"
mkdir -p "$settings"
cat > "$settings/overrides.json" <<'EOF'
{
  "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": false}
}
EOF

say "4/4 checking the environment"
# (the imports also write the bytecode of what the notebooks import first)
.venv/bin/python -c 'import llmrl, torch, jupyterlab, ipywidgets, matplotlib
print(f"   llmrl {llmrl.__version__}, torch {torch.__version__}, jupyterlab {jupyterlab.__version__}")' ||
    fail "the environment does not import the course library; delete .venv/ and run ./setup.sh again"
echo
echo "Done in $((SECONDS - START)) s ($(du -sh .venv 2>/dev/null | cut -f1) in .venv/). Start JupyterLab with:  ./lab.sh"
