"""What `up` recorded, so that `status` and `down` work from any shell: HOME/stack/state.json (ports; per
service pid, start time, URLs, log file), the lock that keeps one `up`/`down` at a time per home, and the ports."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bert_core.errors import BertPipelineError

# Port key -> default port, and the `stack up` flag that sets it (named in errors about the port). Redis is not on
# its usual 6379: that is Ray's GCS port, and the production profile runs both.
DEFAULT_PORTS = {"mlflow": 5000, "airflow": 8080, "ray_dashboard": 8265, "ray_gcs": 6379, "postgres": 5432,
                 "redis": 6380}
PORT_FLAGS = {"mlflow": "--mlflow-port", "airflow": "--airflow-port", "ray_dashboard": "--ray-dashboard-port",
              "ray_gcs": "--ray-port", "postgres": "--postgres-port", "redis": "--redis-port"}


def stack_home(arg: str | None) -> Path:
    """`--home`, else $BERT_PIPELINE_HOME, else ./.bert-pipeline (the home `bert-pipeline demo` uses too)."""
    return Path(arg or os.environ.get("BERT_PIPELINE_HOME") or Path.cwd() / ".bert-pipeline").absolute()


@dataclass
class Stack:
    home: Path
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def dir(self) -> Path:
        return self.home / "stack"

    @property
    def state_file(self) -> Path:
        return self.dir / "state.json"

    @property
    def services(self) -> dict[str, dict[str, Any]]:
        """Service name -> the record `up` wrote when it started it."""
        return self.state["services"]

    def load(self) -> Stack:
        if self.state_file.is_file():
            try:
                self.state = json.loads(self.state_file.read_text())
            except ValueError as exc:
                raise BertPipelineError(f"{self.state_file}: unreadable stack state ({exc}); stop leftover "
                                        "processes by hand and delete the file") from None
        self.state.setdefault("services", {})
        return self

    def save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state, indent=2) + "\n")
        os.replace(tmp, self.state_file)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """One `up`/`down` at a time per home: two concurrent `up`s would both find the ports free."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / "lock", "w") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise BertPipelineError(f"another `bert-pipeline stack` command is working on {self.home}; "
                                        "wait for it to finish") from None
            yield


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As servers bind: connections of a stopped server in TIME_WAIT do not make the port busy.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
