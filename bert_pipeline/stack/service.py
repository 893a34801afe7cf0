"""What the supervisor knows of a service, and what every service's process shares (its environment, the CLIs of
this interpreter's environment)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bert_core.errors import BertPipelineError
from bert_pipeline.run_output import LOG_ENV

Record = dict[str, Any]  # what `up` records of a started service in state.json: pid, started, url, health_url, log...


@dataclass(frozen=True)
class Service:
    name: str
    port_keys: tuple[str, ...]  # its keys in the stack's ports (state.DEFAULT_PORTS)
    stop_grace_s: float  # seconds between SIGTERM and SIGKILL when it is stopped
    check_health: Callable[[Record], tuple[bool, str]]  # (healthy, short reason), from its own health endpoint
    # Its main process stops its own children in order on SIGTERM (processes.StopTarget.leader_first).
    leader_first: bool = False
    # Where to read why it failed, beyond its log file (a phrase starting " and ..."), or None.
    more_logs: Callable[[Record], str] | None = None
    # The signal a leader-first main process is asked to stop with (processes.StopTarget.stop_signal).
    stop_signal: int = signal.SIGTERM
    # Run by `up` with the service's spec (command, env, ...) and `up`'s timeout: `prepare` before its process
    # starts (PostgreSQL's initdb, Airflow's `db migrate`), `ready` once it is healthy (the databases the other
    # services use). An error stops `up`, which then stops what it started.
    prepare: Callable[[Record, float], None] | None = None
    ready: Callable[[Record, float], None] | None = None

    def logs(self, record: Record) -> str:
        return record["log"] + (self.more_logs(record) if self.more_logs else "")


def executable(name: str) -> str:
    """The CLI `name` of this interpreter's environment: the venv's bin directory need not be on PATH."""
    path = Path(sys.executable).parent / name
    if not path.is_file():
        raise BertPipelineError(f"`{name}` not found next to {sys.executable}: install the project with "
                                "`pip install -e .` in this environment")
    return str(path)


def base_env(home: Path) -> dict[str, str]:
    """Every service's environment: this one, without what would point it at another stack."""
    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)
    # `airflow standalone` starts its components as `airflow ...` from PATH (FACTS.md).
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    env["BERT_PIPELINE_HOME"] = str(home)
    # Ray's authentication (RAY_AUTH_MODE, RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH) stays the user's: a cluster of
    # theirs (--ray-address) checks their token; the stack's own head sets its own (ray_head.auth_env).
    env["PYTHONUNBUFFERED"] = "1"  # log lines reach the log files as they happen
    # What a service prints goes to a file (its log, a task's log), as `bert-pipeline run`'s output goes to the run
    # log: the same settings, unless the user set them. Ray's workers get them from the head's raylet.
    for name, value in LOG_ENV.items():
        env.setdefault(name, value)
    for name in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI"):
        env.pop(name, None)
    return env
