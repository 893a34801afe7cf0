"""The stack's processes write to log files and task logs, not to a terminal: they get the settings `bert-pipeline
run` sets for its run log (bert_pipeline.run_output.LOG_ENV: no colour codes in Ray's worker-line prefixes, no
MLflow download bars), on both profiles and in the Ray head whose workers train, unless the user set them."""

from __future__ import annotations

import pytest

from bert_pipeline.run_output import LOG_ENV
from bert_pipeline.stack import airflow, airflow_celery, ray_head
from bert_pipeline.stack.state import DEFAULT_PORTS

SECRETS = {"postgres_password": "pg", "redis_password": "rd", "jwt_secret": "jwt", "api_secret_key": "api",
           "fernet_key": "fernet"}


@pytest.fixture(autouse=True)
def _unset(monkeypatch):
    for name in LOG_ENV:
        monkeypatch.delenv(name, raising=False)


def _environments(home) -> dict[str, dict[str, str]]:
    """The environment of each process that runs a task or a Ray worker, on both profiles."""
    ports = dict(DEFAULT_PORTS)
    gcs, dashboard = ray_head.gcs_address(ports), ray_head.dashboard_url(ports)
    envs = {"airflow standalone": airflow.spec(home, ports, parallelism=2)["env"],
            "ray head": ray_head.spec(home, ports, num_cpus=2)["env"]}
    production = airflow_celery.specs(home, ports, SECRETS, gcs, dashboard, workers=2, concurrency=1)
    envs.update({name: record["env"] for name, record in production.items()})
    return envs


def test_every_task_and_worker_process_gets_the_run_logs_settings(tmp_path):
    envs = _environments(tmp_path)
    assert {"airflow standalone", "airflow-scheduler", "celery-worker-1", "celery-worker-2", "ray head"} <= set(envs)
    for name, env in envs.items():
        assert {k: env.get(k) for k in LOG_ENV} == LOG_ENV, name


def test_a_setting_the_user_made_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_COLOR_PREFIX", "1")
    for name, env in _environments(tmp_path).items():
        assert env["RAY_COLOR_PREFIX"] == "1", name
        assert env["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] == LOG_ENV["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"], name


def test_every_task_and_worker_process_logs_to_the_stacks_mlflow_server(tmp_path, monkeypatch):
    """Airflow's tasks and the Ray head's workers (a `ray job submit` job using the Python API included) log to the
    stack's MLflow server, never to HOME/mlflow.db (whose sqlite store cannot reach the server's artifacts), and
    not to a server the user's shell pointed at."""
    from bert_pipeline.stack import mlflow_server

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://elsewhere:5000")
    server = mlflow_server.url(dict(DEFAULT_PORTS))
    for name, env in _environments(tmp_path).items():
        if name.startswith(("airflow standalone", "celery-worker", "ray head")):
            assert env.get("MLFLOW_TRACKING_URI") == server, name
