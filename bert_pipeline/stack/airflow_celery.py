"""Airflow as a team deploys it (the production profile): its components as separate processes on PostgreSQL, and
the CeleryExecutor (the official Celery provider, Redis as the broker) with Celery workers that share nothing
with each other but the broker, the API server, the metadata database and the log folder.

- `airflow db migrate` before anything starts (the metadata database in PostgreSQL);
- `airflow api-server` (UI, REST API, the execution API the task processes talk to), `airflow scheduler`,
  `airflow dag-processor`, `airflow triggerer`, with AIRFLOW_HOME=HOME/airflow;
- `airflow celery worker` per worker, each with its own AIRFLOW_HOME, HOME, working directory, TMPDIR and
  BERT_PIPELINE_HOME under HOME/workers/<name>/, as if it ran on a machine of its own: a task reaches another
  task's outputs only through the run's work URI (s3://). Each reports its own name as its host
  (`[core] hostname_callable`, bert_pipeline.stack.worker_host), which Airflow records on the task instances
  it runs.

Settings every component must share (the database and broker URLs, JWT secret, API secret key, Fernet key) are
passed as AIRFLOW__* environment variables, as the official Helm chart does; the secrets come from
bert_pipeline.stack.secrets. Task logs go to one folder, HOME/airflow/logs, that the workers write and the API
server reads (Airflow's "shared drive for logs"; a deployment uses remote logging instead), so the workers do
not serve their logs.
"""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

from bert_pipeline.stack import airflow, postgres, redis, worker_host
from bert_pipeline.stack.health import get
from bert_pipeline.stack.processes import run_logged
from bert_pipeline.stack.service import Record, Service, executable

# The Python distributions behind the CeleryExecutor on PostgreSQL (the `production` extra).
PYTHON_PACKAGES = ("apache-airflow-providers-celery", "apache-airflow-providers-postgres")
# Component service -> (the `airflow` subcommand, its key in the API server's health report).
COMPONENTS = {"airflow-api": (["api-server"], "metadatabase"), "airflow-scheduler": (["scheduler"], "scheduler"),
              "airflow-dag-processor": (["dag-processor"], "dag_processor"),
              "airflow-triggerer": (["triggerer"], "triggerer")}
WORKER_PREFIX = "celery-worker-"


def missing_packages() -> list[str]:
    """The distributions not installed (looked up in their metadata: importing `airflow.providers` would import
    Airflow, seconds and a config file)."""
    missing = []
    for dist in PYTHON_PACKAGES:
        try:
            importlib.metadata.distribution(dist)
        except importlib.metadata.PackageNotFoundError:
            missing.append(dist)
    return missing


def check_component(record: Record) -> tuple[bool, str]:
    """(healthy, short reason): this component's entry in the API server's health report."""
    status, body = get(record["health_url"])
    if status != 200:
        return False, f"{record['health_url']}: " + (f"HTTP {status}" if status else body)
    try:
        state = json.loads(body).get(record["component"], {}).get("status")
    except (ValueError, AttributeError):
        return False, f"{record['health_url']}: not JSON"
    return (True, "ok") if state == "healthy" else (False, f"{record['component']} {state or 'missing'}")


def check_worker(record: Record) -> tuple[bool, str]:
    """(healthy, short reason): the worker has told Celery it is ready, since its last start (its log says
    `<name>@host ready.`), and it is alive (the supervisor checks the process)."""
    log = Path(record["log"])
    try:
        text = log.read_bytes()[record.get("log_offset", 0):].decode(errors="replace")
    except OSError as exc:
        return False, str(exc)
    return (True, "ok") if f"{record['celery_name']}@" in text and " ready." in text else (False, "starting")


def migrate(spec: Record, timeout: float) -> None:
    """`airflow db migrate`: the metadata database's tables, before any component starts."""
    run_logged([executable("airflow"), "db", "migrate"], spec["env"], Path(spec["cwd"]),
               Path(spec["log"]).with_name("airflow-db-migrate.log"), timeout, "airflow db migrate")


def services(workers: int) -> list[Service]:
    """The components, then the workers (worker names: celery-worker-1, ...)."""
    found = [Service(name, port_keys=("airflow",) if name == "airflow-api" else (),
                     # The scheduler takes ~15 s to stop on 2 cores; a worker waits for its running tasks.
                     stop_grace_s=30.0, check_health=check_component, prepare=migrate if name == "airflow-api" else None)
             for name in COMPONENTS]
    found += [worker_service(f"{WORKER_PREFIX}{i}") for i in range(1, workers + 1)]
    return found


def worker_service(name: str) -> Service:
    return Service(name, port_keys=(), stop_grace_s=30.0, check_health=check_worker)


def shared_env(home: Path, ports: dict[str, int], stored: dict[str, str], ray_address: str,
               ray_dashboard_url: str | None) -> dict[str, str]:
    env = airflow.services_env(home, ports, ray_address, ray_dashboard_url)
    env.update({
        "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": postgres.url(ports, stored["postgres_password"], "airflow"),
        # Celery's results go to the same database (the provider's default: `db+` and sql_alchemy_conn).
        "AIRFLOW__CELERY__BROKER_URL": redis.url(ports, stored["redis_password"]),
        "AIRFLOW__API_AUTH__JWT_SECRET": stored["jwt_secret"],
        "AIRFLOW__API__SECRET_KEY": stored["api_secret_key"],
        "AIRFLOW__CORE__FERNET_KEY": stored["fernet_key"],
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "airflow" / "logs"),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "airflow" / airflow.PASSWORD_FILE),
    })
    return env


def worker_dirs(home: Path, name: str) -> dict[str, Path]:
    root = home / "workers" / name
    return {"root": root, "airflow": root / "airflow", "home": root / "home", "work": root / "work",
            "tmp": root / "tmp"}


def specs(home: Path, ports: dict[str, int], stored: dict[str, str], ray_address: str, ray_dashboard_url: str | None,
          workers: int, concurrency: int) -> dict[str, Record]:
    """Command, environment, working directory, URLs and log of each component and worker."""
    env = shared_env(home, ports, stored, ray_address, ray_dashboard_url)
    url = airflow.api_url(ports)
    health_url = f"{url}/api/v2/monitor/health"
    planned: dict[str, Record] = {}
    for name, (command, component) in COMPONENTS.items():
        if name == "airflow-api":
            command = [*command, "--host", "127.0.0.1", "--port", str(ports["airflow"]), "--workers", "1"]
        planned[name] = {"command": [executable("airflow"), *command], "env": env, "cwd": str(home),
                         "url": url, "health_url": health_url, "component": component,
                         "log": str(home / "stack" / f"{name}.log"),
                         "password_file": str(home / "airflow" / airflow.PASSWORD_FILE)}
    for i in range(1, workers + 1):
        name = f"{WORKER_PREFIX}{i}"
        dirs = worker_dirs(home, name)
        for folder in dirs.values():
            folder.mkdir(parents=True, exist_ok=True)
        worker_env = {**env, "AIRFLOW_HOME": str(dirs["airflow"]), "HOME": str(dirs["home"]),
                      "TMPDIR": str(dirs["tmp"]), "BERT_PIPELINE_HOME": str(dirs["home"] / ".bert-pipeline"),
                      "AIRFLOW__CORE__HOSTNAME_CALLABLE": worker_host.CALLABLE, worker_host.ENV: name}
        log = home / "stack" / f"{name}.log"
        planned[name] = {
            "command": [executable("airflow"), "celery", "worker", "--concurrency", str(concurrency),
                        "--celery-hostname", f"{name}@%h", "--skip-serve-logs"],
            "env": worker_env, "cwd": str(dirs["work"]), "url": f"celery://{name}", "celery_name": name,
            "log": str(log), "log_offset": log.stat().st_size if log.is_file() else 0, "home": str(home),
            "dirs": {k: str(v) for k, v in dirs.items()},
        }
    return planned

