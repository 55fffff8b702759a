"""The old paths of the modules that moved out of the library's root into its layers.

The notebooks (and the students' own code) import ``llmrl.sampling``, ``from llmrl import
live_checks``, ``from llmrl.losses import LossBatch``: each old file directly in lib/llmrl/ makes
its name the very module object of its home, so a monkeypatch through either name, an ``is``
check or a class test holds across both. OLD lists them all: a new file directly in lib/llmrl/
needs a decision (a layer, or the core's one module utils.py), not a silent place at the root.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "llmrl"

# old module -> its home
OLD = {
    "llmrl.addition": "llmrl.tasks.addition",
    "llmrl.rewards": "llmrl.tasks.rewards",
    "llmrl.task_protocol": "llmrl.tasks.task_protocol",
    "llmrl.tinylm": "llmrl.lm.tinylm",
    "llmrl.stacked": "llmrl.lm.stacked",
    "llmrl.sampling": "llmrl.lm.sampling",
    "llmrl.toylm": "llmrl.lm.toylm",
    "llmrl.advantages": "llmrl.rl.advantages",
    "llmrl.losses": "llmrl.rl.losses",
    "llmrl.metrics": "llmrl.rl.metrics",
    "llmrl.evaluation": "llmrl.rl.evaluation",
    "llmrl.runner": "llmrl.experiments.runner",
    "llmrl.plotting": "llmrl.experiments.plotting",
    "llmrl.live_checks": "llmrl.experiments.live_checks",
    "llmrl.overopt": "llmrl.labs.overopt",
}
# the files directly in lib/llmrl/ that are real modules
ROOT_MODULES = {"__init__.py", "utils.py"}


def test_the_root_holds_exactly_the_old_paths_and_the_core():
    files = {p.name for p in PACKAGE.glob("*.py")}
    assert files == ROOT_MODULES | {f"{m.rpartition('.')[2]}.py" for m in OLD}


@pytest.mark.parametrize("old, home", sorted(OLD.items()))
def test_an_old_path_is_its_homes_module_object(old, home):
    new = importlib.import_module(home)
    assert importlib.import_module(old) is new
    assert sys.modules[old] is new and new.__name__ == home
    parent, _, leaf = old.rpartition(".")
    assert getattr(importlib.import_module(parent), leaf) is new  # from llmrl import sampling


def test_every_old_file_is_an_alias_of_its_home():
    # the import contract's reading of an alias file (its whole code is
    # sys.modules[__name__] = importlib.import_module("<home>")), so both tests see the same aliases
    import importlib.util

    spec = importlib.util.spec_from_file_location("_contract", Path(__file__).with_name("test_import_contract.py"))
    contract = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(contract)  # pytest's importlib mode: test files do not import each other by name
    assert contract.old_paths(PACKAGE) == OLD
    for old in OLD:
        first = (PACKAGE / f"{old.rpartition('.')[2]}.py").read_text().splitlines()[0]
        assert first.startswith('"""') and "kept for the notebooks" in first, old


def test_the_old_names_work_in_a_fresh_interpreter():
    # in a new process, through the old path first (as a notebook's set-up cell does), then the new
    code = ("import llmrl.sampling, llmrl.lm.sampling as s\n"
            "from llmrl.sampling import gather_logprobs\n"
            "from llmrl import live_checks, overopt, plotting, toylm, utils\n"
            "from llmrl.losses import LossBatch\n"
            "import llmrl.rl.losses as L, llmrl.experiments.live_checks as lc\n"
            "assert llmrl.sampling is s and gather_logprobs is s.gather_logprobs and LossBatch is L.LossBatch\n"
            "assert live_checks is lc and overopt.__name__ == 'llmrl.labs.overopt'\n"
            "import llmrl.sampling as again\n"
            "assert again is s\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=PACKAGE.parents[1])


def test_a_monkeypatch_through_the_old_path_is_seen_by_the_new(monkeypatch):
    import llmrl.lm.sampling as new
    import llmrl.sampling as old

    marker = object()
    monkeypatch.setattr(old, "gather_logprobs", marker)
    assert new.gather_logprobs is marker
