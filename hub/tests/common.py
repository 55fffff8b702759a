"""Settings shared by the hub tests (conftest.py and the tests import them)."""

import os
from pathlib import Path

from hub import limits

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "artifacts" / "hub"
TEST_DIR = Path(os.environ.get("LLMRL_HUB_TEST_DIR", "/srv/llmrl-hub-test"))
PORT = int(os.environ.get("LLMRL_HUB_TEST_PORT", "8550"))  # this test's ports: 8550-8553 (servers: unix sockets)
INSTRUCTOR = "llmrl-t-inst"
# s1-s3: the course cycle (s3 and s4 attack it: test_hub_attacks.py); s4: the browser; s5: the hostile
# submission the instructor opens in the formgrader (test_hub_browser.py)
STUDENTS = ["llmrl-t-s1", "llmrl-t-s2", "llmrl-t-s3", "llmrl-t-s4", "llmrl-t-s5"]
ASSIGNMENTS = ["hw4", "lab11"]
SESSION_LIMIT_S = 1800  # the whole session; a hang ends with every thread's traceback instead of running on

# Each student's limits on the test hub (hub/limits.py), smaller than a course's so that the tests that
# pass them stay light on a shared machine: a JupyterLab with a kernel that imports torch fits.
TEST_LIMITS = limits.Limits(memory_bytes=1024 * limits.MiB, processes=256, disk_bytes=256 * limits.MiB,
                            disk_inodes=20_000, file_bytes=128 * limits.MiB)
