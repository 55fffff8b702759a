"""Settings shared by the hub tests (conftest.py and the tests import them)."""

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "artifacts" / "hub"
TEST_DIR = Path(os.environ.get("LLMRL_HUB_TEST_DIR", "/srv/llmrl-hub-test"))
PORT = int(os.environ.get("LLMRL_HUB_TEST_PORT", "8550"))  # this test's ports: 8550-8553, servers 8560-8599
INSTRUCTOR = "llmrl-t-inst"
STUDENTS = ["llmrl-t-s1", "llmrl-t-s2", "llmrl-t-s3", "llmrl-t-s4"]  # s1-s3: the course cycle; s4: the browser
ASSIGNMENTS = ["hw4", "lab11"]
SESSION_LIMIT_S = 1200  # the whole session; a hang ends with every thread's traceback instead of running on
