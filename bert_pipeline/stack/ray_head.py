"""The Ray head node (`ray start --head --block`) with its dashboard, which serves the Job Submission API behind
`ray job submit`."""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

from bert_core.launch.ports import free_ports
from bert_pipeline.stack.health import http_ok
from bert_pipeline.stack.service import Record, Service, base_env, executable


def _more_logs(record: Record) -> str:
    return f" and the Ray logs in {record['temp_dir']}/session_latest/logs"


# `ray start --block` stops its head in order when it alone gets SIGTERM (~3 s); signalled together with it,
# Ray's GCS and the `ray start` process itself hang on until SIGKILL (8.4 s against 2.6 s, measured, Ray 2.60).
SERVICE = Service("ray", port_keys=("ray_gcs", "ray_dashboard"), stop_grace_s=8.0, check_health=http_ok,
                  leader_first=True, more_logs=_more_logs)


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
        "env": base_env(home), "url": url, "health_url": f"{url}/api/gcs_healthz",
        "log": str(home / "stack" / "ray.log"), "address": gcs_address(ports), "temp_dir": str(ray_tmp),
    }
