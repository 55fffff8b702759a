"""environment.yml and pyproject.toml pin the same packages at the same versions."""

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*==\s*([A-Za-z0-9_.+\-]+)\s*$")


def _name(n: str) -> str:
    return re.sub(r"[-_.]+", "-", n).lower()


def pyproject_pins(text: str) -> tuple[dict[str, str], list[str]]:
    """Pins of dependencies + the extras make venv installs (dev, hf, trl, modal), and problems
    (unpinned or loosely pinned entries)."""
    data = tomllib.loads(text)["project"]
    problems, pins = [], {}
    extras = data.get("optional-dependencies", {})
    for group, reqs in [("dependencies", data.get("dependencies", []))] + [(f"extra {k}", v) for k, v in extras.items()]:
        for req in reqs:
            m = PIN.match(req)
            if not m:
                problems.append(f"pyproject {group}: {req!r} is not pinned with ==")
                continue
            if _name(m.group(1)) == "torch" and m.group(2) != "2.13.0":
                problems.append(f"pyproject {group}: torch must be ==2.13.0, got {req!r}")
            if group in ("dependencies", "extra dev", "extra hf", "extra trl", "extra modal"):  # make venv's
                pins[_name(m.group(1))] = m.group(2)
    return pins, problems


def environment_pins(text: str) -> tuple[dict[str, str], list[str]]:
    data = yaml.safe_load(text)
    problems, pins = [], {}
    deps = data.get("dependencies", [])
    if "python=3.11" not in deps:
        problems.append("environment.yml: dependencies must hold python=3.11")
    pip = [d["pip"] for d in deps if isinstance(d, dict) and "pip" in d]
    for req in pip[0] if pip else []:
        if req.startswith("-e"):
            continue
        m = PIN.match(req)
        if not m:
            problems.append(f"environment.yml: {req!r} is not pinned with ==")
        else:
            pins[_name(m.group(1))] = m.group(2)
    return pins, problems


def disagreements(pyproject_text: str, environment_text: str) -> list[str]:
    a, problems_a = pyproject_pins(pyproject_text)
    b, problems_b = environment_pins(environment_text)
    out = problems_a + problems_b
    for name in sorted(set(a) | set(b)):
        if a.get(name) != b.get(name):
            out.append(f"{name}: pyproject {a.get(name) or 'absent'}, environment.yml {b.get(name) or 'absent'}")
    return out


def test_environment_yml_and_pyproject_agree():
    problems = disagreements((ROOT / "pyproject.toml").read_text(), (ROOT / "environment.yml").read_text())
    assert problems == []


def test_torch_is_pinned_to_the_cpu_wheel_version():
    pins, _ = pyproject_pins((ROOT / "pyproject.toml").read_text())
    assert pins["torch"] == "2.13.0"


def test_the_check_notices_a_drifted_pin_a_missing_package_and_a_loose_torch():
    pyproject = (ROOT / "pyproject.toml").read_text()
    env = (ROOT / "environment.yml").read_text()
    assert any("numpy" in p for p in disagreements(pyproject, env.replace("numpy==2.4.6", "numpy==2.4.5")))
    assert any("tqdm" in p for p in disagreements(pyproject, env.replace("      - tqdm==4.70.1\n", "")))
    assert any("torch" in p for p in disagreements(pyproject.replace('"torch==2.13.0"', '"torch>=2.13"'), env))
