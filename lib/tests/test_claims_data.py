"""The reproduction claims are data (lib/llmrl/tools/claims.json): every entry is checked.

:func:`llmrl.tools.claims.validate` must pass on the shipped file and catch each kind of broken
entry; the loaded claims are the ones ``python -m llmrl.tools.reproduce`` judges.
"""

from __future__ import annotations

import copy
import json

import pytest

from llmrl.tools import claims as CL
from llmrl.tools import reproduce as R
from llmrl.tools.claim_measures import measures

BLOB = json.loads(CL.PATH.read_text())


def _errors(blob, **kw):
    return CL.validate(blob, labs=R.LABS, experiments=R.EXPERIMENTS, measures=measures(), **kw)


def test_every_entry_of_the_claims_file_is_valid():
    assert _errors(BLOB) == []
    ids = [c["id"] for c in BLOB["claims"]]
    assert len(ids) == len(set(ids)) == len(R.CLAIMS) == len(measures())
    assert {c.check.kind for c in R.CLAIMS} <= set(CL.CHECK_KINDS)


def test_every_named_reason_is_used():
    text = json.dumps(BLOB["claims"])
    assert [name for name in BLOB["reasons"] if f'"@{name}"' not in text] == []


def _broken(edit):
    blob = copy.deepcopy(BLOB)
    edit(blob)
    return _errors(blob)


@pytest.mark.parametrize("edit, message", [
    (lambda b: b["claims"].append(copy.deepcopy(b["claims"][0])), "id used twice"),
    (lambda b: b["claims"][0]["check"].update(kind="roughly"), "check kind 'roughly' is not one of"),
    (lambda b: b["claims"][0]["check"].pop("tol"), "a near check needs tol"),
    (lambda b: b["claims"][0]["check"].update(reason="@NO_SUCH"), "unknown reason @NO_SUCH"),
    (lambda b: b["claims"][0]["check"].update(reason=""), "gives no reason"),
    (lambda b: b["claims"][0].pop("statement"), "missing statement"),
    (lambda b: b["claims"][0].update(colour="red"), "unknown field colour"),
    (lambda b: b["claims"][0].update(experiments=["lab11/nope"]), "unknown experiment 'lab11/nope'"),
    (lambda b: b["claims"][0].update(id="lab11.no-measure"), "no measure in claim_measures.py"),
    (lambda b: b["claims"].pop(0), "measure 'lab11.greedy-accuracy' has no claim"),
    (lambda b: b["claims"][0].update(lab="lab99"), "unknown lab 'lab99'"),
    (lambda b: b["claims"][0].update(min_seeds=1.5), "min_seeds must be a share"),
    (lambda b: b["claims"][0].update(fmt="{:.3q}"), "does not format a number"),
    (lambda b: b["claims"][0]["check"].update(lo=0.1), "has no use for lo"),
    # every claim says what in its run would make it fail
    (lambda b: b["claims"][0].pop("could_fail"), "missing could_fail"),
    (lambda b: b["claims"][0].update(could_fail="  "), "could_fail must say what in the run"),
    (lambda b: b["claims"][0].update(could_fail="@ACC_ABOUT"), "not a named reason"),
    (lambda b: b["claims"][0].update(could_fail="it could differ"), "could_fail is too short"),
    (lambda b: (b["claims"][0]["check"].update(reason="the whole of a reason that is long enough to pass"),
                b["claims"][0].update(could_fail="the whole of a reason that is long enough to pass")),
     "could_fail repeats the tolerance's reason"),
    (lambda b: b["claims"][1].update(could_fail=b["claims"][0]["could_fail"].upper()),
     "lab11.greedy-accuracy, lab11.accuracy-T1 give the same could-fail reason"),
    # a declared coincidence names another claim and says why the two are still two claims
    (lambda b: b["claims"][1].update(same_values={"as": "lab11.nope", "why": "both at a floor"}),
     "same_values names no claim 'lab11.nope'"),
    (lambda b: b["claims"][1].update(same_values={"as": "lab11.accuracy-T1", "why": "itself"}),
     "same_values names the claim itself"),
    (lambda b: b["claims"][1].update(same_values={"as": "lab11.greedy-accuracy", "why": ""}),
     "same_values must say why"),
    (lambda b: b["claims"][1].update(same_values={"as": "lab11.greedy-accuracy"}), "same_values must be"),
    (lambda b: b["claims"][1].update(same_values="lab11.greedy-accuracy"), "same_values must be"),
])
def test_a_broken_entry_is_reported(edit, message):
    errors = _broken(edit)
    assert any(message in e for e in errors), errors


def test_every_loaded_claim_carries_its_could_fail_reason_and_declarations():
    by_id = {c.id: c for c in R.CLAIMS}
    assert all(c.could_fail and len(c.could_fail.split()) >= CL.COULD_FAIL_WORDS for c in R.CLAIMS)
    declared = {c.id: c.same_values for c in R.CLAIMS if c.same_values}
    assert declared, "the shipped file declares its coinciding claims (p3's 3d+1d floor, format_copy's ceiling)"
    for cid, (other, why) in declared.items():
        assert other in by_id and other != cid and why
        assert set(by_id[cid].experiments) & set(by_id[other].experiments), (cid, other)


def test_load_refuses_a_broken_file(tmp_path):
    blob = copy.deepcopy(BLOB)
    blob["claims"][1]["check"]["kind"] = "about"
    path = tmp_path / "claims.json"
    path.write_text(json.dumps(blob))
    with pytest.raises(ValueError, match="lab11.accuracy-T1.*check kind 'about'"):
        CL.load(measures(), path)


def test_a_missing_claims_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="claims.json is missing"):
        CL.load(measures(), tmp_path / "claims.json")
