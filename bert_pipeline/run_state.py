"""A DAG run's task states, read from Airflow's metadata DB while the run goes on.

Why the DB and not Airflow's listener hooks (a plugin's on_task_instance_running/success/failed): the
task-instance rows are what the scheduler and the UI read, so they are true however a task runs (in this
process under dag.test(), or on an executor's worker), and they are written even when a hook never fires (a
task process killed by the OOM killer, an exception before the task runner starts, dag.test() marking a task
failed itself). Listener hooks run inside the task's own process and call path: they see only the tasks of that
process, and a slow or failing hook delays or breaks the task it watches. Polling costs one indexed SELECT per
interval, in short transactions that never hold the sqlite file locked (a writer waits at most one read).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TaskInstanceState:
    """One task instance's row (a mapped task has one per map index), with its return value once it succeeded."""

    task_id: str
    map_index: int
    state: str | None  # Airflow's TaskInstanceState value; None before it is scheduled
    start: dt.datetime | None
    end: dt.datetime | None
    try_number: int
    max_tries: int
    value: Any = None  # the XCom return_value (a success only)


def read_states(dag_id: str, run_id: str, known_values: dict[tuple[str, int], Any]) -> list[TaskInstanceState]:
    """The run's task-instance rows; the return value of each successful one (read once: `known_values` caches
    them across calls, keyed by (task_id, map_index))."""
    from airflow import settings
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from sqlalchemy import select

    with settings.engine.connect() as conn:
        rows = conn.execute(
            select(TaskInstance.task_id, TaskInstance.map_index, TaskInstance.state, TaskInstance.start_date,
                   TaskInstance.end_date, TaskInstance.try_number, TaskInstance.max_tries)
            .where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id)).all()
        missing = [(r.task_id, r.map_index) for r in rows
                   if r.state == "success" and (r.task_id, r.map_index) not in known_values]
        if missing:
            values = conn.execute(
                select(XComModel.task_id, XComModel.map_index, XComModel.value)
                .where(XComModel.dag_id == dag_id, XComModel.run_id == run_id, XComModel.key == "return_value",
                       XComModel.task_id.in_({t for t, _ in missing}))).all()
            found = {(v.task_id, v.map_index): XComModel.deserialize_value(v) for v in values}
            for key in missing:
                known_values[key] = found.get(key)
        conn.rollback()  # end the read transaction at once
    return [TaskInstanceState(r.task_id, r.map_index, str(r.state) if r.state else None, r.start_date,
                              r.end_date, r.try_number or 0, r.max_tries or 0,
                              known_values.get((r.task_id, r.map_index)))
            for r in rows]


def prepare_orm() -> None:
    """Import the models read_states reads and configure SQLAlchemy's mappers, in the calling thread, before
    another thread queries. Airflow imports every model module from a hook that SQLAlchemy runs holding its
    configure lock (before_configured -> import_all_models, on the process's first query), and a mapped class takes
    that lock while its module is being imported. A watch thread whose first poll was that first query, while the
    main thread was importing a model module in dag.test() (or the other way round), deadlocked: each held the lock
    the other waited for, and Python's import deadlock detection does not see SQLAlchemy's. The demo hung so, for
    good and silently, once in CI and once in a local full suite."""
    from airflow.models.taskinstance import TaskInstance  # noqa: F401
    from airflow.models.xcom import XComModel  # noqa: F401
    from sqlalchemy.orm import configure_mappers

    configure_mappers()


class RunWatch(threading.Thread):
    """Polls the run's rows every `interval` seconds and hands each snapshot to `on_update` (in this thread),
    until stopped; `stop()` makes one last read so the final states are never missed."""

    def __init__(self, dag_id: str, run_id: str, on_update: Callable[[list[TaskInstanceState]], None],
                 interval: float = 0.5):
        super().__init__(name=f"run-watch-{dag_id}", daemon=True)
        self.dag_id, self.run_id, self.on_update, self.interval = dag_id, run_id, on_update, interval
        self._values: dict[tuple[str, int], Any] = {}
        self._stopping = threading.Event()

    def poll(self) -> list[TaskInstanceState] | None:
        try:
            states = read_states(self.dag_id, self.run_id, self._values)
        except Exception as exc:  # noqa: BLE001  (sqlite busy, a DB restart: the next poll reads again)
            log.debug("reading the run's task states failed: %s", exc)
            return None
        self.on_update(states)
        return states

    def start(self) -> None:
        prepare_orm()
        super().start()

    def run(self) -> None:
        while not self._stopping.wait(self.interval):
            self.poll()

    def stop(self) -> list[TaskInstanceState] | None:
        self._stopping.set()
        self.join(timeout=30)
        for _ in range(5):  # the last read must succeed: it carries the final states and return values
            states = self.poll()
            if states is not None:
                return states
            self._stopping.wait(0.5)
        return None
