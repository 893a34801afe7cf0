"""A running local stack (`bert-pipeline stack up`: MLflow server, Ray head, Airflow) for tests that need
real services, on free ports in a temp home, stopped with `bert-pipeline stack down` after the module.

Use it from a test module by binding the fixture to a module-level name (an import would be reported as
unused by the linter and then as redefined by the test's argument):

    from tests import stack_fixture

    local_stack = stack_fixture.local_stack

    def test_something(local_stack):
        local_stack.mlflow_url, local_stack.ray_address, local_stack.airflow_credentials() ...

The production profile (`stack up --profile production`) is `running_stack("production", extra_flags,
ray_cluster=...)`, a context manager (tests/test_production_stack.py makes it a module fixture inside the S3
server and Ray cluster it needs).

One stack per test module: an idle stack still takes about a tenth of a core (Airflow's scheduler and DAG
processor, Ray's dashboard and agents), which the rest of a CPU-bound 2-core suite would lose if it ran to the
end of the session. Starting it takes about 35 s on 2 cores. Set BERT_PIPELINE_STACK_KEEP=1 to leave the home
directory (logs) after the module.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bert_core.launch.ports import free_ports
from bert_pipeline.stack import ray_head
from bert_pipeline.stack.airflow import PASSWORD_FILE

UP_TIMEOUT_S = 400  # `stack up` waits up to its own --timeout (300 s) per phase; this bounds the whole command


@dataclass(frozen=True)
class LocalStack:
    home: Path  # BERT_PIPELINE_HOME of the stack: mlflow.db, mlartifacts/, airflow/, stack/ (state and logs)
    mlflow_port: int
    airflow_port: int
    ray_dashboard_port: int
    ray_gcs_port: int
    # TMPDIR of the services and of the tasks and Ray workers they start, so that what they leave there is
    # seen. Short: Ray's socket paths under it (its temp dir is TMPDIR/bert-ray-...) must stay < 108 bytes.
    tmp: Path
    # The production profile's own: PostgreSQL's and Redis's ports, and the Ray cluster it was pointed at
    # (--ray-address; None: the stack's own head on ray_gcs_port).
    profile: str = "default"
    postgres_port: int | None = None
    redis_port: int | None = None
    ray_cluster: str | None = None

    @property
    def mlflow_url(self) -> str:
        return f"http://127.0.0.1:{self.mlflow_port}"

    @property
    def airflow_url(self) -> str:
        return f"http://127.0.0.1:{self.airflow_port}"

    @property
    def ray_dashboard_url(self) -> str:
        """The Ray dashboard, which also serves the Job Submission API (`ray job submit --address ...`)."""
        return f"http://127.0.0.1:{self.ray_dashboard_port}"

    @property
    def ray_address(self) -> str:
        """The head's GCS address, for a Ray driver (`ray.init(address=...)`)."""
        return self.ray_cluster or f"127.0.0.1:{self.ray_gcs_port}"

    @property
    def airflow_password_file(self) -> Path:
        return self.home / "airflow" / PASSWORD_FILE

    @property
    def logs(self) -> Path:
        return self.home / "stack"

    def airflow_credentials(self) -> tuple[str, str]:
        """(user, password) of the Airflow admin that `airflow standalone` generated."""
        return "admin", json.loads(self.airflow_password_file.read_text())["admin"]

    def client_env(self) -> dict[str, str]:
        """Environment variables that point a client process (CLI, driver, MLflow client) at this stack."""
        # The stack's own head checks its token; the loopback cluster given as --ray-address runs without one.
        auth = {"RAY_AUTH_MODE": "disabled"} if self.ray_cluster else ray_head.auth_env(self.home)
        return {"BERT_PIPELINE_HOME": str(self.home), "MLFLOW_TRACKING_URI": self.mlflow_url,
                "RAY_ADDRESS": self.ray_address, **auth}

    def cli(self, *args: str, timeout: float = UP_TIMEOUT_S) -> subprocess.CompletedProcess:
        """Run `bert-pipeline stack ARGS --home HOME` in a child process (as a person would, so the services
        are not children of the test process)."""
        return subprocess.run([sys.executable, "-m", "bert_pipeline.cli", "stack", *args, "--home", str(self.home)],
                              env={**service_env(), "TMPDIR": str(self.tmp)}, capture_output=True, text=True,
                              timeout=timeout)

    def log_tails(self, lines: int = 30) -> str:
        """The last lines of each service log, for a failure message."""
        out = []
        for log in sorted(self.logs.glob("*.log")):
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {log}\n" + "\n".join(tail))
        return "\n".join(out)


def service_env() -> dict[str, str]:
    """This process's environment without what would point the stack's services somewhere else (the test
    session's own AIRFLOW_HOME and Airflow settings, a tracking URI, a Ray address)."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("AIRFLOW", "MLFLOW_")) and k not in ("RAY_ADDRESS", "BERT_PIPELINE_HOME")}


def start_stack(root: Path, tmp: Path, profile: str = "default", extra: tuple[str, ...] = (),
                ray_cluster: str | None = None) -> LocalStack:
    """`stack up` in root/home on free ports (with `extra` flags; `ray_cluster`: production's --ray-address);
    fails the test with the service logs when it does not come up."""
    mlflow, airflow, dashboard, gcs, postgres, redis = free_ports(6)
    production = profile == "production"
    stack = LocalStack(home=root / "home", mlflow_port=mlflow, airflow_port=airflow, ray_dashboard_port=dashboard,
                       ray_gcs_port=gcs, tmp=tmp, profile=profile, postgres_port=postgres if production else None,
                       redis_port=redis if production else None, ray_cluster=ray_cluster)
    flags = ["--mlflow-port", str(mlflow), "--airflow-port", str(airflow)]
    if ray_cluster:
        flags += ["--ray-address", ray_cluster]
    else:
        flags += ["--ray-dashboard-port", str(dashboard), "--ray-port", str(gcs)]
    if production:
        flags += ["--profile", "production", "--postgres-port", str(postgres), "--redis-port", str(redis)]
    try:
        result = stack.cli("up", *flags, *extra)
    except subprocess.TimeoutExpired:
        stop_stack(stack)
        pytest.fail(f"`bert-pipeline stack up` did not finish in {UP_TIMEOUT_S} s\n{stack.log_tails()}")
    if result.returncode != 0:
        stop_stack(stack)
        pytest.fail(f"`bert-pipeline stack up` failed ({result.returncode}):\n{result.stdout}\n{result.stderr}\n"
                    f"{stack.log_tails()}")
    return stack


def stop_stack(stack: LocalStack) -> subprocess.CompletedProcess:
    """`stack down`, then remove what `down` leaves outside the home: Ray's per-home temp dir (sockets, session
    logs) and, when the stack ran as root, its PostgreSQL data directory under the postgres user's home."""
    state_file = stack.logs / "state.json"
    services = json.loads(state_file.read_text()).get("services", {}) if state_file.is_file() else {}
    ray_tmp = services.get("ray", {}).get("temp_dir")
    pg_data = services.get("postgres", {}).get("data_dir")
    result = stack.cli("down", timeout=180)
    if result.returncode == 0:
        if ray_tmp:
            shutil.rmtree(ray_tmp, ignore_errors=True)
        if pg_data and not Path(pg_data).is_relative_to(stack.home):
            shutil.rmtree(Path(pg_data).parent, ignore_errors=True)
    return result


@contextlib.contextmanager
def running_stack(profile: str = "default", extra: tuple[str, ...] = (), ray_cluster: str | None = None
                  ) -> Iterator[LocalStack]:
    """A stack of `profile` on free ports in a temp home for the block, stopped after it with `stack down`."""
    # Not pytest's tmp_path: Airflow's and MLflow's paths appear in URLs and logs; a short root reads better.
    root = Path(tempfile.mkdtemp(prefix="bert-stack-"))
    tmp = Path(tempfile.mkdtemp(prefix="bt", dir="/tmp"))
    keep = bool(os.environ.get("BERT_PIPELINE_STACK_KEEP"))
    try:
        stack = start_stack(root, tmp, profile, extra, ray_cluster)
    except BaseException:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        yield stack
    finally:
        result = stop_stack(stack)
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
            shutil.rmtree(tmp, ignore_errors=True)
        assert result.returncode == 0, f"`stack down` failed:\n{result.stdout}\n{result.stderr}"


@pytest.fixture(scope="module")
def local_stack() -> Iterator[LocalStack]:
    """The module's running stack."""
    with running_stack() as stack:
        yield stack


@contextlib.contextmanager
def mlflow_only_stack(home: Path) -> Iterator[str]:
    """A home whose recorded stack runs `stack up`'s MLflow server alone (sqlite HOME/mlflow.db, artifacts served
    from HOME/mlartifacts), started and stopped with the stack's own code; yields the server's URL. For the
    commands' use of a stack's MLflow, where Airflow and Ray play no part (the whole stack takes ~35 s more)."""
    from bert_pipeline.stack import mlflow_server, processes
    from bert_pipeline.stack.health import wait_healthy
    from bert_pipeline.stack.state import DEFAULT_PORTS, Stack
    from bert_pipeline.stack.supervisor import start, stop_target

    (port,) = free_ports(1)
    ports = {**DEFAULT_PORTS, "mlflow": port}
    spec = mlflow_server.spec(home, ports)
    home.joinpath("stack").mkdir(parents=True)
    proc, record = start(home, spec)
    try:
        stack = Stack(home)
        stack.state.update(ports=ports, home=str(home), profile="default", services={"mlflow": record})
        stack.save()
        wait_healthy({"mlflow": (mlflow_server.SERVICE, proc, record)}, timeout=120)
        yield record["url"]
    finally:
        processes.stop_processes({"mlflow": stop_target(mlflow_server.SERVICE, record)})
