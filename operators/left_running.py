"""MLflow runs that a task's process left `RUNNING`: it was killed before it could end them (SIGKILL after
Airflow's 5 s, the kernel's OOM killer, a spot machine or a Celery worker gone), so nothing ever will, and the
MLflow UI showed them running for good, beside the retry that replaced them.

Every MLflow run a task starts, in its own process or in the Ray Train and Ray Tune workers it drives, carries the
task try it belongs to (`tagged_with_task`: tags `airflow.dag_id`, `airflow.run_id`, `airflow.task_id`,
`airflow.map_index`, `airflow.try_number`, through MLflow's own MLFLOW_RUN_CONTEXT, which the workers are
forwarded). Those processes end with the try's: Ray ends a driver's actors when the driver dies. So
`end_left_running` ends them `KILLED`, with the tag `airflow.left_running` saying why:
- when a task starts its second or later try: the earlier tries' runs of that task that are still RUNNING;
- when the DAG run's report task runs (every other task is done): any run of the DAG run still RUNNING.
The try that left it gets a task record (operators.run_records, state `killed`) if it has none, as a killed try
writes none of its own: the run report's timeline and failure note show it.

Not tagged, so never ended here: the runs of a step that runs as a Ray job (operators.ray_jobs). The job outlives
the task that submitted it, and a retry attaches to it again while it runs.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

RUN_CONTEXT_ENV = "MLFLOW_RUN_CONTEXT"  # MLflow's: a JSON object of tags for every run started in the process
TAGS = ("airflow.dag_id", "airflow.run_id", "airflow.task_id", "airflow.map_index", "airflow.try_number")
REASON_TAG = "airflow.left_running"
STATUS = "KILLED"


def task_tags(ti: Any) -> dict[str, str]:
    """The tags of the MLflow runs a task try starts."""
    map_index = ti.map_index if ti.map_index is not None else -1
    return dict(zip(TAGS, (ti.dag_id, ti.run_id, ti.task_id, str(map_index), str(ti.try_number))))


@contextlib.contextmanager
def tagged_with_task(ti: Any) -> Iterator[None]:
    """While the block runs, every MLflow run started in this process (and in the Ray workers it starts, which are
    forwarded MLFLOW_RUN_CONTEXT) is tagged with the task try; tags the environment already gave are kept."""
    before = os.environ.get(RUN_CONTEXT_ENV)
    try:
        given = json.loads(before) if before else {}
    except ValueError:
        given = {}
    os.environ[RUN_CONTEXT_ENV] = json.dumps({**(given if isinstance(given, dict) else {}), **task_tags(ti)})
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(RUN_CONTEXT_ENV, None)
        else:
            os.environ[RUN_CONTEXT_ENV] = before


def _filter(tags: dict[str, str]) -> tuple[str, dict[str, str]]:
    """MLflow's filter for RUNNING runs with these tags, and the tags it could not say (a quote cannot be escaped
    in its syntax), to be matched in Python."""
    said = {k: v for k, v in tags.items() if "'" not in v}
    clauses = ["attributes.status = 'RUNNING'", *(f"tags.`{k}` = '{v}'" for k, v in said.items())]
    return " and ".join(clauses), {k: v for k, v in tags.items() if k not in said}


@dataclass(frozen=True)
class Ended:
    """A run ended here, and the try that left it."""

    run_id: str
    task_id: str
    map_index: int
    try_number: int
    started_at: str  # the run's start (ISO 8601, UTC): about when its try started
    why: str


def end_left_running(tracking_uri: str, ti: Any, whole_run: bool) -> list[Ended]:
    """End KILLED the MLflow runs left RUNNING by earlier tries of task instance `ti` (whole_run: by any task of
    its DAG run, for the report, which runs when every other task is done). Never raises: a store that cannot be
    searched is a warning, never the task's failure."""
    from mlflow import MlflowClient
    from mlflow.entities import ViewType

    wanted = dict(zip(TAGS[:2], (ti.dag_id, ti.run_id)))
    if not whole_run:
        wanted.update(zip(TAGS[2:4], (ti.task_id, str(ti.map_index if ti.map_index is not None else -1))))
    query, left = _filter(wanted)
    ended = []
    try:
        client = MlflowClient(tracking_uri)
        experiments = [e.experiment_id for e in client.search_experiments(view_type=ViewType.ACTIVE_ONLY,
                                                                           max_results=50000)]
        found = client.search_runs(experiments, query, max_results=50000) if experiments else []
        for run in found:
            tags = run.data.tags
            if any(tags.get(k) != v for k, v in left.items()):
                continue
            try_number = int(tags.get(TAGS[4], "0") or 0)
            if not whole_run and try_number >= ti.try_number:
                continue  # this try's own runs (none yet) and later ones
            who = f"{tags.get(TAGS[2])} try {try_number}"
            why = (f"{who} ended without ending this run (its process was killed: SIGKILL, out of memory, its "
                   f"machine or worker lost); ended {STATUS} by "
                   + ("the DAG run's report" if whole_run else f"try {ti.try_number} of the task"))
            client.set_tag(run.info.run_id, REASON_TAG, why)
            client.set_terminated(run.info.run_id, STATUS)
            log.warning("MLflow run %s (%s, experiment %s) was left RUNNING by %s: ended %s", run.info.run_id,
                        run.info.run_name, run.info.experiment_id, who, STATUS)
            started = dt.datetime.fromtimestamp(run.info.start_time / 1000, dt.UTC)
            ended.append(Ended(run.info.run_id, str(tags.get(TAGS[2])), int(tags.get(TAGS[3], "-1") or -1),
                               try_number, started.isoformat(timespec="milliseconds"), why))
    except Exception as exc:  # noqa: BLE001 - see the docstring
        log.warning("could not look for MLflow runs left RUNNING by earlier tries at %s: %s", tracking_uri, exc)
    return ended


def end_and_record(context: Any, whole_run: bool) -> list[Ended]:
    """end_left_running for the running task (its context), in the store its runs use; each try that left a run
    gets a task record (state `killed`) in the run's directory unless it wrote one, so the run report's timeline
    and failure note show it (a killed try writes none of its own)."""
    from bert_core.io.tracking import default_tracking_uri
    from operators.run_records import write_killed_record

    ended = end_left_running(default_tracking_uri(), context["ti"], whole_run)
    for e in ended:
        write_killed_record(context, e.task_id, e.map_index, e.try_number, e.started_at,
                            f"killed: no word from its process after it started (SIGKILL, out of memory, its machine "
                            f"or worker lost); its MLflow run {e.run_id} was left RUNNING, now {STATUS}")
    return ended
