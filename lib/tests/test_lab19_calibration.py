"""The search that chose lab11 and lab19's sft model (llmrl.tools.lab19_calibration): its rule, its
committed record and report, and that the shipped model is the rule's choice."""

from __future__ import annotations

import json

import pytest

from llmrl.sft import checkpoints
from llmrl.store import shipped
from llmrl.tools import lab19_calibration as C


def _row(act="gelu", seed=0, step=400, gates=(True, True, True), held=20, numeric=10, dist=1.0):
    return {"activation": act, "seed": seed, "step": step, "distance": dist, "held": held, "total": 31,
            "numeric_held": numeric, "numeric": 16, "qualitative_held": held - numeric, "qualitative": 15,
            "gates": dict(zip(("entropy", "hack", "greedy"), gates)), "outcomes": {}, "per_seed": {}}


def test_the_rule_puts_the_gates_first_then_claims_then_the_calibration():
    rows = [_row(seed=0, gates=(False, True, True), held=28), _row(seed=1, held=20), _row(seed=2, held=22, dist=3.0)]
    assert C.choose(rows)["seed"] == 2  # every gate passed beats more claims held with a gate missed
    rows.append(_row(seed=3, held=22, numeric=12, dist=3.5))
    assert C.choose(rows)["seed"] == 3  # as many held: more numeric ones
    rows.append(_row(seed=4, held=22, numeric=12, dist=0.5))
    assert C.choose(rows)["seed"] == 4  # and then the nearer calibration
    none = [_row(seed=5, gates=(False, False, True), held=30), _row(seed=6, gates=(False, True, True), held=10)]
    assert C.choose(none)["seed"] == 6  # no candidate passes all: the most gates passed
    with pytest.raises(ValueError, match="judged"):
        C.choose([])


def test_candidates_are_admissible_nearest_first_and_apart():
    rows = [{"step": s, "greedy": g, "sampled_T1": t1, "sampled_T2": t2} for s, g, t1, t2 in (
        (300, 0.80, 0.55, 0.20),   # on target
        (303, 0.80, 0.55, 0.21),   # as near, but 3 steps from 300
        (320, 0.83, 0.56, 0.22),
        (340, 0.78, 0.52, 0.28),   # T = 2 not below 0.27: not admissible
        (360, 0.86, 0.60, 0.22),   # greedy more than 0.05 from 0.80: not admissible
        (380, 0.77, 0.53, 0.24),
        (400, 0.81, 0.55, 0.23))]
    assert [r["step"] for r in C.pick_candidates(rows)] == [300, 400, 320]
    assert [r["step"] for r in C.pick_candidates(rows, per_run=5)] == [300, 400, 320, 380]
    assert C.pick_candidates([rows[3], rows[4]]) == []


def test_the_report_is_written_from_the_committed_records(tmp_path, monkeypatch):
    rows = C._record("candidates")
    assert rows, "docs/lab19-calibration/candidates.json holds no judged candidate"
    out = tmp_path / "report.md"
    C.write_report(out)
    text = out.read_text()
    assert text == C.REPORT.read_text(), "docs/lab19-calibration.md is not what its records give: --report-only"
    assert C.RULE in text
    for r in rows:
        assert f"| {r['activation']}" in text and f"| {r['step']} |" in text and f"{r['held']}/{r['total']}" in text
    assert sum("(chosen)" in line for line in text.splitlines()) == 1


def test_the_shipped_sft_model_is_the_rules_choice():
    best = C.choose(C._record("candidates"))
    assert checkpoints.COURSE_SFT == C.run_config(best["activation"], best["seed"])
    assert checkpoints.SFT_STEP == best["step"] == shipped.manifest()["models"]["sft"]["step"]
    entry = shipped.manifest()["models"]["sft"]
    # the file's calibration is the one the search judged the candidate on (the same machine, same bits)
    assert {k: entry["calibration"][k] for k in ("greedy", "sampled_T1", "sampled_T2")} == {
        k: best["calibration"][k] for k in ("greedy", "sampled_T1", "sampled_T2")}
    runs = {(r["activation"], r["seed"]) for r in C._record("runs")}
    assert runs == set(C.RUNS), f"runs of the rule not scanned: {set(C.RUNS) - runs}"
    json.dumps(best)


def test_a_candidate_is_what_the_library_loads_inside_the_block_and_only_there(tmp_path, monkeypatch):
    # The search judges each candidate through the library's own loader (candidate_models.models_copy
    # and shipped_as): inside the block load_checkpoint("sft") must give the candidate's weights with
    # its step, outside it the shipped model, and the other roles stay the shipped files.
    import torch

    from llmrl.sft.checkpoints import load_checkpoint

    monkeypatch.setattr(C, "WORK", tmp_path)
    _, state = shipped.load_state("sft")
    bumped = {k: v + 1.0 if v.is_floating_point() else v for k, v in state.items()}
    run = tmp_path / "runs" / "relu-seed1"
    run.mkdir(parents=True)
    torch.save(bumped, run / "step123.pt")
    shipped_dir, shipped_runs = shipped.MODELS_DIR, dict(checkpoints.SHIPPED_RUNS)

    with C.candidate("relu", 1, 123):
        model, meta = load_checkpoint("sft", with_meta=True, progress=False)
        assert meta["step"] == 123 and shipped.MODELS_DIR == run / "models-step123"
        assert all(torch.equal(model.state_dict()[k], bumped[k]) for k in bumped)
        assert shipped.load_state("teacher", run / "models-step123")[0]["sha256"] == \
            shipped.load_state("teacher", shipped_dir)[0]["sha256"]
    assert shipped.MODELS_DIR == shipped_dir and checkpoints.SHIPPED_RUNS == shipped_runs
    model = load_checkpoint("sft", progress=False)
    assert all(torch.equal(model.state_dict()[k], state[k]) for k in state)

    with pytest.raises(RuntimeError, match="judging"):  # put back when the block raises, too
        with C.candidate("relu", 1, 123):
            raise RuntimeError("judging failed")
    assert shipped.MODELS_DIR == shipped_dir and checkpoints.SHIPPED_RUNS == shipped_runs


def test_a_models_copy_names_a_role_the_library_does_not_ship(tmp_path):
    from llmrl.tools import candidate_models

    with pytest.raises(ValueError, match="'tutor'"):
        candidate_models.models_copy(tmp_path / "models", {"tutor": (tmp_path / "x.pt", 1)}, recipe="test")
    assert not (tmp_path / "models").exists()
