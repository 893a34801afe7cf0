"""The `report` task each pipeline DAG ends with (bert_demo, bert_pretraining, bert_finetune): the run's
report.html, built from its work directory by the run itself, so a run triggered in the Airflow UI or over the
REST API gets one as a run of `bert-pipeline demo` / `run` does.

It is an Airflow teardown task of the DAG's last tasks: it runs when they are done, whatever their outcome (a
failed run's report shows how far it got), and, as teardowns are, it is left out of the DAG run's state: the
run's outcome is its work's, and a report that could not be built is a failed `report` task in a run that
otherwise stands. No retries: what failed (a record it cannot read, an MLflow server that is down) is in its
log, and `bert-pipeline report WORK_DIR` builds it again.
"""

from __future__ import annotations

import logging
from typing import Any

from operators.airflow_tasks import bert_task
from operators.report import TASK_ID

log = logging.getLogger(__name__)


@bert_task(task_id=TASK_ID, retries=0)
def report() -> dict[str, Any]:
    # The run's directory as the task records find it (not from the plan's result: a run whose plan failed has
    # a report too, showing that).
    from airflow.sdk import get_current_context

    from operators.report.build import from_run_dir
    from operators.run_records import context_run_dir

    built = from_run_dir(context_run_dir(get_current_context()))
    logged = built.mlflow
    log.info("Report: %s", built.path)
    if logged is not None:
        log.info("Report in MLflow (experiment bert-runs): %s", logged.page or f"run {logged.run_id}")
    return {"report": built.path, "mlflow_run_id": logged.run_id if logged else None,
            "mlflow_page": logged.page if logged else None}


def after(*last_tasks: Any) -> Any:
    """The report task, as the teardown of `last_tasks` (the DAG's leaves): `report_task.after(summary(...))`."""
    built = report().as_teardown()
    for upstream in last_tasks:
        upstream >> built
    return built
