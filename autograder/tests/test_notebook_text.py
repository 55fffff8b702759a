"""What a student reads: the opening box, the graders' rubrics, optional answers, the course's own words.

- Every notebook opens with a box (points per task, expected time, how to test one task, what
  "done" looks like) whose points agree with the nbgrader metadata.
- Every written (hand-graded) answer cell is preceded by a locked cell `rubric_<grade_id>` whose
  rubric sits in a mark-scheme region (CONTRIBUTING.md, "Answers and rubrics for graders"): the
  release drops it, autograde restores it from the gradebook, the feedback drops it again. Its
  points add up to the cell's.
- No text of a mark-scheme region reaches a release notebook.
- The notebooks never mention "the handout" (nor do their release copies, outputs included, the
  library the kit ships or the kit's files) and share no run of seven words of prose with the
  handouts they were written from (checked against hashed fingerprints in
  handout_fingerprints.json, so the handouts' text is not stored here; refresh them with
  `python autograder/tests/test_notebook_text.py --refresh /path/to/seeds`).
- Sentences that describe what the code does say what it does: how many runs lab19 draws, the
  black dashed line of the live runs, the lab21 student's accuracy as the checkpoint measures it.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

import nbformat
import pytest

from autograder.course.layout import discover

LABS = discover()
FINGERPRINTS = Path(__file__).with_name("handout_fingerprints.json")
MARK = re.compile(r"^[^\n]*BEGIN MARK SCHEME[^\n]*$(.*?)^[^\n]*END MARK SCHEME[^\n]*$", re.M | re.S)
# Handout file for each assignment (the seeds' README maps them).
HANDOUTS = {"lab11": "004_234fe91e1886425a.txt", "lab19": "001_2394a650c38972e4.txt",
            "lab21": "000_706f698e2143e48e.txt", "hw4": "003_8e5cb1a6d34138da.txt"}
NGRAM = 7
# Words that formulas are made of: a shared run of them is shared notation, not shared prose.
MATH_WORDS = {"log", "pi", "mid", "frac", "text", "theta", "hat", "sum", "exp", "mathrm", "operatorname", "ref",
              "old", "min", "max", "clip", "mean", "std", "sqrt", "left", "right", "binom", "cdot", "quad"}


def _ids(labs):
    return [f"{lab.assignment}/{lab.name}" for lab in labs]


def _source(lab):
    return nbformat.read(lab.source, as_version=4)


def _release(lab):
    return nbformat.read(lab.release, as_version=4)


def _nbg(cell) -> dict:
    return cell.metadata.get("nbgrader", {}) or {}


def _graded_points(nb) -> dict[str, float]:
    return {_nbg(c)["grade_id"]: float(_nbg(c)["points"]) for c in nb.cells if _nbg(c).get("grade")}


def _written(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "markdown" and _nbg(c).get("grade") and _nbg(c).get("solution")]


# ----------------------------------------------------------------------------- the opening box

def _box(nb) -> str:
    first = next(c for c in nb.cells if c.cell_type == "markdown")
    return "\n".join(line[1:].strip() for line in first.source.splitlines() if line.startswith(">"))


@pytest.mark.parametrize("lab", LABS, ids=_ids(LABS))
def test_notebook_opens_with_a_box_of_points_time_testing_and_done(lab):
    nb = _source(lab)
    box = _box(nb)
    assert box, f"{lab.jupytext}: the first markdown cell has no box (a '> ' blockquote)"
    for words in ("**Before you start.**", "**Done** means"):
        assert words in box, f"{lab.jupytext}: the opening box lacks {words!r}"
    assert "**Testing one task.**" in box or "**Running one project.**" in box, f"{lab.jupytext}: how to test one task"
    assert re.search(r"\d+ (min|minutes|hours?|h)\b", box), f"{lab.jupytext}: the box gives no expected time"
    points = _graded_points(nb)
    total = re.search(r"\*\*Before you start\.\*\* (\d+) points", box)
    assert total and float(total.group(1)) == sum(points.values()), (
        f"{lab.jupytext}: the box says {total and total.group(1)} points, the graded cells hold {sum(points.values()):g}")


@pytest.mark.parametrize("lab", LABS, ids=_ids(LABS))
def test_the_boxs_points_per_task_match_the_graded_cells(lab):
    nb = _source(lab)
    points = _graded_points(nb)
    defined = {}  # function name -> the grade_id of the solution cell that defines it
    for c in nb.cells:
        if c.cell_type == "code" and _nbg(c).get("solution"):
            for name in re.findall(r"^def (\w+)\(", c.source, flags=re.M):
                defined[name] = _nbg(c)["grade_id"]
    rows = [r for r in _box(nb).splitlines() if r.startswith("|") and not r.startswith("|---")][1:]
    assert rows, f"{lab.jupytext}: the box has no table of tasks"
    seen = set()
    for row in rows:
        cells = [x.strip() for x in row.strip("|").split("|")]
        label, want = cells[0], float(cells[-2])
        names = [n for n in re.findall(r"`(\w+)`", cells[1]) if n in defined]
        if names:  # a task's tests are split by concern: test_<task>_<concern>
            cells_of_row = {g for n in names for g in points if g.startswith(f"test_{defined[n]}_")}
        elif re.fullmatch(r"\d", label):  # a project: its write-up
            cells_of_row = {f"writeup_project{label}"}
        elif label == "report":
            cells_of_row = {_nbg(c)["grade_id"] for c in _written(nb)}
        else:
            raise AssertionError(f"{lab.jupytext}: the box's row {row!r} names no task function")
        missing = cells_of_row - set(points)
        assert not missing, f"{lab.jupytext}: row {label}: no graded cell {missing}"
        got = sum(points[g] for g in cells_of_row)
        assert got == want, f"{lab.jupytext}: the box gives task {label} {want:g} points, its graded cells {got:g}"
        seen |= cells_of_row
    assert seen == set(points), f"{lab.jupytext}: graded cells missing from the box: {sorted(set(points) - seen)}"


# ----------------------------------------------------------------------------- rubrics and answers for graders

WRITTEN = [(lab, _nbg(c)["grade_id"]) for lab in LABS for c in _written(_source(lab))]


def test_the_course_has_written_cells_with_rubrics():
    assert len(WRITTEN) >= 10, WRITTEN


@pytest.mark.parametrize("lab,gid", WRITTEN, ids=[f"{lab.assignment}/{g}" for lab, g in WRITTEN])
def test_each_written_cell_follows_a_locked_rubric_whose_points_add_up(lab, gid):
    nb = _source(lab)
    i = next(i for i, c in enumerate(nb.cells) if _nbg(c).get("grade_id") == gid)
    rubric = nb.cells[i - 1]
    meta = _nbg(rubric)
    assert meta.get("grade_id") == f"rubric_{gid}" and meta.get("locked") is True and not meta.get("grade"), (
        f"{lab.jupytext}: the cell above {gid} must be the locked, ungraded cell rubric_{gid} (it is {meta})")
    regions = MARK.findall(rubric.source)
    assert len(regions) == 1, f"{lab.jupytext}: rubric_{gid} needs one BEGIN/END MARK SCHEME region"
    items = [float(p) for p in re.findall(r"\*\*(\d+(?:\.\d+)?) points?\*\*", regions[0])]
    assert items and sum(items) == float(_nbg(nb.cells[i])["points"]), (
        f"{lab.jupytext}: rubric_{gid} awards {sum(items):g} points, the cell is worth {_nbg(nb.cells[i])['points']}")
    # the student's copy: the cell is there (it says how the answer is graded), the rubric is not
    rel = next(c for c in _release(lab).cells if _nbg(c).get("grade_id") == f"rubric_{gid}")
    assert "MARK SCHEME" not in rel.source and "Rubric for graders" not in rel.source and rel.source.strip()


@pytest.mark.parametrize("lab", LABS, ids=_ids(LABS))
def test_no_mark_scheme_text_reaches_the_release(lab):
    src, release = _source(lab), _release(lab)
    hidden = set()
    for c in src.cells:
        begins = len(re.findall("BEGIN MARK SCHEME", c.source))
        ends = len(re.findall("END MARK SCHEME", c.source))
        assert begins == ends, f"{lab.jupytext}: a BEGIN MARK SCHEME without its END (or the reverse)"
        for region in MARK.findall(c.source):
            hidden |= {line.strip() for line in region.splitlines() if len(line.strip()) > 12}
    text = "\n".join(c.source for c in release.cells)
    assert "MARK SCHEME" not in text
    leaked = sorted(line for line in hidden if line in text)
    assert not leaked, f"{lab.release}: text of a mark-scheme region in the release: {leaked[:3]}"


# ----------------------------------------------------------------------------- the course's own words

def _prose(nb) -> str:
    """The notebook's markdown without its title line."""
    return "\n".join(line for c in nb.cells if c.cell_type == "markdown" for line in c.source.splitlines()
                     if not line.startswith("# "))


def _tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9@]+", text.lower())


def _is_prose(gram) -> bool:
    return sum(1 for t in gram if t.isalpha() and len(t) >= 3 and t not in MATH_WORDS) >= 5


def _fingerprints(tokens: list[str]) -> set[str]:
    return {hashlib.sha1(" ".join(tokens[i:i + NGRAM]).encode()).hexdigest()[:16]
            for i in range(len(tokens) - NGRAM + 1) if _is_prose(tokens[i:i + NGRAM])}


@pytest.mark.parametrize("lab", LABS, ids=_ids(LABS))
def test_notebooks_never_mention_the_handout(lab):
    for c in _source(lab).cells:
        assert "handout" not in c.source.lower(), (
            f"{lab.jupytext}: students never see the handouts; say 'the published result' or give the number:\n"
            + next(line for line in c.source.splitlines() if "handout" in line.lower()))


@pytest.mark.parametrize("lab", LABS, ids=_ids(LABS))
def test_no_seven_word_run_of_prose_is_copied_from_the_handout(lab):
    prints = json.loads(FINGERPRINTS.read_text())
    theirs = set(prints[lab.assignment])
    tokens = _tokens(_prose(_source(lab)))
    copied = [" ".join(tokens[i:i + NGRAM]) for i in range(len(tokens) - NGRAM + 1)
              if _is_prose(tokens[i:i + NGRAM])
              and hashlib.sha1(" ".join(tokens[i:i + NGRAM]).encode()).hexdigest()[:16] in theirs]
    assert not copied, f"{lab.jupytext}: phrases copied from the handout (rewrite them): {copied}"


# ----------------------------------------------------------------------------- what students read matches the code

ROOT = Path(__file__).resolve().parents[2]
WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8}


def _jupytext_cells(lab) -> list:
    import jupytext

    return jupytext.read(lab.jupytext).cells


def _lab(assignment: str, name: str):
    return next(lab for lab in LABS if lab.assignment == assignment and lab.name == name)


@pytest.mark.parametrize("lab", LABS, ids=_ids(LABS))
def test_release_notebooks_never_mention_the_handout_in_cells_or_outputs(lab):
    for i, c in enumerate(_release(lab).cells):
        text = c.source + "".join(json.dumps(o) for o in c.get("outputs", []))
        assert "handout" not in text.lower(), f"{lab.release}: cell {i} mentions the handout"


def test_what_students_receive_besides_the_notebooks_never_mentions_the_handout():
    """The library (its messages, plot labels, tables, docstrings and comments: the kit ships it as
    source in a wheel) and the kit's own files."""
    files = [f for f in sorted((ROOT / "lib" / "llmrl").rglob("*")) if f.suffix in (".py", ".json", ".md", ".txt")]
    files += [f for f in sorted((ROOT / "autograder" / "kit" / "templates").rglob("*")) if f.is_file()]
    assert len(files) > 30, files
    bad = [f"{f.relative_to(ROOT)}:{n}: {line.strip()}" for f in files
           for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1) if "handout" in line.lower()]
    assert not bad, "students never see the handouts; say 'published' or give the number:\n" + "\n".join(bad[:10])


def test_tables_and_plots_label_the_published_value_as_published():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from llmrl import plotting, runner

    res = {"a": [{"evals": {"x": [0.1, 0.6]}, "curve": {}, "seed": 0}],
           "b": [{"evals": {"x": [0.1, 0.5]}, "curve": {}, "seed": 0}]}
    table = runner.summary_table(res, ["x"], {"b": {"x": 0.55}})
    assert "published" in table.splitlines()[0] and "0.550" in table and "handout" not in table.lower()
    fig, ax = plt.subplots()
    plotting.plot_final(res, "x", ax=ax, expected={"b": {"x": 0.55}})  # only the second arm has a value
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    plt.close(fig)
    assert "published" in labels and not any("handout" in t.lower() for t in labels), labels


def _count_before(text: str, phrase: str) -> int:
    m = re.search(r"\b(\w+) " + re.escape(phrase), text)
    assert m, f"no sentence '<number> {phrase}'"
    word = m.group(1).lower()
    assert word in WORDS, f"{word!r} before {phrase!r} is not a number word"
    return WORDS[word]


def test_lab19_says_how_many_runs_it_draws():
    import ast

    from llmrl.labs import lab19

    cells = _jupytext_cells(_lab("lab19", "failure_modes"))
    i = next(i for i, c in enumerate(cells) if c.cell_type == "markdown" and "runs from the SFT checkpoint" in c.source)
    said = _count_before(cells[i].source, "runs from the SFT checkpoint")
    drawn = None
    for c in cells[i + 1:]:
        if c.cell_type == "code" and re.search(r"^runs = \{", c.source, re.M):
            node = next(n for n in ast.walk(ast.parse(c.source)) if isinstance(n, ast.Assign)
                        and getattr(n.targets[0], "id", None) == "runs")
            drawn = len(node.value.keys)
            break
    assert drawn is not None, "part 2's plot cell (runs = {...}) not found"
    assert said == drawn, f"lab19 part 2 says {said} runs and draws {drawn}"
    j = next(i for i, c in enumerate(cells) if c.cell_type == "markdown" and "runs with the exact-match reward" in c.source)
    said3 = _count_before(cells[j].source, "runs with the exact-match reward")
    assert said3 == len(lab19.CLIP_ARMS), f"lab19 part 3 says {said3} runs, it has {len(lab19.CLIP_ARMS)} clip arms"


def test_lab19_plots_the_students_own_runs():
    """Parts 2 and 3 train on the student's functions and plot those runs (a wrong Task 2 must
    not show the reference curve): the stored reference runs enter only the seed-0 checks and the beta
    slider, and the text before each training cell says whose code it runs."""
    cells = _jupytext_cells(_lab("lab19", "failure_modes"))
    code = [(i, c.source) for i, c in enumerate(cells) if c.cell_type == "code"]
    plots = [src for _, src in code if re.search(r"plot_(hacking|entropy)\(", src)]
    assert len(plots) == 2 and not any("REFERENCE" in src or "live=" in src for src in plots), plots
    trains = {m.group(1): i for i, src in code if (m := re.search(r"lab19\.(part[23]_runs)\((\w+)", src))
              and m.group(2) in ("kl_penalized_rewards", "clipped_pg_loss")}
    assert set(trains) == {"part2_runs", "part3_runs"}, trains
    for i in trains.values():
        text = next(c.source for c in reversed(cells[:i]) if c.cell_type == "markdown")
        assert re.search(r"\*\*your\*\*", text) and "black dashed" not in text, text
    uses = [src for _, src in code if "REFERENCE" in src and "REFERENCE = " not in src]
    # part2_runs may take the beta = 0 runs (no student function in them) from the stored runs
    allowed = ("check_part2(", "check_part3(", "beta_widget(", "part2_runs(kl_penalized_rewards")
    assert uses and all(any(a in line for a in allowed) for src in uses for line in src.splitlines()
                        if "REFERENCE" in line), uses


def test_lab21_describes_the_student_checkpoint_as_it_measures():
    from llmrl.addition import TWO_DIGIT, eval_problems
    from llmrl.sft.checkpoints import load_checkpoint
    from llmrl.evaluation import accuracy

    text = "\n".join(c.source for c in _jupytext_cells(_lab("lab21", "tasks")) if c.cell_type == "markdown")
    m = re.search(r"about (\d+)% greedy, (\d+)% sampled accuracy", text)
    assert m, "lab21 tasks: the sentence giving the student's greedy and sampled accuracy is gone"
    greedy, sampled = int(m.group(1)) / 100, int(m.group(2)) / 100
    student = load_checkpoint("student", progress=False)
    probs = eval_problems(200, TWO_DIGIT)
    got_g, got_s = accuracy(student, probs), accuracy(student, probs, temperature=1.0, n_samples=8, seed=0)
    # the text rounds to the nearest 10%: +-0.05. Greedy decoding of a fixed set has no sampling noise;
    # the sampled accuracy of 1600 samples has a standard error of about 0.011, hence 0.06 there.
    assert abs(got_g - greedy) <= 0.05, f"lab21 says the student is about {greedy:.0%} greedy; it measures {got_g:.2f}"
    assert abs(got_s - sampled) <= 0.06, f"lab21 says about {sampled:.0%} sampled; it measures {got_s:.2f}"


def refresh(seeds: Path) -> None:
    """Rewrite handout_fingerprints.json from the handouts in `seeds`."""
    out = {a: sorted(_fingerprints(_tokens((seeds / f).read_text()))) for a, f in HANDOUTS.items()}
    FINGERPRINTS.write_text(json.dumps(out, indent=0) + "\n")
    print(f"wrote {FINGERPRINTS} ({sum(len(v) for v in out.values())} fingerprints)")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--refresh":
        refresh(Path(sys.argv[2]))
    else:
        sys.exit(f"usage: {sys.argv[0]} --refresh /path/to/seeds")
