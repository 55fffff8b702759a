"""The instructors' model answers, and the notebooks' readings of their results, say only what the
printed outputs above them show.

Reads each executed source notebook (source/<assignment>/<name>.ipynb, the instructor's version with
its outputs); executes nothing.

**What is checked.** In each notebook, the *checked texts*:

- the model answer of every hand-graded markdown cell (nbgrader ``grade`` and ``solution``): the text
  between ``### BEGIN SOLUTION`` and ``### END SOLUTION``, or the whole cell where it has no such
  markers (lab21's project write-ups). The rubric cell above it (its MARK SCHEME) is not a claim;
- every results paragraph: a markdown paragraph that opens with one of the leads in ``LEADS``
  ("**Reading the plot.**", "**What happened.**", ...), with the paragraphs after it up to the next
  heading or bold lead: the notebook's own reading of the outputs above it.

**Numbers.** Every number in a checked text is a *result* and must appear, to the digits written, in
the text output of a code cell above it (stdout, text/plain, HTML and markdown tables; a figure's
``<Figure size ...>`` line is not an output). "To the digits written": a cited 0.52 matches a printed
0.515 to 0.525 with at least two decimals, so an answer may round what is printed, never invent
digits; a cited 62% matches a printed 62% or 0.62 (0.615 to 0.625). Number words ("three runs") count
as numbers, except "one" (an article as often as a count). A number is *not* a result, and is skipped,
when it is

1. part of a name: glued to a letter, ``@`` or ``_`` (pass@16, k3, 1d+1d, 6x1, Q4), the first part of a
   hyphenated adjective (2-digit, 1,000-step), or the label after a word in ``LABELS`` (Task 4,
   Project 3, seeds 0-4, Question 2);
2. mathematics or code: inside ``$...$`` or a ``code span`` (formulas, what the student types);
3. a setting the notebook states: the number has a setting context (a unit word in ``UNITS`` right
   after it, "16 prompts", "300 and 1,000 steps", or a setting name in ``SETTINGS`` right before it,
   "lr 3e-4", "T = 1", "k = 16", "w in {1, 2}") *and* the same value occurs in the notebook's own text
   above the answer (its task statements and code; not the checked texts, not the graders' rubrics).
   A setting the notebook does not state is a result again, and must be printed.

**Directions.** Words that claim a direction or a state (``DIRECTIONS``: rises, falls, crosses,
degrades, stays, unsolved, beats, ...) cannot be read off one number. Each sentence of a checked text
that uses one must be covered by an entry of ``model_answer_claims.CLAIMS`` (kept beside this test):
either a check that parses the printed output the claim rests on (the entry names that output by a
pattern of its text) or an explicit ``unchecked`` reason where no output can show it (a hypothetical
bug, a property of the maths). The sentences of a **Hypothesis.** or **Confounders.** paragraph, and
questions to the reader, claim nothing and are skipped. An entry whose sentence is gone fails too, so
the table cannot go stale.

Fast: it reads stored outputs (about a second for the whole course).
"""

from __future__ import annotations

import html
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

from autograder.course.layout import discover

from autograder.tests import model_answer_claims  # noqa: E402
from autograder.tests import prose_numbers as prose_numbers_table

LABS = discover()

LEADS = ("Reading the plot.", "Reading the plots.", "Reading the result.", "Reading the results.",
         "Reading the table.", "What happened.", "Against the published run.")
# Paragraphs that say what the student will find in the outputs of their section (printed above or below).
FORWARD_LEADS = ("What you should find:", "What you should see:")
HEADING = re.compile(r"^#{1,4} ", re.M)
LABELS = {"task", "tasks", "project", "projects", "part", "parts", "question", "questions", "experiment",
          "experiments", "exercise", "figure", "lab", "chapter", "seed", "seeds", "level", "section", "cell",
          "hw", "homework", "row", "column", "item"}
UNITS = {"prompt", "prompts", "sample", "samples", "step", "steps", "epoch", "epochs", "seed", "seeds",
         "problem", "problems", "token", "tokens", "digit", "digits", "run", "runs", "arm", "arms",
         "bucket", "buckets", "group", "groups", "minibatch", "minibatches", "batch", "batches",
         "rollout", "rollouts", "completion", "completions", "response", "responses", "parameters",
         "characters", "set", "sets", "pass", "passes", "question", "questions", "points", "point",
         "minutes", "hours", "x", "values", "knobs", "axes", "functions", "tasks", "rows", "columns"}
SETTINGS = {"lr", "rate", "temperature", "t", "beta", "β", "w", "k", "kl", "penalty", "coefficient", "coef",
            "ema", "clip", "eps", "epsilon", "bonus", "pitfall", "range", "size", "n", "g", "budget"}
# Words that may stand between a number and its unit ("16 fixed problems", "300 and 1,000 steps").
JOINERS = {"and", "or", "to", "x", "-", ",", "per", "of"}
# Words that may stand between a setting name and its number ("KL penalty of 0.05", "w in {1, 2}").
SETTING_JOINERS = {"=", "of", "in", "{", ",", "is", "at", "and", "to", ":"}
NUMBER_WORDS = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
                "ten": 10, "eleven": 11, "twelve": 12, "sixteen": 16, "twenty": 20}
DIRECTIONS = re.compile(
    r"(?<![-\w])(rises?|rising|rose|falls?|falling|fell|drops?|dropp(?:ed|ing)|climbs?|climbing|sinks?|grows?|growing|"
    r"shrinks?|cross(?:es|ing)?|degrades?|degraded|unstable|stays?|stable|unsolved|solved|improves?|improved|"
    r"beats?|ahead|behind|higher|lower|faster|slower|collapses?|collapsed|takes? over|flattens?|jumps?|"
    r"catches up|matches|outperforms?|worse|better|exceeds?|never|peaks?|plateaus?|barely|increases?|decreases?|"
    r"slows?)\b",
    re.I)

# Paragraphs of a write-up that are not claims about the outputs: the prediction the runs test, and
# what else could explain the result. Their numbers are checked, their directions are not.
NOT_CLAIMS = ("**Hypothesis.**", "**Confounders.**")
MARK = re.compile(r"^[^\n]*BEGIN MARK SCHEME.*?END MARK SCHEME[^\n]*$", re.M | re.S)

NUM = re.compile(r"(?<![\w@.\d])(?P<sign>[-+−](?=\d))?(?P<int>\d{1,3}(?:,\d{3})+|\d+)(?P<dec>\.\d+)?"
                 r"(?P<exp>[eE][-+]?\d+)?(?P<pct>\s?%)?")
WORD_NUM = re.compile(r"\b(" + "|".join(NUMBER_WORDS) + r")\b(?=\s+[A-Za-z])", re.I)
TOKEN = re.compile(r"[A-Za-z_βθ]+|\d[\d,.]*|[=,{}:\-]")


@dataclass(frozen=True)
class Number:
    value: float
    decimals: int  # digits after the point as written (exponent notation: as many as the value needs)
    percent: bool

    def rounds_to(self, printed: "Number") -> bool:
        """Whether the printed number, rounded to the digits cited here, is this number."""
        want, got = self.value, printed.value
        if self.percent and not printed.percent:
            got *= 100
            have = printed.decimals - 2
        elif printed.percent and not self.percent:
            got /= 100
            have = printed.decimals + 2
        else:
            have = printed.decimals
        if have < self.decimals:
            return False
        return abs(got - want) <= 0.5 * 10.0 ** -self.decimals + 1e-9 * max(1.0, abs(want))


def _number(m: re.Match) -> Number:
    digits = m.group("int").replace(",", "")
    dec = m.group("dec") or ""
    exp = m.group("exp") or ""
    sign = -1.0 if m.group("sign") in ("-", "−") else 1.0
    value = sign * float(digits + dec + exp)
    decimals = len(dec) - 1 if dec else 0
    if exp:
        decimals = max(0, decimals - int(exp[1:]))
    return Number(value, decimals, bool(m.group("pct")))


def numbers(text: str) -> list[Number]:
    return [_number(m) for m in NUM.finditer(text)]


# ----------------------------------------------------------------------------- reading a notebook

def _nbg(cell) -> dict:
    return cell.metadata.get("nbgrader", {}) or {}


def output_text(cell) -> str:
    """What a code cell printed: its streams (stdout), text results and HTML or markdown tables."""
    parts = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            if o.get("name") == "stdout":
                parts.append(o.get("text", ""))
        elif o.get("output_type") in ("execute_result", "display_data"):
            data = o.get("data", {})
            if "text/html" in data:
                parts.append(html.unescape(re.sub(r"<[^>]+>", " ", "".join(data["text/html"]))))
            elif "text/markdown" in data:
                parts.append("".join(data["text/markdown"]))
            elif "text/plain" in data and not ({"image/png", "image/svg+xml"} & set(data)) and not any(
                    k.startswith("application/vnd.jupyter.widget") for k in data):
                parts.append("".join(data["text/plain"]))
    return "\n".join(parts)


@dataclass
class Checked:
    """One checked text: where it is, what it says, and the outputs its numbers must come from."""
    cell: int
    name: str  # the grade_id of a model answer, or the lead of a results paragraph
    text: str
    printed: list[tuple[int, str]]  # (cell index, output text) of the code cells its numbers may come from
    stated: str  # the notebook's own text above: markdown outside checked texts, and code


def _solution(source: str) -> str:
    m = re.search(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", source, re.S)
    return m.group(1) if m else source


def _paragraphs(source: str) -> list[str]:
    return [p for p in re.split(r"\n\s*\n", source) if p.strip()]


def sections(nb) -> tuple[list[list[int]], dict[int, list[tuple[int, str]]]]:
    """The notebook cut at its markdown headings: for each cell, the section of each of its paragraphs
    (a code cell: one entry), and {section: [(cell index, output text) of its code cells]}."""
    sec, per_cell, outputs = 0, [], {}
    for i, c in enumerate(nb.cells):
        if c.cell_type == "code":
            outputs.setdefault(sec, []).append((i, output_text(c)))
            per_cell.append([sec])
            continue
        marks = []
        for para in _paragraphs(MARK.sub("", c.source) if c.cell_type == "markdown" else ""):
            if HEADING.match(para.lstrip()):
                sec += 1
            marks.append(sec)
        per_cell.append(marks or [sec])
    return per_cell, outputs


def checked_texts(nb) -> list[Checked]:
    """The model answers (every output above them may hold their numbers: a report cites the whole
    notebook), the results paragraphs (the outputs above them in their own section: the experiment
    they read) and the forward paragraphs (the outputs of their own section, above or below)."""
    out, printed, stated = [], [], []
    per_cell, section_outputs = sections(nb)
    for i, c in enumerate(nb.cells):
        if c.cell_type == "code":
            printed.append((i, output_text(c)))
            stated.append(c.source)
            continue
        if c.cell_type != "markdown":
            continue
        meta = _nbg(c)
        if meta.get("grade") and meta.get("solution"):
            out.append(Checked(i, meta["grade_id"], _solution(c.source), list(printed), "\n".join(stated)))
            continue
        kept, reading = [], None
        for k, para in enumerate(_paragraphs(MARK.sub("", c.source))):  # a rubric states nothing to the student
            sec = per_cell[i][k] if k < len(per_cell[i]) else per_cell[i][-1]
            lead = next((lead for lead in LEADS if para.lstrip().startswith(f"**{lead}**")), None)
            ahead = next((lead for lead in FORWARD_LEADS if para.lstrip().startswith(f"**{lead}**")), None)
            if lead:
                here = [(j, o) for j, o in section_outputs.get(sec, []) if j < i]
                reading = Checked(i, lead, para, here, "\n".join(stated + kept))
                out.append(reading)
            elif ahead:
                reading = Checked(i, ahead, para, list(section_outputs.get(sec, [])), "\n".join(stated + kept))
                out.append(reading)
            elif reading and not re.match(r"\s*(#|\*\*[^*]+\*\*)", para):
                reading.text += "\n\n" + para  # the reading goes on to the next heading or bold lead
            else:
                reading = None
                kept.append(para)
        stated.extend(kept)
    return out


# ----------------------------------------------------------------------------- which numbers are results

def _masked(text: str) -> str:
    """The text with math and code spans blanked out (same length, so offsets stay valid)."""
    blank = lambda m: " " * len(m.group(0))  # noqa: E731
    text = re.sub(r"\$\$.*?\$\$", blank, text, flags=re.S)
    text = re.sub(r"\$[^$]*\$", blank, text)
    return re.sub(r"`[^`]*`", blank, text)


def _words_after(text: str, end: int, n: int = 6) -> list[str]:
    return [t.lower() for t in TOKEN.findall(text[end:end + 80])][:n]


def _words_before(text: str, start: int, n: int = 6) -> list[str]:
    return [t.lower() for t in TOKEN.findall(text[max(0, start - 60):start])][-n:]


def _label_before(words: list[str]) -> bool:
    """'Task 4', 'seeds 0-4', 'seeds 0, 1 and 2': the word before the number (or its range) is a label."""
    for w in reversed(words):
        if w[0].isdigit() or w in {"-", ",", "and", "to"}:
            continue
        return w in LABELS
    return False


def _has_unit_after(words: list[str]) -> bool:
    other = 0
    for w in words:
        if w in UNITS:
            return True
        if w in JOINERS or w[0].isdigit() or w in NUMBER_WORDS:
            continue
        other += 1  # one adjective may stand between ("100 fixed problems")
        if other > 1:
            return False
    return False


def _has_setting_before(words: list[str]) -> bool:
    for w in reversed(words):
        if w in SETTINGS:
            return True
        if w in SETTING_JOINERS or w[0].isdigit():
            continue
        return False
    return False


def classify(text: str, stated: str) -> list[tuple[str, str, Number | None]]:
    """Each number of `text`: (its text, why it is skipped or "result", the Number)."""
    masked = _masked(text)
    stated_numbers = numbers(_masked_keep_code(stated))
    found = [(m.start(), m.end(), m.group(0), _number(m)) for m in NUM.finditer(masked)]
    found += [(m.start(), m.end(), m.group(0), Number(float(NUMBER_WORDS[m.group(1).lower()]), 0, False))
              for m in WORD_NUM.finditer(masked)]
    result = []
    for start, end, written, num in sorted(found):
        before, after = masked[start - 1:start], masked[end:end + 1]
        before_words = _words_before(masked, start)
        if re.match(r"[A-Za-z@_]", before) or re.match(r"[A-Za-z@_]", after) or re.match(
                r"-[\d,\-]*[A-Za-z]", masked[end:end + 20]):
            why = "name"
        elif _label_before(before_words):
            why = "label"
        elif (_has_unit_after(_words_after(masked, end)) or _has_setting_before(before_words)) and any(
                num.rounds_to(s) or s.rounds_to(num) for s in stated_numbers):
            why = "setting stated above"
        else:
            why = "result"
        result.append((written.strip(), why, num))
    return result


def _masked_keep_code(text: str) -> str:
    """Stated text for settings: math removed (a formula's constants are not settings), code kept."""
    blank = lambda m: " " * len(m.group(0))  # noqa: E731
    text = re.sub(r"\$\$.*?\$\$", blank, text, flags=re.S)
    return re.sub(r"\$[^$]*\$", blank, text)


def unsupported_numbers(item: Checked) -> list[str]:
    """The results `item` cites that no output above it prints."""
    printed = [n for _, out in item.printed for n in numbers(out)]
    return [written for written, why, num in classify(item.text, item.stated)
            if why == "result" and not any(num.rounds_to(p) for p in printed)]


# A value with its spread ("1.16 ± 0.05") is one result: the pair must be printed together. Each of its
# two numbers on its own may be printed somewhere else (0.04 as another row's spread), so checking the
# numbers one by one lets a wrong spread through.
PAIR = re.compile(r"(?P<a>[-+−]?\d[\d,]*(?:\.\d+)?)\s*(?:±|\+/-|\+-)\s*(?P<b>\d[\d,]*(?:\.\d+)?)")


def pairs(text: str) -> list[tuple[str, Number, Number]]:
    """Every 'value ± spread' of `text`: (as written, the value, the spread)."""
    return [(m.group(0), _number(NUM.match(m.group("a"))), _number(NUM.match(m.group("b"))))
            for m in PAIR.finditer(text)]


def unsupported_pairs(item: Checked) -> list[str]:
    """The 'value ± spread' pairs `item` cites that no output above it prints as a pair (each number
    rounded to the digits cited)."""
    printed = [(a, b) for _, out in item.printed for _, a, b in pairs(out)]
    return [written for written, a, b in pairs(_masked(item.text))
            if not any(a.rounds_to(pa) and b.rounds_to(pb) for pa, pb in printed)]


# ----------------------------------------------------------------------------- directions

def sentences(text: str) -> list[str]:
    """The sentences of `text`, math and code blanked; a paragraph's later sentences keep its lead
    (so that the sentences of a **Hypothesis.** are known as such)."""
    out = []
    for para in (item for p in _paragraphs(text) for item in re.split(r"\n\s*[-*] (?=\S)", p)):
        flat = " ".join(_masked(para).split())
        parts = [s for s in re.split(r"(?<=[.;:!?])\s+(?=[A-Z*(\"])", flat) if s.strip()]
        if not parts:
            continue
        lead = re.match(r"\*\*[^*]+\*\*", flat)
        out += [parts[0]] + [f"{lead.group(0)} {p}" if lead and lead.group(0) in NOT_CLAIMS else p for p in parts[1:]]
    return out


def _ids(labs):
    return [f"{lab.assignment}/{lab.name}" for lab in labs]


def _notebook(lab):
    return nbformat.read(lab.source, as_version=4)


def _claims_for(lab):
    return [c for c in model_answer_claims.CLAIMS if c.notebook == f"{lab.assignment}/{lab.name}"]


def nearest_output(item: Checked, pattern: str) -> tuple[int, str] | None:
    """(cell index, output) of the nearest code cell above `item` whose printed output matches `pattern`."""
    return next(((i, out) for i, out in reversed(item.printed) if re.search(pattern, out)), None)


def direction_problems(lab, items: list[Checked]) -> list[str]:
    """Sentences with a direction word that no claim covers, claims that fail, claims whose text is gone."""
    claims = _claims_for(lab)
    problems, used = [], set()
    for item in items:
        for sentence in sentences(item.text):
            if sentence.startswith(NOT_CLAIMS) or sentence.endswith("?"):
                continue  # a prediction, a confounder or a question to the reader claims nothing
            words = sorted({w.lower() for w in DIRECTIONS.findall(sentence)})
            covering = [c for c in claims if re.search(c.says, sentence, re.I)]
            if words and not covering:
                problems.append(f"cell {item.cell} ({item.name}): {', '.join(words)!s} in {sentence!r} is checked by "
                                f"no entry of model_answer_claims.py (add a check, or an 'unchecked' reason)")
            for claim in covering:
                used.add(claim)
                if claim.unchecked:
                    continue
                source = nearest_output(item, claim.reads)
                if source is None:
                    problems.append(f"cell {item.cell} ({item.name}): {claim.says!r} rests on an output matching "
                                    f"{claim.reads!r}, and no code cell above prints one")
                    continue
                verdict = claim.check(source[1])
                if verdict:
                    problems.append(f"cell {item.cell} ({item.name}): {sentence!r} is not what cell {source[0]} "
                                    f"prints: {verdict}")
    for claim in claims:
        if claim not in used:
            problems.append(f"model_answer_claims.py: no sentence of {claim.notebook} matches {claim.says!r} any "
                            "more: remove or update the entry")
    return problems


# ----------------------------------------------------------------------------- hypotheses

def hypothesis_problems(lab, items: list[Checked]) -> list[str]:
    """Each write-up's **Hypothesis.** must be judged: its sentences covered by entries of
    model_answer_claims.HYPOTHESES, each entry's verdict read off the printed output, and the write-up
    giving that verdict (and no other) in the sentence its `answer` names, which names the hypothesis."""
    from autograder.tests.model_answer_checks import VERDICT_WORDS

    entries = [h for h in model_answer_claims.HYPOTHESES if h.notebook == f"{lab.assignment}/{lab.name}"]
    problems, used = [], set()
    for item in items:
        said = sentences(item.text)
        predicted = [x for x in said if x.startswith("**Hypothesis.**")]
        told = [x for x in said if not x.startswith(NOT_CLAIMS)]
        for sentence in predicted:
            covering = [h for h in entries if re.search(h.says, sentence, re.I)]
            if not covering:
                problems.append(f"cell {item.cell} ({item.name}): the hypothesis {sentence!r} is judged by no entry of "
                                "model_answer_claims.HYPOTHESES (add one, or an 'unchecked' reason)")
            for h in covering:
                used.add(h)
                if h.unchecked:
                    continue
                source = nearest_output(item, h.reads)
                if source is None:
                    problems.append(f"cell {item.cell} ({item.name}): the hypothesis {h.says!r} rests on an output "
                                    f"matching {h.reads!r}, and no code cell above prints one")
                    continue
                verdict, shown = h.judge(source[1])
                answers = [x for x in told if re.search(h.answer, x, re.I)]
                if not answers:
                    problems.append(f"cell {item.cell} ({item.name}): the runs leave the hypothesis {h.says!r} "
                                    f"{verdict} (cell {source[0]}: {shown}), and no sentence matching {h.answer!r} "
                                    "says so")
                    continue
                for x in answers:
                    words = {v for v, pattern in VERDICT_WORDS.items() if re.search(pattern, x, re.I)}
                    if "hypothes" not in x.lower() or words != {verdict}:
                        problems.append(f"cell {item.cell} ({item.name}): {x!r} must say the hypothesis {h.says!r} is "
                                        f"{verdict} (cell {source[0]}: {shown}), in words of that verdict only; it "
                                        f"reads as {sorted(words) or 'no verdict'}")
    problems += [f"model_answer_claims.py: no hypothesis of {e.notebook} matches {e.says!r} any more: remove or "
                 "update the entry" for e in entries if e not in used]
    return problems


# ----------------------------------------------------------------------------- the rest of the prose

# A number in the rest of the prose (task statements, setups, captions) reads as a result when it has
# decimals (0.3, 5e-5, 62%) or follows one of these words ("about 10 steps", "near 1.3", "published 0.61").
RESULT_WORDS = re.compile(r"(?:about|around|near|nearly|roughly|approximately|~|≈|published|reaches|reached|"
                          r"falls to|rises to|ends at|within(?: the first)?)\s*$", re.I)


@dataclass
class ProseNumber:
    cell: int
    sentence: str
    numbers: list[str]  # as written
    section_printed: list[Number]


def prose_numbers(nb) -> list[ProseNumber]:
    """The sentences outside the checked texts, the opening box and the graders' rubrics that hold
    numbers reading as results (:data:`RESULT_WORDS`), with the numbers their section prints."""
    per_cell, section_outputs = sections(nb)
    checked = {para.strip() for it in checked_texts(nb) for para in _paragraphs(it.text)}
    first = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown")
    out = []
    for i, c in enumerate(nb.cells):
        if c.cell_type != "markdown" or i == first or (_nbg(c).get("grade") and _nbg(c).get("solution")):
            continue
        for k, para in enumerate(_paragraphs(MARK.sub("", c.source))):  # a rubric states nothing to the student
            if para.strip() in checked:
                continue
            sec = per_cell[i][k] if k < len(per_cell[i]) else per_cell[i][-1]
            printed = [n for _, o in section_outputs.get(sec, []) for n in numbers(o)]
            for sentence in sentences(para):
                found = []
                for m in NUM.finditer(sentence):
                    w = m.group(0).strip()
                    if re.match(r"[A-Za-z@_]", sentence[m.start() - 1:m.start()] if m.start() else "") or re.match(
                            r"[A-Za-z@_]", sentence[m.end():m.end() + 1]) or re.match(r"-[\d,\-]*[A-Za-z]", sentence[m.end():m.end() + 20]):
                        continue  # part of a name: pass@16, 1d+1d, 2-digit
                    if re.match(r"\s*(seconds?|minutes?|min|hours?|h|s)\b", sentence[m.end():m.end() + 10]):
                        continue  # a run time for planning ("about 30 seconds on a quiet laptop"), not a result
                    decimal = bool(m.group("dec") or m.group("exp") or m.group("pct"))
                    if decimal or RESULT_WORDS.search(sentence[max(0, m.start() - 30):m.start()]):
                        found.append(w)
                if found:
                    out.append(ProseNumber(i, sentence, found, printed))
    return out


def prose_problems(lab, nb) -> list[str]:
    """Prose numbers that their section does not print and no entry of prose_numbers.PROSE explains;
    entries that fail their check or match no sentence."""
    entries = [e for e in prose_numbers_table.PROSE if e.notebook == f"{lab.assignment}/{lab.name}"]
    outputs = "\n".join(output_text(c) for c in nb.cells if c.cell_type == "code")
    problems, used = [], set()
    for item in prose_numbers(nb):
        left = [w for w in item.numbers if not any(_number(NUM.match(w)).rounds_to(p) for p in item.section_printed)]
        if not left:
            continue
        covering = [e for e in entries if re.search(e.says, item.sentence, re.I)]
        if not covering:
            problems.append(f"cell {item.cell}: {', '.join(left)} in {item.sentence!r}: not printed in its section, and "
                            "no entry of prose_numbers.py says what it is (a setting of the code, the published value "
                            "the notebook prints, or the text's own example)")
            continue
        used.update(id(e) for e in covering)
        for w in left:  # each number must be what one of the entries that cover the sentence says it is
            verdicts = [e.verify([_number(NUM.match(w))], outputs) for e in covering]
            if all(verdicts):
                problems.append(f"cell {item.cell}: {w} in {item.sentence!r}: " + "; ".join(verdicts))
    problems += [f"prose_numbers.py: no sentence of {e.notebook} with a number to explain matches {e.says!r} any more: "
                 "remove or update the entry" for e in entries if id(e) not in used]
    return problems


# ----------------------------------------------------------------------------- the tests

@pytest.mark.parametrize("lab", LABS, ids=_ids(LABS))
def test_model_answers_cite_only_printed_numbers(lab):
    items = checked_texts(_notebook(lab))
    bad = [f"cell {it.cell} ({it.name}): {', '.join(miss)}" for it in items if (miss := unsupported_numbers(it))]
    assert not bad, (f"{lab.source}: numbers in model answers or results paragraphs that no output above them "
                     "prints (to the digits written):\n  " + "\n  ".join(bad))


@pytest.mark.parametrize("lab", LABS, ids=_ids(LABS))
def test_model_answers_cite_a_value_and_its_spread_as_printed_together(lab):
    items = checked_texts(_notebook(lab))
    bad = [f"cell {it.cell} ({it.name}): {', '.join(miss)}" for it in items if (miss := unsupported_pairs(it))]
    assert not bad, (f"{lab.source}: 'value ± spread' pairs in model answers or results paragraphs that no output "
                     "above them prints as a pair:\n  " + "\n  ".join(bad))


@pytest.mark.parametrize("lab", LABS, ids=_ids(LABS))
def test_model_answers_claim_only_directions_the_outputs_show(lab):
    items = checked_texts(_notebook(lab))
    problems = direction_problems(lab, items)
    assert not problems, f"{lab.source}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("lab", LABS, ids=_ids(LABS))
def test_write_ups_say_whether_the_runs_support_their_hypothesis(lab):
    """A write-up whose runs go against its hypothesis must say so, next to the numbers: a Result that
    only lists what agrees tells a kinder story than the outputs."""
    problems = hypothesis_problems(lab, checked_texts(_notebook(lab)))
    assert not problems, f"{lab.source}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("lab", LABS, ids=_ids(LABS))
def test_the_rest_of_the_prose_states_numbers_its_section_prints_or_says_what_they_are(lab):
    """Outside the model answers and the results paragraphs, a number that reads as a result (decimals,
    or after "about", "near", "published", "within"...) must be printed by a code cell of its own
    section, to the digits written; otherwise an entry of prose_numbers.py binds it to what it is: a
    setting the library holds (checked against that value), a published value the notebook prints
    (checked against that line) or the text's own example (with the reason)."""
    problems = prose_problems(lab, _notebook(lab))
    assert not problems, f"{lab.source}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("lab", LABS, ids=_ids(LABS))
def test_each_notebook_has_checked_texts(lab):
    """A notebook whose model answers or results paragraphs vanished (a renamed lead) would pass unread."""
    assert checked_texts(_notebook(lab)), (
        f"{lab.source}: no model answer and no results paragraph (a paragraph opening with one of {LEADS})")


# ----------------------------------------------------------------------------- the rules themselves

def _stub(text: str, printed: str, stated: str = "") -> Checked:
    return Checked(1, "t", text, [(0, printed)], stated)


def test_rounding_to_the_digits_written():
    assert not unsupported_numbers(_stub("ends at 0.52", "acc 0.515"))
    assert not unsupported_numbers(_stub("ends at 0.5", "acc 0.515"))
    assert unsupported_numbers(_stub("ends at 0.52", "acc 0.514")) == ["0.52"]
    assert unsupported_numbers(_stub("ends at 0.520", "acc 0.52")) == ["0.520"]  # more digits than printed
    assert not unsupported_numbers(_stub("covers 62% of batches", "covers 0.62"))
    assert not unsupported_numbers(_stub("covers 0.62 of batches", "covers 62%"))
    assert unsupported_numbers(_stub("covers 63% of batches", "covers 62%")) == ["63%"]
    assert not unsupported_numbers(_stub("advantage about -1", "-1.00 'Answer'"))
    assert unsupported_numbers(_stub("advantage about -1", "+1.00 'Answer'")) == ["-1"]


def test_a_spread_must_be_printed_with_its_value():
    printed = "kl_coef = 0.05: final reward 1.16 ± 0.05\nkl_coef = 8: final reward 0.68 ± 0.04"
    assert not unsupported_pairs(_stub("ends at 1.16 ± 0.05 against 0.68 ± 0.04", printed))
    # both numbers are printed, but not as this pair: the spread belongs to another row
    assert unsupported_pairs(_stub("ends at 1.16 ± 0.04", printed)) == ["1.16 ± 0.04"]
    assert unsupported_pairs(_stub("ends at 1.2 ± 0.2", printed)) == ["1.2 ± 0.2"]
    assert not unsupported_pairs(_stub("ends at 1.2 ± 0.05", printed))
    assert not unsupported_pairs(_stub("the mean $m \\pm s$ of each row", printed))  # math is not a result


def test_names_labels_math_and_code_are_not_results():
    text = ("Task 4 and Project 3: pass@16 on 1d+1d and 3d+1d, 2-digit buckets, k3, Q4, seeds 0-4, "
            "a 1,000-step run, $e^x \\ge 1 + x$, `rare_group=4`, minibatches 6x1.")
    assert not unsupported_numbers(_stub(text, "nothing printed"))
    assert [w for w, why, _ in classify(text, "") if why == "result"] == []


def test_settings_count_only_when_the_notebook_states_them():
    stated = "P5_STEPS = 300\nrun 16 prompts x 8 samples with lr=3e-4; kl_coef=0.05"
    text = "16 prompts x 8 samples, lr 3e-4, 300 and 1,000 steps, a KL penalty of 0.05, three runs"
    kinds = {w: why for w, why, _ in classify(text, stated)}
    assert kinds["16"] == kinds["8"] == kinds["3e-4"] == kinds["300"] == kinds["0.05"] == "setting stated above"
    assert kinds["1,000"] == "result" and kinds["three"] == "result"  # the notebook states neither
    # a number the task states is still a result where it has no setting context: "ends at 300"
    assert [why for w, why, _ in classify("the reward ends at 300", stated)] == ["result"]


def test_directions_need_a_covering_claim_and_the_claim_must_hold():
    @dataclass
    class Lab:
        assignment: str = "demo"
        name: str = "nb"

    item = _stub("**Result.** The reward rises from 0.2 to 0.9. The loss is fine.", "reward 0.20 -> 0.90")
    assert "no entry" in direction_problems(Lab(), [item])[0]
    rising = model_answer_claims.Claim("demo/nb", r"reward rises", r"reward [\d.]+ ->",
                                       lambda out: None if model_answer_claims.arrow(out, "reward")[1] >
                                       model_answer_claims.arrow(out, "reward")[0] else "it does not rise")
    model_answer_claims.CLAIMS.append(rising)
    try:
        assert direction_problems(Lab(), [item]) == []
        falling = _stub("**Result.** The reward rises.", "reward 0.90 -> 0.20")
        assert "it does not rise" in direction_problems(Lab(), [falling])[0]
        gone = _stub("**Result.** Nothing moves.", "reward 0.90 -> 0.20")
        assert "no sentence" in direction_problems(Lab(), [gone])[0]
    finally:
        model_answer_claims.CLAIMS.remove(rising)


def test_a_hypothesis_needs_the_verdict_its_runs_give():
    @dataclass
    class Lab:
        assignment: str = "demo"
        name: str = "nb"

    printed = "b minus a, final score: 0.300 ± 0.050 (4 seeds)"
    judged = model_answer_claims.Hypothesis(
        "demo/nb", r"b scores higher", r"b minus a", answer=r"\bon the score, the hypothesis",
        judge=lambda out: (model_answer_claims.compare(0.3, 0.05 / 2), "0.300 ± 0.050"))
    model_answer_claims.HYPOTHESES.append(judged)
    try:
        said = "**Hypothesis.** b scores higher than a.\n\n**Result.** On the score, the hypothesis is {}."
        assert hypothesis_problems(Lab(), [_stub(said.format("supported"), printed)]) == []
        assert "reads as ['refuted']" in hypothesis_problems(Lab(), [_stub(said.format("refuted"), printed)])[0]
        both = said.format("supported, though inside the seed noise")  # two verdicts at once: neither is said
        assert "reads as ['inconclusive', 'supported']" in hypothesis_problems(Lab(), [_stub(both, printed)])[0]
        silent = "**Hypothesis.** b scores higher than a.\n\n**Result.** b ends at 0.9."
        assert "says so" in hypothesis_problems(Lab(), [_stub(silent, printed)])[0]
        unjudged = "**Hypothesis.** c wins.\n\n**Result.** c ends at 0.9."
        problems = hypothesis_problems(Lab(), [_stub(unjudged, printed)])
        assert "judged by no entry" in problems[0] and "any more" in problems[1]
    finally:
        model_answer_claims.HYPOTHESES.remove(judged)
    assert model_answer_claims.compare(-0.2, 0.05) == "refuted"
    assert model_answer_claims.compare(0.05, 0.05) == "inconclusive"
