"""Training tests here run on one torch thread (see tests/one_thread.py)."""

from tests.one_thread import one_torch_thread  # noqa: F401
