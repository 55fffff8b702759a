"""The grader as the hub's course folder holds it (hub/deploy/course.py copies the package there; the course service
has that folder on PYTHONPATH): the formgrader extension the service's config names, the nbgrader plugins the
course's settings name and the batch's command line all import from the copy, without the repository."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.course.layout import ROOT
from hub import deploy
from hub.deploy import configs

pytestmark = pytest.mark.fast

CHECK = r'''
import json, sys
from pathlib import Path
from traitlets.config.loader import PyFileConfigLoader
from traitlets.utils.importstring import import_item
cfg = PyFileConfigLoader("nbgrader_config.py", path=str(Path("autograder").resolve())).load_config()
named = [cfg.ExportApp.plugin_class, cfg.ExchangeFactory.collect,
         "autograder.export.lms_grades.CanvasGrades", "autograder.collect.lms_downloads.LmsExtractor"]
out = {n: sys.modules[import_item(n).__module__].__file__ for n in named}
import autograder.formgrader.safe_formgrader as sf
ext = sf._jupyter_server_extension_points()[0]["module"]
out[ext] = __import__(ext, fromlist=["x"]).__file__
import autograder.cli.batch, autograder.execution.nbgrader_preprocessors as pp
out["preprocessors"] = [p.__name__ for p in cfg.Autograde.autograde_preprocessors]
out["root"] = cfg.CourseDirectory.root
print(json.dumps(out))
'''


def test_the_copied_grader_imports_everything_the_hub_names(tmp_path):
    course = tmp_path / "course"
    course.mkdir()
    shutil.copytree(ROOT / "autograder", course / "autograder", ignore=shutil.ignore_patterns(*deploy.GRADER_LEFT_OUT))
    left = {p.name for p in (course / "autograder").iterdir()}
    assert not left & {"tests", "corpus", "samples", "kit", "bin"}, left
    env = dict(os.environ, PYTHONPATH=str(course))  # as hub/jupyterhub_config.py gives the course service
    proc = subprocess.run([sys.executable, "-c", CHECK], cwd=course, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out.pop("root") == str(course)
    assert "TwoRunExecute" in out.pop("preprocessors")
    assert "autograder.formgrader.safe_formgrader" in out
    for name, file in out.items():
        assert Path(file).resolve().is_relative_to(course.resolve()), f"{name} came from {file}, not the copy"


def test_the_course_service_loads_the_formgrader_extension_by_its_package_path():
    text = Path(configs.__file__).read_text()  # where the course service's jupyter config is written
    assert '"autograder.formgrader.safe_formgrader": True' in text
    import autograder.formgrader.safe_formgrader as sf

    assert sf._jupyter_server_extension_points() == [{"module": "autograder.formgrader.safe_formgrader"}]
