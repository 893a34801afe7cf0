"""The MLflow tracking server: sqlite store HOME/mlflow.db (the same file the embedded mode and `bert-pipeline
demo` write), artifacts proxied by the server into HOME/mlartifacts; in the production profile, PostgreSQL and an
S3 artifact store (the server reads S3's endpoint and credentials from its environment, as boto3 does)."""

from __future__ import annotations

from pathlib import Path

from bert_pipeline.stack.health import http_ok
from bert_pipeline.stack.service import Record, Service, base_env, executable

# Exits within a few seconds of SIGTERM.
SERVICE = Service("mlflow", port_keys=("mlflow",), stop_grace_s=15.0, check_health=http_ok)


def url(ports: dict[str, int]) -> str:
    return f"http://127.0.0.1:{ports['mlflow']}"


def spec(home: Path, ports: dict[str, int], database_url: str | None = None,
         artifacts_destination: str | None = None) -> Record:
    """Command, environment, URLs and log file of the server: by default on the sqlite store HOME/mlflow.db with
    artifacts in HOME/mlartifacts; the production profile gives a PostgreSQL `database_url` (passed in the
    environment, MLFLOW_BACKEND_STORE_URI, as it holds a password) and an s3:// `artifacts_destination`."""
    mlflow_url = url(ports)
    # The server's job runner (seven huey consumers, ~200 MB each) only serves GenAI features this
    # pipeline does not use.
    env = {**base_env(home), "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    store = ["--backend-store-uri", f"sqlite:///{home / 'mlflow.db'}"]
    if database_url:
        env["MLFLOW_BACKEND_STORE_URI"] = database_url
        store = []
    artifacts = artifacts_destination or str(home / "mlartifacts")
    return {
        "command": [executable("mlflow"), "server", *store,
                    # Proxied: clients up- and download artifacts through the server, which alone needs the
                    # artifact store's credentials.
                    "--serve-artifacts", "--artifacts-destination", artifacts,
                    "--host", "127.0.0.1", "--port", str(ports["mlflow"]),
                    # One worker process: a local server for one person; each worker costs ~300 MB.
                    "--workers", "1"],
        "env": env, "url": mlflow_url, "health_url": f"{mlflow_url}/health", "log": str(home / "stack" / "mlflow.log"),
        "store": f"sqlite:///{home / 'mlflow.db'}" if not database_url else database_url.split("@", 1)[-1],
        "artifacts": artifacts,
    }
