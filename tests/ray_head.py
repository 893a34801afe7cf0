"""A real local Ray cluster (`ray start --head` with its dashboard and job server) for the tests that submit
Ray jobs; one per test session, stopped at the end."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RayHead:
    dashboard_url: str  # the job server (RAY_ADDRESS for `ray job submit` and JobSubmissionClient)
    gcs_address: str
    env: dict[str, str]  # what a client process needs: PATH with this venv, auth mode, no stray RAY_ADDRESS
    ray: str  # the `ray` executable


@pytest.fixture(scope="session")
def ray_head(tmp_path_factory) -> RayHead:
    ray = shutil.which("ray", path=str(BIN)) or str(BIN / "ray")
    home = tmp_path_factory.mktemp("ray-head-home")
    # The job drivers run with the environment `ray start` had: this venv's python first on PATH.
    env = dict(os.environ, RAY_AUTH_MODE="disabled", PATH=f"{BIN}:{os.environ['PATH']}", RAY_USAGE_STATS_ENABLED="0",
               BERT_PIPELINE_HOME=str(home))
    env.pop("RAY_ADDRESS", None)
    dashboard, gcs = free_port(), free_port()
    # Ray's unix socket paths must stay under 108 bytes: a short temp dir, not pytest's deep one.
    ray_tmp = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
    start = subprocess.run([ray, "start", "--head", "--num-cpus", "2", "--port", str(gcs),
                            "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dashboard),
                            "--temp-dir", str(ray_tmp), "--disable-usage-stats"],
                           env=env, capture_output=True, text=True, timeout=180)
    assert start.returncode == 0, start.stderr[-2000:]
    try:
        yield RayHead(f"http://127.0.0.1:{dashboard}", f"127.0.0.1:{gcs}", env, ray)
    finally:
        subprocess.run([ray, "stop", "--force"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(ray_tmp, ignore_errors=True)
