"""What each DAG task did and when, recorded by the task itself: one small JSON per task try in its run's work
directory, `<run dir>/tasks/<task_id>[-<map_index>].try<N>.json`, written (atomically) when the try ends. A try
killed before it could write one (SIGKILL, out of memory) is recorded `killed` by the task's next try or the run's
report, where it left an MLflow run RUNNING (operators.left_running); when it ended is not known then.

The run report (operators/report) draws its timeline from these records, so it needs neither Airflow's
metadata database nor the scheduler that ran the tasks: a run's directory (local or s3://) says what ran, how
long, and what failed. @bert_task (operators.airflow_tasks) wraps every task in `recorded()`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import socket
import time
from collections.abc import Iterator
from typing import Any

log = logging.getLogger(__name__)

TASKS_DIR = "tasks"


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def _airflow_context() -> Any | None:
    """The running task's Airflow context; None when the function is called outside a task (tests, Python)."""
    from airflow.sdk import get_current_context

    try:
        return get_current_context()
    except RuntimeError:
        return None


@contextlib.contextmanager
def recorded() -> Iterator[None]:
    """Record the enclosed task try (state, start, end, the error's first line) in its run's directory."""
    context = _airflow_context()
    if context is None:
        yield
        return
    started_at, start = _now(), time.monotonic()
    try:
        yield
    except BaseException as exc:
        write_record(context, started_at, time.monotonic() - start, "failed",
                     f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}")
        raise
    write_record(context, started_at, time.monotonic() - start, "success")


def record_name(task_id: str, map_index: int, try_number: int) -> str:
    return f"{task_id}{f'-{map_index}' if map_index >= 0 else ''}.try{try_number}.json"


def tracking_uri_to_record() -> str:
    """The MLflow tracking URI the task used, with any password in it replaced by *** (a record is plain text)."""
    from urllib.parse import urlsplit, urlunsplit

    from bert_core.io.tracking import default_tracking_uri

    uri = default_tracking_uri()
    parts = urlsplit(uri)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
        uri = urlunsplit(parts._replace(netloc=netloc))
    return uri


def context_run_dir(context: Any) -> str:
    """The work directory of the running task's DAG run (a KeyError for a DAG outside this project). From the
    run's params, as the plan task chose it, so that a run whose plan failed still has one."""
    from operators.locations import run_dir

    ti = context["ti"]
    return run_dir(ti.dag_id, dict(context.get("params") or {}), ti.run_id)


def write_record(context: Any, started_at: str, duration_s: float, state: str, error: str | None = None) -> str | None:
    """Write one task try's record; returns its location, or None for a DAG outside this project. Never raises:
    a record that cannot be written (e.g. the run directory is unreachable) is a warning, never the task's
    failure, and never hides the task's own error."""
    ti = context["ti"]
    map_index = ti.map_index if ti.map_index is not None else -1
    record = {"dag_id": ti.dag_id, "run_id": getattr(ti, "run_id", None), "task_id": ti.task_id,
              "map_index": map_index, "try_number": getattr(ti, "try_number", None), "state": state,
              "started_at": started_at, "finished_at": _now(), "duration_s": round(duration_s, 3),
              "hostname": socket.gethostname(), "error": error, "tracking_uri": tracking_uri_to_record()}
    return _write(context, record, replace=True)


KILLED = "killed"  # the state of a try whose process was killed before it could record itself


def write_killed_record(context: Any, task_id: str, map_index: int, try_number: int, started_at: str,
                        error: str) -> str | None:
    """Record a try of the running task's DAG run that was killed before it recorded itself (it left an MLflow
    run RUNNING: operators.left_running), unless it has a record. When it ended is not known: `duration_s` is None
    and `finished_at` its start."""
    ti = context["ti"]
    record = {"dag_id": ti.dag_id, "run_id": ti.run_id, "task_id": task_id, "map_index": map_index,
              "try_number": try_number, "state": KILLED, "started_at": started_at, "finished_at": started_at,
              "duration_s": None, "hostname": None, "error": error, "tracking_uri": tracking_uri_to_record()}
    return _write(context, record, replace=False)


def _write(context: Any, record: dict[str, Any], replace: bool) -> str | None:
    from bert_core.io import storage

    try:
        directory = context_run_dir(context)
    except KeyError:
        return None
    except Exception as exc:  # noqa: BLE001 - the run dir's own problem is the task's to report, not ours
        log.warning("task record of %s not written: its run directory is unusable (%s)", record["task_id"], exc)
        return None
    where = storage.join(directory, TASKS_DIR, record_name(record["task_id"], record["map_index"],
                                                           record["try_number"]))
    try:
        if not replace and storage.exists(where):
            return None
        storage.write_text(where, json.dumps(record, indent=2) + "\n")
    except Exception as exc:  # noqa: BLE001 - see write_record's docstring
        log.warning("task record %s not written: %s", where, exc)
        return None
    return where
