"""The Ray head node (`ray start --head --block`) with its dashboard, which serves the Job Submission API behind
`ray job submit`."""

from __future__ import annotations

import hashlib
import os
import secrets
import tempfile
from pathlib import Path

from bert_core.launch.ports import free_ports
from bert_pipeline.stack import mlflow_server
from bert_pipeline.stack.health import http_ok
from bert_pipeline.stack.service import Record, Service, base_env, executable


def _more_logs(record: Record) -> str:
    return f" and the Ray logs in {record['temp_dir']}/session_latest/logs"


# `ray start --block` stops its head in order when it alone gets SIGTERM (~3 s); signalled together with it,
# Ray's GCS and the `ray start` process itself hang on until SIGKILL (8.4 s against 2.6 s, measured, Ray 2.60).
SERVICE = Service("ray", port_keys=("ray_gcs", "ray_dashboard"), stop_grace_s=8.0, check_health=http_ok,
                  leader_first=True, more_logs=_more_logs)


def auth_token_path(home: Path) -> Path:
    """The stack head's Ray token (HOME/stack/ray_auth_token, mode 0600): made by the first `up`, then kept."""
    file = home / "stack" / "ray_auth_token"
    if not file.is_file():
        file.parent.mkdir(parents=True, exist_ok=True)
        tmp = file.with_name(f".{file.name}.tmp-{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_hex(32))
        os.replace(tmp, file)
    return file


def auth_env(home: Path) -> dict[str, str]:
    """What every process of the head and every client of it needs: Ray 2.60 binds the GCS and the raylets to all
    interfaces whatever --node-ip-address says (only the dashboard honours --dashboard-host), so the head checks a
    token (Ray's token authentication), read from a file so that it shows in no environment listing."""
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(auth_token_path(home))}


def own_env(home: Path, env: dict[str, str], ports: dict[str, int]) -> dict[str, str]:
    """`env` for a process of the stack's own head or a client of it: its token (a user's RAY_AUTH_TOKEN, which
    Ray would read first, left out) and, for the head, its own address. Ray Train's PlacementGroupCleaner finds
    "its" cluster by RAY_ADDRESS, else the machine's latest `ray start`: another instance's state API then answers
    that the run's controller is gone, and the cleaner removes a healthy run's placement group (see
    evaluation/loopback_cluster.py); the head's raylet passes RAY_ADDRESS on to every worker."""
    env = {k: v for k, v in env.items() if k != "RAY_AUTH_TOKEN"}
    return {**env, **auth_env(home), "RAY_ADDRESS": gcs_address(ports)}


def dashboard_url(ports: dict[str, int]) -> str:
    """The dashboard, which also serves the Job Submission API."""
    return f"http://127.0.0.1:{ports['ray_dashboard']}"


def gcs_address(ports: dict[str, int]) -> str:
    """The GCS address, the one a Ray driver connects to."""
    return f"127.0.0.1:{ports['ray_gcs']}"


def temp_dir(home: Path) -> Path:
    # Ray puts Unix sockets under its temp dir and socket paths are limited to 107 bytes: a home deep in a
    # temp directory would be too long, so a short per-home directory under the system temp dir. Its own
    # directory (not /tmp/ray) also keeps a bare `ray.init()` elsewhere from finding and joining this head.
    digest = hashlib.sha256(str(home).encode()).hexdigest()[:10]
    return Path(tempfile.gettempdir()) / f"bert-ray-{digest}"


def spec(home: Path, ports: dict[str, int], num_cpus: int) -> Record:
    """Command, environment, URLs and log file of the head."""
    url = dashboard_url(ports)
    ray_tmp = temp_dir(home)
    # Ray's other fixed default ports (client server 10001, dashboard agent 52365) would clash with a second head
    # or a local ray.init() on this machine: free ones instead, none of the head's own (not bound yet, so the OS
    # may offer one of them again: CI saw the agent given the dashboard's port) nor in its workers' range.
    client_port, agent_port = free_ports(2, avoid=set(ports.values()))
    return {
        "command": [executable("ray"), "start", "--head", "--block",
                    "--node-ip-address", "127.0.0.1", "--port", str(ports["ray_gcs"]),
                    "--include-dashboard", "true", "--dashboard-host", "127.0.0.1",
                    "--dashboard-port", str(ports["ray_dashboard"]),
                    "--ray-client-server-port", str(client_port),
                    "--dashboard-agent-listen-port", str(agent_port),
                    "--num-cpus", str(num_cpus), "--temp-dir", str(ray_tmp), "--disable-usage-stats"],
        # Its workers log to the stack's MLflow server, as Airflow's tasks do: a job on the head that uses the
        # Python API (no CLI to find the server) would otherwise log to HOME/mlflow.db, which cannot reach the
        # artifacts (mlflow-artifacts:) of the experiments the server made. (A head without a stack's MLflow,
        # the tests' bare one, has no server to name.)
        "env": {**own_env(home, base_env(home), ports),
                **({"MLFLOW_TRACKING_URI": mlflow_server.url(ports)} if "mlflow" in ports else {})},
        "url": url, "health_url": f"{url}/api/gcs_healthz",
        "log": str(home / "stack" / "ray.log"), "address": gcs_address(ports), "temp_dir": str(ray_tmp),
    }
