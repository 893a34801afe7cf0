"""Settings the project makes for the processes it starts, through environment variables that a library reads
(MLflow's progress bars, Ray Train's preemption watcher and worker-group start timeout): set inside a block, and
only where the user has not set them, so a user's own value always wins."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def env_default(name: str, value: str) -> Iterator[None]:
    """`name` is `value` inside the block unless the environment already sets it; removed again after."""
    if name in os.environ:
        yield
        return
    os.environ[name] = value
    try:
        yield
    finally:
        os.environ.pop(name, None)
