"""For training tests (imported by their conftest.py): tiny models run as fast on one intra-op thread,
which does not collapse when other processes share the cores (OpenMP threads spin-waiting on a busy 2-core machine run ~40x slower)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
