"""The course's models ship with the library (llmrl.store.shipped): loaded from the package, checked by
sha256, never trained behind the user's back (other configurations still go through the cache:
test_core_train)."""

import hashlib
import json
import shutil
from dataclasses import replace

import pytest
import torch

from llmrl.sft import checkpoints
from llmrl.store import shipped
from llmrl.tools import rebuild_models
from llmrl.sft.checkpoints import COURSE_SFT, COURSE_SNAPSHOTS, LAB21_SFT, LAB21_SNAPSHOTS, SHIPPED_RUNS, load_checkpoint
from llmrl.sft.supervised import Snapshot
from llmrl.hw4 import charlm


@pytest.fixture()
def empty_cache(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("LLMRL_CACHE", str(cache))
    return cache


def test_every_shipped_file_matches_its_manifest():
    m = shipped.manifest()
    assert set(m["models"]) == {"teacher", "student", "sft", "hw4-charlm"}
    for name, e in m["models"].items():
        data = (shipped.MODELS_DIR / e["file"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == e["sha256"] and len(data) == e["bytes"], name
        assert len(data) < 2_000_000, f"{name}: {len(data)} bytes; the four files are meant to stay a few MB"
    assert shipped.verify() == {n: e["sha256"] for n, e in m["models"].items()}


def test_the_shipped_models_are_the_course_recipe():
    """A changed recipe (SFT schedule, model size or nonlinearity, the character corpus) without a rebuild
    would leave the shipped weights describing another run than the code says."""
    m = shipped.manifest()["models"]
    recipes = {"sft": ("checkpoints.COURSE_SFT", COURSE_SFT), "teacher": ("checkpoints.LAB21_SFT", LAB21_SFT),
               "student": ("checkpoints.LAB21_SFT", LAB21_SFT)}
    assert set(recipes) == set(shipped.TINYLM_NAMES) == set(SHIPPED_RUNS)
    for name, (recipe, cfg) in recipes.items():
        assert SHIPPED_RUNS[name][0] == cfg
        assert m[name]["recipe"] == recipe and m[name]["recipe_key"] == shipped.recipe_key(cfg), (
            f"{name} was trained with another SFT recipe than {recipe}: rebuild the shipped models "
            "(python -m llmrl.tools.models --rebuild-shipped)")
    assert m["hw4-charlm"]["recipe_key"] == shipped.recipe_key(charlm.DEFAULT_PRETRAIN), (
        "hw4-charlm was pretrained with another configuration or corpus than hw4.charlm.DEFAULT_PRETRAIN: rebuild "
        "the shipped models (python -m llmrl.tools.models --rebuild-shipped)")
    assert {n: m[n]["step"] for n in shipped.TINYLM_NAMES} == {
        "teacher": LAB21_SFT.steps, "student": checkpoints.STUDENT_STEP, "sft": checkpoints.SFT_STEP}
    assert COURSE_SNAPSHOTS == {"sft": Snapshot(checkpoints.SFT_STEP)}
    assert LAB21_SNAPSHOTS == {"student": Snapshot(checkpoints.STUDENT_STEP), "teacher": Snapshot(LAB21_SFT.steps)}
    # both runs are the course's recipe with a nonlinearity and a seed of their own, each chosen by its lab's
    # recorded search (checkpoints' docstring says why): lab21's pair a GELU TinyLM
    assert LAB21_SFT.model.activation == "gelu"
    assert LAB21_SFT == replace(COURSE_SFT, seed=LAB21_SFT.seed, model=replace(COURSE_SFT.model, activation="gelu"))


def test_course_models_load_from_the_package_and_nothing_is_built(empty_cache):
    for name in shipped.TINYLM_NAMES:
        model, meta = load_checkpoint(name, progress=False, with_meta=True)
        _, state = shipped.load_state(name)
        assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
        assert meta["source"] == "shipped" and meta["step"] == shipped.manifest()["models"][name]["step"]
        assert not model.training
    base = charlm.load_base_model(progress=False)
    assert all(torch.equal(v, shipped.load_state("hw4-charlm")[1][k]) for k, v in base.state_dict().items())
    # the same request spelled out is still the course's
    assert load_checkpoint("sft", COURSE_SFT, dict(COURSE_SNAPSHOTS), progress=False, with_meta=True)[1]["source"] == "shipped"
    student, meta = load_checkpoint("student", LAB21_SFT, dict(LAB21_SNAPSHOTS), progress=False, with_meta=True)
    assert meta["source"] == "shipped" and student.config.activation == "gelu"
    assert load_checkpoint("teacher", progress=False).config == load_checkpoint("student", progress=False).config
    assert load_checkpoint("sft", progress=False).config.activation == COURSE_SFT.model.activation
    assert not empty_cache.exists() or not any(empty_cache.iterdir()), "the course's models were trained into the cache"
    with pytest.raises(ValueError, match="unknown checkpoint"):
        load_checkpoint("professor")


def test_a_damaged_or_missing_file_is_an_error_not_a_silent_rebuild(tmp_path):
    models = tmp_path / "models"
    shutil.copytree(shipped.MODELS_DIR, models)
    f = models / shipped.FILES["sft"]
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0x01
    f.write_bytes(bytes(data))
    with pytest.raises(shipped.ShippedModelError, match="rebuild"):
        shipped.load_state("sft", models)
    shipped.load_state("student", models)  # the others still load
    (models / shipped.FILES["teacher"]).unlink()
    with pytest.raises(shipped.ShippedModelError, match="missing"):
        shipped.load_state("teacher", models)
    with pytest.raises(shipped.ShippedModelError, match="no shipped model"):
        shipped.load_state("tutor", models)
    (models / shipped.MANIFEST_NAME).unlink()
    with pytest.raises(shipped.ShippedModelError, match="MANIFEST.json is missing"):
        shipped.manifest(models)


def test_choose_takes_the_snapshot_closest_to_the_published_calibration():
    rows = [{"step": 280, "greedy": 0.36, "sampled_T1": 0.19, "sampled_T2": 0.07, "kl_to_teacher": 2.13},
            {"step": 285, "greedy": 0.49, "sampled_T1": 0.27, "sampled_T2": 0.09, "kl_to_teacher": 1.88},
            {"step": 290, "greedy": 0.58, "sampled_T1": 0.28, "sampled_T2": 0.09, "kl_to_teacher": 1.63},
            {"step": 360, "greedy": 0.90, "sampled_T1": 0.57, "sampled_T2": 0.24},
            {"step": 375, "greedy": 0.80, "sampled_T1": 0.57, "sampled_T2": 0.26},
            {"step": 380, "greedy": 0.80, "sampled_T1": 0.55, "sampled_T2": 0.29}]  # too close to "below 30% at T=2"
    assert rebuild_models.choose(rows, "student")["step"] == 285
    assert rebuild_models.choose(rows, "sft")["step"] == 375
    with pytest.raises(ValueError, match="no scanned snapshot"):
        rebuild_models.choose([{"step": 1, "greedy": 0.5}], "student")


def test_the_manifest_records_where_and_how_the_models_were_chosen():
    m = shipped.manifest()
    assert {"torch", "cpu_capability", "date"} <= set(m["built"])
    scans = {"sft": {r["step"]: r for r in m["scan"]}, "student": {r["step"]: r for r in m["lab21_scan"]}}
    assert rebuild_models.choose(m["lab21_scan"], "student")["step"] == m["models"]["student"]["step"]  # the rule's choice
    # the sft model: the step of lab19's search (test_lab19_calibration checks it is the rule's choice),
    # one of the snapshots its run's scan measured
    assert m["models"]["sft"]["step"] == checkpoints.SFT_STEP and "sft_lab19_tried" not in m
    for name in ("student", "sft"):  # the row the choice was made on is the file's own calibration
        e = m["models"][name]
        assert {k: scans[name][e["step"]][k] for k in shipped.TARGETS[name]} == {k: e["calibration"][k] for k in shipped.TARGETS[name]}
    json.dumps(m)  # plain JSON


def test_command_line_checks_the_shipped_models(capsys):
    from llmrl.tools.models import main

    assert main([]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("teacher", "student", "sft", "hw4-charlm"))
    with pytest.raises(SystemExit):
        main(["--out", "/tmp/x"])
    with pytest.raises(SystemExit):
        main(["--parts", "lab21"])  # --parts goes with --rebuild-shipped
    with pytest.raises(SystemExit):
        main(["--rebuild-shipped", "--parts", "lab22"])
    assert "unknown lab22" in capsys.readouterr().err


def test_the_old_command_name_still_checks_the_shipped_models(capsys):
    """llmrl.tools.cache (make warm's old module, the grader's and the hub's) is llmrl.tools.models."""
    from llmrl.tools import cache, models

    assert cache.warm is models.verify_shipped
    assert cache.warm() is None
    assert cache.main([]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("teacher", "student", "sft", "hw4-charlm"))
    with pytest.raises(SystemExit):
        cache.main(["--help"])
    assert "python -m llmrl.tools.cache" in capsys.readouterr().out


def test_a_partial_rebuild_needs_a_manifest_to_keep_the_other_entries_from(tmp_path):
    with pytest.raises(ValueError, match="no manifest"):
        rebuild_models.rebuild(tmp_path / "empty", progress=False, parts=("lab21",))
    with pytest.raises(ValueError, match="parts must be some of"):
        rebuild_models.rebuild(tmp_path, progress=False, parts=("teacher",))


def test_the_cache_files_old_module_name_gives_the_same_objects():
    """llmrl.store.checkpoint_files (hw4's charlm imports it) is the old name of llmrl.store.cache_files."""
    from llmrl.store import cache_files, checkpoint_files

    for name in ("FORMAT_VERSION", "cache_dir", "load_state", "save_state"):
        assert getattr(checkpoint_files, name) is getattr(cache_files, name)
