"""Redis (Debian's `redis-server`): the Celery broker of the production profile's Airflow.

127.0.0.1 only, a password (from a config file of mode 0600, so it is not on the command line), no persistence:
the broker holds only the queued task messages, and the scheduler sends a task again when it is lost (its task
instance stays queued).
"""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

from bert_pipeline.stack import secrets
from bert_pipeline.stack.service import Record, Service, base_env

APT_PACKAGE = "redis-server"


def server() -> str | None:
    return shutil.which("redis-server") or next(
        (p for p in ("/usr/bin/redis-server", "/usr/local/bin/redis-server") if os.access(p, os.X_OK)), None)


def missing() -> list[str]:
    return [] if server() else ["redis-server"]


def url(ports: dict[str, int], password: str) -> str:
    """The broker URL (Celery's `redis://` form; database 0)."""
    return f"redis://:{password}@127.0.0.1:{ports['redis']}/0"


def ping(port: int, password: str, timeout: float = 3.0) -> tuple[bool, str]:
    """AUTH and PING in Redis's own protocol: (answered +PONG, short reason)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(f"AUTH {password}\r\nPING\r\n".encode())
            answer = b""
            while answer.count(b"\r\n") < 2:
                chunk = sock.recv(256)
                if not chunk:
                    break
                answer += chunk
    except OSError as exc:
        return False, f"127.0.0.1:{port}: {exc}"
    lines = answer.decode(errors="replace").split("\r\n")
    return (True, "ok") if lines[:2] == ["+OK", "+PONG"] else (False, f"127.0.0.1:{port}: {' '.join(lines).strip()}")


def check_health(record: Record) -> tuple[bool, str]:
    stored = secrets.load(Path(record["home"]))
    return ping(record["port"], stored["redis_password"]) if stored else (False, "no secrets file")


SERVICE = Service("redis", port_keys=("redis",), stop_grace_s=10.0, check_health=check_health)


def spec(home: Path, ports: dict[str, int], password: str) -> Record:
    """Command, environment, config file and log file of the server."""
    data = home / "redis"
    data.mkdir(parents=True, exist_ok=True)
    config = home / "stack" / "redis.conf"
    config.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write("\n".join([
            "bind 127.0.0.1", f"port {ports['redis']}", "protected-mode yes", f"requirepass {password}",
            'save ""', "appendonly no", f"dir {data}", "daemonize no", "loglevel notice", ""]))
    return {
        "command": [server() or "redis-server", str(config)], "env": base_env(home), "config": str(config), "home": str(home),
        "port": ports["redis"], "url": f"redis://127.0.0.1:{ports['redis']}", "log": str(home / "stack" / "redis.log"),
    }
