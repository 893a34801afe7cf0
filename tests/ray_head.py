"""A real local Ray cluster (`ray start --head --block` with its dashboard and job server) for the tests that
submit Ray jobs; one per test module (an idle head costs CPU the rest of the suite needs). It is started exactly
as `bert-pipeline stack up` starts its Ray head (free ports, its own temp dir) and stopped by signalling its own
process group as `stack down` does (`ray start` alone first), never with `ray stop`, which would kill every
Ray process on the machine."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from bert_core.launch.ports import free_ports
from bert_pipeline.stack import processes, supervisor
from bert_pipeline.stack import ray_head as ray_service
from bert_pipeline.stack.health import wait_healthy


@dataclass
class RayHead:
    dashboard_url: str  # the job server (RAY_ADDRESS for `ray job submit` and JobSubmissionClient)
    gcs_address: str
    env: dict[str, str]  # what a client process needs: PATH with this venv, auth mode, no stray RAY_ADDRESS
    ray: str  # the `ray` executable


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory) -> RayHead:
    home = tmp_path_factory.mktemp("ray-head-home")
    dashboard, gcs = free_ports(2)
    spec = ray_service.spec(home, {"ray_dashboard": dashboard, "ray_gcs": gcs}, num_cpus=2)
    # The job drivers run with the environment the head was started with: this venv first on PATH. Without the
    # stack's token: these tests submit from the test process, whose Ray mode is "disabled" (conftest); the token
    # itself is tested on the stack's head (tests/test_stack_ui.py).
    env = {k: v for k, v in spec["env"].items() if k != "RAY_AUTH_TOKEN_PATH"}
    env.update(RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")
    spec = {**spec, "env": env}
    proc, record = supervisor.start(home, spec)
    try:
        wait_healthy({"ray": (ray_service.SERVICE, proc, record)}, timeout=180)
        yield RayHead(record["url"], record["address"], env, spec["command"][0])
    finally:
        processes.stop_process(supervisor.stop_target(ray_service.SERVICE, record))
        proc.wait(timeout=60)
        if not os.environ.get("BERT_PIPELINE_KEEP_RAY_LOGS"):
            import shutil

            shutil.rmtree(Path(record["temp_dir"]), ignore_errors=True)
