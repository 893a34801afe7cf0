"""One task of a DAG file run by Airflow's own task supervisor, as a worker of the stack runs it:
`python -m tests.operators.supervised_task DAGS_DIR DAG_FILE DAG_ID TASK_ID LOG_PATH`.

The supervisor forks the task process, reads its stdout, stderr and structured-log channels and writes the task
log (one JSON object a line, with the level the UI colours) to LOG_PATH. Only the execution API server is not
there: its answers come from `execution_api` below (a run context for the task's start, "not found" for look-ups
such as connections, "done" for the rest). Once the file named by SUPERVISED_TASK_STOP_FILE exists, a heartbeat
is answered 409, as the server answers when the task was marked failed or cleared in the UI: the supervisor then
ends the task (SIGTERM, SIGKILL 5 s later). SUPERVISED_TASK_TRY_NUMBER: the try to run (default 1). Run it in a
process of its own: Airflow reads AIRFLOW_HOME and the DAGs folder when it is first imported, and the supervisor
configures the logging of the process that calls it.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import uuid
from pathlib import Path

NOW = "2026-01-01T00:00:00Z"


def execution_api(dag_id: str, run_id: str):
    import httpx

    stop_file = os.environ.get("SUPERVISED_TASK_STOP_FILE")

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/heartbeat") and stop_file and os.path.exists(stop_file):
            return httpx.Response(409, json={"detail": {"reason": "invalid_state", "message": "marked failed"}})
        if request.method == "PATCH" and request.url.path.endswith("/run"):
            return httpx.Response(200, json={"dag_run": {
                "dag_id": dag_id, "run_id": run_id, "logical_date": NOW, "data_interval_start": NOW,
                "data_interval_end": NOW, "run_after": NOW, "start_date": NOW, "end_date": None,
                "run_type": "manual", "state": "running", "conf": {}, "consumed_asset_events": [],
                "partition_key": None}, "max_tries": 0})
        if request.method == "GET":
            return httpx.Response(404, json={"detail": {"reason": "not_found", "message": "not found"}})
        return httpx.Response(204)

    return answer


def main(dags_dir: str, dag_file: str, dag_id: str, task_id: str, log_path: str) -> int:
    os.environ.update({"AIRFLOW_HOME": tempfile.mkdtemp(prefix="airflow-home-"), "AIRFLOW__CORE__DAGS_FOLDER": dags_dir,
                       "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__CORE__UNIT_TEST_MODE": "False"})
    import httpx
    from airflow.sdk.api.client import Client
    from airflow.sdk.api.datamodels._generated import BundleInfo, TaskInstance
    from airflow.sdk.execution_time.supervisor import supervise_task

    run_id = "manual__supervised"
    client = Client(base_url=None, dry_run=True, token="", transport=httpx.MockTransport(execution_api(dag_id, run_id)))
    try_number = int(os.environ.get("SUPERVISED_TASK_TRY_NUMBER", "1"))
    ti = TaskInstance(id=uuid.uuid4(), task_id=task_id, dag_id=dag_id, run_id=run_id, try_number=try_number,
                      dag_version_id=uuid.uuid4())
    return supervise_task(ti=ti, bundle_info=BundleInfo(name="dags-folder"), dag_rel_path=dag_file, token="",
                          client=client, log_path=log_path)


def read_log(path: Path) -> list[dict]:
    """The task log's records: level, logger (task.stdout, task.stderr, or the logger's name) and event."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
