"""The MLflow tracking server: sqlite store HOME/mlflow.db (the same file the embedded mode and `bert-pipeline
demo` write), artifacts proxied by the server into HOME/mlartifacts."""

from __future__ import annotations

from pathlib import Path

from bert_pipeline.stack.health import http_ok
from bert_pipeline.stack.service import Record, Service, base_env, executable

# Exits within a few seconds of SIGTERM.
SERVICE = Service("mlflow", port_keys=("mlflow",), stop_grace_s=15.0, check_health=http_ok)


def url(ports: dict[str, int]) -> str:
    return f"http://127.0.0.1:{ports['mlflow']}"


def spec(home: Path, ports: dict[str, int]) -> Record:
    """Command, environment, URLs and log file of the server."""
    mlflow_url = url(ports)
    # The server's job runner (seven huey consumers, ~200 MB each) only serves GenAI features this
    # pipeline does not use.
    env = {**base_env(home), "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    return {
        "command": [executable("mlflow"), "server",
                    "--backend-store-uri", f"sqlite:///{home / 'mlflow.db'}",
                    "--serve-artifacts", "--artifacts-destination", str(home / "mlartifacts"),
                    "--host", "127.0.0.1", "--port", str(ports["mlflow"]),
                    # One worker process: a local server for one person; each worker costs ~300 MB.
                    "--workers", "1"],
        "env": env, "url": mlflow_url, "health_url": f"{mlflow_url}/health", "log": str(home / "stack" / "mlflow.log"),
    }
