"""README's fresh-machine line names every system package that .ci/run installs on a fresh machine."""

from __future__ import annotations

import re

import pytest

from autograder.course.layout import ROOT


def ci_packages(text: str) -> set[str]:
    """The apt packages .ci/run installs: its need+=(...) lists and its apt-get install lines."""
    found = set()
    for group in re.findall(r"need\+=\(([^)]*)\)", text):
        found.update(group.split())
    for line in re.findall(r"apt-get install ([^\n;|&]*)", text):
        found.update(w for w in line.split() if not w.startswith(("-", '"', "$")))
    return found


def readme_packages(text: str) -> set[str]:
    lines = re.findall(r"^sudo apt install (.+)$", text, re.M)
    assert len(lines) == 1, f"README should have one `sudo apt install ...` line, found {lines}"
    return set(lines[0].split())


@pytest.mark.fast
def test_readme_names_what_ci_installs():
    ci = ci_packages((ROOT / ".ci" / "run").read_text())
    assert {"bubblewrap", "nodejs", "npm", "chromium", "e2fsprogs", "mount", "python3-venv"} <= ci, ci
    missing = ci - readme_packages((ROOT / "README.md").read_text()) - {"python3"}  # README asks for Python 3.11
    assert missing == set(), f"README's fresh-machine line lacks {sorted(missing)}"


def test_the_check_notices_a_package_left_out():
    ci = ci_packages((ROOT / ".ci" / "run").read_text())
    readme = (ROOT / "README.md").read_text().replace(" bubblewrap ", " ", 1)
    assert "bubblewrap" in ci - readme_packages(readme)
