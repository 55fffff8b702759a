"""The answer-key check's task map (autograder/review/task_map.json) is well-formed data whose names are real:
every library target a function of llmrl, every notebook, solution cell and test cell one of the course's
source notebooks, every graded function defined by its solution cell; and a malformed file is refused
with a message naming the entry and the field."""

from __future__ import annotations

import copy
import json

import pytest

from autograder.review import task_map

pytestmark = pytest.mark.fast


def _data() -> dict:
    return json.loads(task_map.MAP_FILE.read_text())


def test_the_map_names_real_library_functions_and_real_notebook_tasks():
    assert task_map.TASKS, "the task map is empty"
    assert task_map.problems() == []


def test_every_assignment_with_graded_tasks_is_in_the_map():
    assert {t.assignment for t in task_map.TASKS} == {"lab11", "lab19", "lab21", "hw4"}


def test_the_map_reads_back_as_the_table_the_docs_show():
    table = task_map.what_the_library_can_do().splitlines()
    assert len(table) == 2 + len(task_map.TASKS)
    assert "`llmrl.rl.losses.clipped_surrogate`" in "\n".join(table)


@pytest.mark.parametrize("damage, words", [
    (lambda d: d["tasks"][0].pop("probe"), "missing fields ['probe']"),
    (lambda d: d["tasks"][0].update(colour="red"), "unknown fields ['colour']"),
    (lambda d: d["tasks"][0].update(function="not a name"), "is not a Python name"),
    (lambda d: d["tasks"][0].update(probe="(1, 2"), "probe is not a Python expression"),
    (lambda d: d["tasks"][0].update(probe="[1], {}"), "probe must read"),
    (lambda d: d["tasks"][0]["library"].append({"target": "os.system", "does": "x"}), "is not a dotted name in llmrl"),
    (lambda d: d["tasks"][0]["library"].append({"target": "llmrl.x"}), "needs exactly the fields"),
    (lambda d: d["tasks"].append(copy.deepcopy(d["tasks"][0])), "is in the map twice"),
    (lambda d: d.pop("anywhere"), "must be an object with the lists"),
])
def test_a_malformed_map_is_refused_naming_what_is_wrong(damage, words):
    data = _data()
    damage(data)
    with pytest.raises(task_map.TaskMapError, match=None) as err:
        task_map.parse(data)
    assert words in str(err.value)


def test_names_that_do_not_resolve_are_reported(tmp_path):
    data = _data()
    t = data["tasks"][0]
    t["library"] = [{"target": "llmrl.rl.losses.no_such_function", "does": "nothing"}]
    t["grade_id"], t["test_id"], t["function"] = "no_such_cell", "no_such_test", "nothing"
    second = copy.deepcopy(data["tasks"][1])
    second["notebook"] = "no_such_notebook"
    data["tasks"] = [t, second]
    tasks, anywhere = task_map.parse(data)
    found = "\n".join(task_map.problems(tasks, anywhere))
    assert "llmrl.rl.losses.no_such_function is no function of the library" in found
    assert "has no cell no_such_cell" in found and "has no test cell no_such_test" in found
    assert f"no source notebook source/{second['assignment']}/no_such_notebook.ipynb" in found


def test_a_solution_cell_that_does_not_define_the_graded_function_is_reported():
    data = _data()
    data["tasks"] = [dict(data["tasks"][0], function="renamed_function")]
    tasks, anywhere = task_map.parse(data)
    assert any("defines no function renamed_function" in p for p in task_map.problems(tasks, anywhere))


@pytest.mark.parametrize("written, home", [
    ("llmrl.sampling.gather_logprobs", "llmrl.lm.sampling.gather_logprobs"),   # an old path the notebooks keep
    ("llmrl.rl.evaluation.full_vocab_kl", "llmrl.rl.losses.full_vocab_kl"),    # a name another module imports
])
def test_a_target_named_through_another_path_is_reported_with_its_home(written, home):
    # the runtime watch knows a function by the module that defines it: another path would find nothing
    data = _data()
    data["tasks"] = [dict(data["tasks"][0], library=[{"target": written, "does": "does this task"}])]
    tasks, anywhere = task_map.parse(data)
    assert f"{written} is defined as {home}: name it there" in "\n".join(task_map.problems(tasks, anywhere))
