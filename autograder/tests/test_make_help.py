"""`make help` lists every target of the Makefile, each with what it does and about how long it takes."""

import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast  # make test-fast runs this file

ROOT = Path(__file__).resolve().parents[2]


def test_make_help_lists_every_target_with_its_time():
    text = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][a-z0-9-]*):(?!=)", text, flags=re.M))
    out = subprocess.run(["make", "-s", "--no-print-directory", "help"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    listed = {}
    for line in out.splitlines():
        m = re.match(r"^\s+make ([a-z][a-z0-9-]*)\s+(\S.*?)\s+\[([^\]]+)\]$", line)
        if m:
            listed[m.group(1)] = (m.group(2), m.group(3))
    assert targets - set(listed) == set(), f"make help omits {sorted(targets - set(listed))}"
    assert set(listed) - targets == set(), f"make help lists targets the Makefile lacks: {sorted(set(listed) - targets)}"
    for name, (what, time) in listed.items():
        assert len(what) > 10, f"make {name}: says too little ({what!r})"
        assert re.search(r"\d|instant|as autograde", time), f"make {name}: no time in [{time}]"
