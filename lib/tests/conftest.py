import os

import pytest
import torch

torch.set_num_threads(1)


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: trains real checkpoints or runs long RL (still run by make test)")
