"""Airflow (`airflow standalone`): AIRFLOW_HOME=HOME/airflow, DAGs folder = the `pipelines` package; its tasks
get MLFLOW_TRACKING_URI (the stack's MLflow) and RAY_ADDRESS (the stack's Ray head, GCS form)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from bert_pipeline.dags_folder import pipelines_dir
from bert_pipeline.stack import mlflow_server, ray_head
from bert_pipeline.stack.health import get
from bert_pipeline.stack.service import Record, Service, base_env, executable

# What `airflow standalone` writes the generated admin password to (SimpleAuthManager, Airflow 3).
PASSWORD_FILE = "simple_auth_manager_passwords.json.generated"
COMPONENTS = frozenset({"metadatabase", "scheduler", "dag_processor", "triggerer"})


def check_health(record: Record) -> tuple[bool, str]:
    """(healthy, short reason): Airflow answers 200 while a component is still starting, so every component must
    report healthy."""
    status, body = get(record["health_url"])
    if status != 200:
        return False, f"{record['health_url']}: " + (f"HTTP {status}" if status else body)
    try:
        components = json.loads(body)
        bad = [f"{part} {info.get('status')}" for part, info in components.items()
               if isinstance(info, dict) and info.get("status") != "healthy"]
    except (ValueError, AttributeError):
        return False, f"{record['health_url']}: not JSON"
    bad += [f"{part} missing" for part in sorted(COMPONENTS - set(components))]
    return (False, ", ".join(bad)) if bad else (True, "ok")


# The scheduler takes ~15 s to stop on 2 cores.
SERVICE = Service("airflow", port_keys=("airflow",), stop_grace_s=30.0, check_health=check_health)


def services_env(home: Path, ports: dict[str, int], ray_address: str, ray_dashboard_url: str | None) -> dict[str, str]:
    """What every Airflow process of the stack and the tasks it runs get: the DAGs, the API server's address, and
    where the stack's MLflow server and Ray cluster are."""
    url = f"http://127.0.0.1:{ports['airflow']}"
    env = base_env(home)
    env.update({
        "AIRFLOW_HOME": str(home / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(pipelines_dir()),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(ports["airflow"]),
        # Task processes reach the execution API at {base_url}/execution/; the default assumes port 8080.
        "AIRFLOW__API__BASE_URL": url,
        # A task's calls to the execution API time out after 5 s by default, and a retry of a call that did go
        # through fails the task ("already running"): on a busy 2-core machine the API server can take longer.
        "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": os.environ.get("AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT", "60"),
        "MLFLOW_TRACKING_URI": mlflow_server.url(ports),
        # GCS form: a task connects to this cluster as a Ray driver. The dashboard (Job Submission API) address
        # is there for operators and people that submit jobs instead.
        "RAY_ADDRESS": ray_address,
    })
    if ray_dashboard_url:  # the stack's own head (an external cluster's comes with the user's own auth)
        env["RAY_DASHBOARD_URL"] = ray_dashboard_url
        env = ray_head.own_env(home, env, ports)
    return env


def api_url(ports: dict[str, int]) -> str:
    return f"http://127.0.0.1:{ports['airflow']}"


def spec(home: Path, ports: dict[str, int], parallelism: int) -> Record:
    """Command, environment, URLs and log file of `airflow standalone`."""
    url = api_url(ports)
    env = services_env(home, ports, ray_head.gcs_address(ports), ray_head.dashboard_url(ports))
    # The LocalExecutor forks `parallelism` workers up front (default 32, ~130 MB each).
    env["AIRFLOW__CORE__PARALLELISM"] = str(parallelism)
    return {
        "command": [executable("airflow"), "standalone"],
        "env": env, "url": url, "health_url": f"{url}/api/v2/monitor/health", "log": str(home / "stack" / "airflow.log"),
        "password_file": str(home / "airflow" / PASSWORD_FILE),
    }
