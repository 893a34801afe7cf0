"""Training tests run tiny models: one intra-op thread is as fast, and does not collapse when other
processes share the cores (OpenMP threads spin-waiting on a busy 2-core machine run ~40x slower)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
