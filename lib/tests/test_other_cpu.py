"""Checks run as another CPU would compute them (``make test-other-cpu``; docs/reproducibility.md).

``make test-other-cpu`` sets ``ATEN_CPU_CAPABILITY=default`` (torch's portable kernels instead of
AVX2 / AVX-512), ``MKL_CBWR=COMPATIBLE`` (MKL's code path for any x86-64) and disables numpy's
AVX2 / AVX-512 dispatch, then runs this file, the calibration tests, the number-checking tests that
are cheap enough (``OTHER_CPU_TESTS`` in the Makefile) and lab11's notebook under nbval. The first test makes sure that the emulation is real: the same small computation must give
other bits than this machine's own kernels (or the check is skipped, on a CPU whose own kernels
are already the portable ones). Outside that target the file is skipped.
"""

import os
import subprocess
import sys

import pytest

EMULATED = os.environ.get("ATEN_CPU_CAPABILITY", "").lower() == "default"
pytestmark = pytest.mark.skipif(not EMULATED, reason="run by `make test-other-cpu` (ATEN_CPU_CAPABILITY=default)")

# A small chain of the operations the course's models run (matmul, tanh, softmax, sums), printed
# as the hex of a float64 sum of float32 results: any difference in the last bits shows.
CHAIN = """
import torch
torch.set_num_threads(1)
g = torch.Generator().manual_seed(0)
x = torch.randn(64, 64, generator=g)
w = torch.randn(64, 64, generator=g) / 8
for _ in range(8):
    x = torch.softmax(torch.tanh(x @ w) * 3, -1) * 64
print(float(x.double().sum()).hex(), float((x @ w).double().sum()).hex())
"""


def _chain(env: dict) -> str:
    return subprocess.run([sys.executable, "-c", CHAIN], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_the_emulated_cpu_rounds_differently():
    import torch

    assert torch.backends.cpu.get_cpu_capability() == "DEFAULT"
    native_env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR")}
    native = subprocess.run([sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
                            env=native_env, capture_output=True, text=True, check=True).stdout.strip()
    if native == "DEFAULT":
        pytest.skip("this CPU's own kernels are the portable ones: nothing to emulate")
    assert _chain(dict(os.environ)) != _chain(native_env), (
        f"ATEN_CPU_CAPABILITY=default gave the same bits as this CPU's {native} kernels: the emulation "
        "changes nothing here, so the checks under it prove nothing")

